#!/bin/bash
# Miniature experiments (CPU, 2 threads) reported in examples/EXPERIMENTS.md.
# Usage: bash examples/experiments.sh [data|exp1|exp2|exp3|exp4|results|topics|all]   (from the repository root)
# Every run writes runs/<name>/ (git-ignored), its console output to runs/<name>.out and its wall
# time in seconds to runs/<name>.time; every evaluation writes runs/eval_<name>.json.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=2
MINI=${MINI:-../shared/models/bert-mini-mlm}  # the raw masked-LM stand-in for bert-base (README, Results)
DATA=${EVAL_DATA_DIR:-data}  # python evaluate.py --fetch-data data
mkdir -p runs
run() {  # run NAME COMMAND...: time one command, keep its output
    local name=$1; shift
    local s=$(date +%s.%N); "$@" > "runs/$name.out" 2>&1; local rc=$?; local e=$(date +%s.%N)
    python -c "print(round($e-$s,1))" > "runs/$name.time"
    echo "$name rc=$rc $(cat runs/$name.time)s" | tee -a runs/progress.log
}
# CPU time boxes: some runs are stopped after a wall budget (`timeout 150`); on SIGTERM the trainer finishes
# its step and saves runs/<name>/model (and checkpoint/), which is what gets scored. The steps reached are in
# runs/<name>/log.jsonl and in EXPERIMENTS.md; on a faster machine a box may reach --steps and finish.
enc() {  # the model a run left (finished, or stopped by its time box)
    echo "runs/$1/model"
}
ev() {  # ev NAME MODEL TASKS [--pooling P]
    local name=$1 model=$2 tasks=$3; shift 3
    run "eval_$name" python evaluate.py --model "$model" --tasks "$tasks" --data-dir "$DATA" --json "runs/eval_$name.json" "$@"
}

data() {
    # the unlabelled STS sentences (STS12-16, STS-b, SICK): 89,192 lines, used whole (not deduplicated)
    python -c "from lib.datafiles import sts_corpus; open('runs/sts_sentences.txt','w').write('\n'.join(sts_corpus('$DATA')))"
    # the target domain: unique sentences of the TwitterPara test sets (URL corpus cols 1-2, PIT test.data cols 3-4)
    DATA=$DATA python - <<'PY'
import os
data = os.environ["DATA"]
seen, s = [], set()
def add(x):
    x = x.strip()
    if x and x not in s: s.add(x); seen.append(x)
for line in open(f'{data}/twitterpara/Twitter_URL_Corpus_test.txt', encoding='utf-8'):
    if line.strip():
        f = line.rstrip('\n').split('\t'); add(f[0]); add(f[1])
for line in open(f'{data}/twitterpara/test.data', encoding='utf-8'):
    f = line.rstrip('\n').split('\t'); add(f[2]); add(f[3])
open('runs/twitter_sentences.txt', 'w', encoding='utf-8').write('\n'.join(seen) + '\n')
print(len(seen), 'twitter sentences')
PY
}

exp1() {  # from the raw masked-LM bert-mini on the STS sentences, scored on STS-b
    ev raw_mini_mean $MINI stsb --pooling mean
    ev raw_mini_cls  $MINI stsb --pooling cls
    exp1_tsdae; exp1_consert; exp1_simcse
}
exp1_tsdae() {
    run tsdae_mini_lr1e-4 python tsdae.py --corpus runs/sts_sentences.txt --model $MINI --steps 516 --lr 1e-4 --save-every 0 --overwrite --out runs/tsdae_mini_lr1e-4
    ev tsdae_mini_lr1e-4 runs/tsdae_mini_lr1e-4/model stsb
}
exp1_consert() {
    run consert_mini python consert.py --corpus runs/sts_sentences.txt --model $MINI --steps 100 --batch-size 96 --lr 2e-5 --optimizer pytorch --temperature 0.05 --save-every 0 --overwrite --out runs/consert_mini
    ev consert_mini $(enc consert_mini) stsb
}
exp1_simcse() {
    run simcse_mini timeout 150 python consert.py --corpus runs/sts_sentences.txt --model $MINI --view1 simcse --view2 simcse --encoder-dropout on --steps 100 --batch-size 64 --lr 3e-5 --optimizer pytorch --temperature 0.05 --save-every 0 --overwrite --out runs/simcse_mini
    ev simcse_mini $(enc simcse_mini) stsb
}

exp2() {  # domain adaptation of the default all-MiniLM-L6-v2 to the TwitterPara sentences
    exp2_raw; exp2_tsdae; exp2_consert
}
exp2_raw() {
    ev raw_minilm_twitter "" twitterpara   # (empty --model: evaluate.py's default, the shipped MiniLM)
}
exp2_tsdae() {
    run tsdae_minilm_twitter timeout 150 python tsdae.py --corpus runs/twitter_sentences.txt --pooling mean --steps 150 --lr 3e-5 --save-every 0 --overwrite --out runs/tsdae_minilm_twitter
    ev tsdae_minilm_twitter $(enc tsdae_minilm_twitter) twitterpara
}
exp2_consert() {
    run consert_minilm_twitter timeout 150 python consert.py --corpus runs/twitter_sentences.txt --steps 50 --batch-size 96 --lr 2e-5 --optimizer pytorch --temperature 0.05 --save-every 0 --overwrite --out runs/consert_minilm_twitter
    ev consert_minilm_twitter $(enc consert_minilm_twitter) twitterpara
}

exp1b() {  # TSDAE at the paper's learning rate
    run tsdae_mini_lr3e-5 python tsdae.py --corpus runs/sts_sentences.txt --model $MINI --steps 1000 --lr 3e-5 --save-every 0 --overwrite --out runs/tsdae_mini_lr3e-5
    ev tsdae_mini_lr3e-5 runs/tsdae_mini_lr3e-5/model stsb
}

tsdae_abl() {  # tsdae_abl NOISE RATIO [SEED]: 300 steps of 8 at lr 1e-4 from bert-mini, scored on STS-b dev
    local seed=${3:-0} n=tsdae_abl_$1$2
    [ "$seed" = 0 ] || n=${n}_seed$seed
    run $n python tsdae.py --corpus runs/sts_sentences.txt --model $MINI --steps 300 --lr 1e-4 --noise $1 --noise-ratio $2 --seed $seed --save-every 0 --overwrite --out runs/$n
    ev $n runs/$n/model stsb-dev
}
exp3() { exp3_types; exp3_ratios; exp3_seeds; }  # TSDAE noise ablation on bert-mini (paper tables 5 and 6 in miniature)
exp3_types()  { for noise in delete swap mask replace add; do tsdae_abl $noise 0.3; done; }
exp3_ratios() { tsdae_abl delete 0.6; tsdae_abl delete 0.9; }
exp3_seeds()  { for seed in 1 2; do tsdae_abl delete 0.3 $seed; tsdae_abl delete 0.6 $seed; done; }  # how big is seed noise?

consert_abl() {  # consert_abl NAME ARGS...: 80 steps of 96 at lr 2e-5 from bert-mini, scored on STS-b dev
    local n=consert_abl_$1; shift
    run $n python consert.py --corpus runs/sts_sentences.txt --model $MINI --steps 80 --batch-size 96 --lr 2e-5 --optimizer pytorch --save-every 0 --overwrite --out runs/$n "$@"
    ev $n runs/$n/model stsb-dev
}
exp4() { exp4_temperatures; exp4_views; }  # ConSERT temperature and view-pair ablation on bert-mini
exp4_temperatures() {  # views feature_cutoff + shuffle
    consert_abl t0.05 --temperature 0.05
    consert_abl t0.1 --temperature 0.1        # also the feature_cutoff+shuffle row of the view table
    consert_abl t0.2 --temperature 0.2
}
exp4_views() {  # temperature 0.1
    consert_abl tokcut_shuffle --temperature 0.1 --view1 token_cutoff --view2 shuffle
    consert_abl none_none --temperature 0.1 --view1 none --view2 none
    consert_abl dropout_dropout --temperature 0.1 --view1 dropout --view2 dropout
}

results() {  # the README's Results rows, seeds 0 1 2: the README's commands with --seed, then mean ± sd
    for seed in 0 1 2; do
        local c=consert-mini_seed$seed t=tsdae-mini_seed$seed
        run $c python consert.py --model $MINI --sts-corpus $DATA --lr 2e-5 --temperature 0.05 --optimizer pytorch --steps 300 --eval-data $DATA --eval-every 50 --seed $seed --overwrite --out runs/$c
        ev $c runs/$c/best stsb
        ev $c-last2 runs/$c/best stsb --pooling last2-mean
        run $t python tsdae.py --corpus runs/sts_sentences.txt --model $MINI --steps 516 --lr 1e-4 --seed $seed --overwrite --out runs/$t
        ev $t runs/$t/model stsb
    done
    results_table
}
results_table() {  # the table of the README's Results rows, from the runs of `results`
    python - <<'PY'
import json, statistics
from pathlib import Path

def band(values):
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"

print("| model | STS-b dev, seeds 0 1 2 | mean ± sd | STS-b test, seeds 0 1 2 | mean ± sd | train wall s |")
print("| --- | --- | --- | --- | --- | --- |")
ROWS = [("ConSERT, best dev", "eval_consert-mini_seed{}", "consert-mini_seed{}"),  # (row, its scores, its run)
        ("same, last2-mean", "eval_consert-mini_seed{}-last2", "consert-mini_seed{}"),
        ("TSDAE (CLS)", "eval_tsdae-mini_seed{}", "tsdae-mini_seed{}")]
for name, scores_of, run_of in ROWS:
    scores = [json.loads(Path(f"runs/{scores_of.format(s)}.json").read_text())["details"]["stsb"] for s in range(3)]
    dev, test = [x["dev"] for x in scores], [x["test"] for x in scores]
    wall = [float(Path(f"runs/{run_of.format(s)}.time").read_text()) for s in range(3)]
    print(f"| {name} | {' / '.join(f'{x:.2f}' for x in dev)} | {band(dev)} | {' / '.join(f'{x:.2f}' for x in test)} | "
          f"{band(test)} | {min(wall):.0f}-{max(wall):.0f} |")
for s in range(3):  # the step of each best/ checkpoint: the best STS-b dev during training
    log = [json.loads(line) for line in Path(f"runs/consert-mini_seed{s}/log.jsonl").read_text().splitlines()]
    print(f"seed {s}: best/ is step", max((r for r in log if "eval" in r), key=lambda r: r["eval"])["step"])
PY
}

topics() {  # the README's runs on examples/topics.txt (MiniLM), seeds 0 1 2: the README's commands with --seed
    for seed in 0 1 2; do
        local t=tsdae-topics_seed$seed c=consert-topics_seed$seed
        run $t python tsdae.py --corpus examples/topics.txt --pooling mean --epochs 10 --seed $seed --overwrite --out runs/$t
        run $c python consert.py --corpus examples/topics.txt --lr 2e-5 --temperature 0.05 --batch-size 32 --epochs 20 --optimizer pytorch --seed $seed --overwrite --out runs/$c
        for n in $t $c; do
            run neighbours_$n python examples/neighbours.py --model runs/$n/model --corpus examples/topics.txt --labels examples/topics_labels.txt
            ev $n runs/$n/model stsb
        done
    done
    topics_table
}
topics_table() {  # label agreement of the 3 nearest neighbours, STS-b test and the last loss of the runs of `topics`
    python - <<'PY'
import json, re, statistics
from pathlib import Path

def band(values):
    return f"{' / '.join(f'{x:.2f}' for x in values)} ({statistics.mean(values):.2f} ± {statistics.stdev(values):.2f})"

print("| run | neighbours on its topic, % | STS-b test | last loss | train wall s |\n| --- | --- | --- | --- | --- |")
for run in ("tsdae-topics", "consert-topics"):
    runs = [f"{run}_seed{s}" for s in range(3)]
    agree = [float(re.search(r"label agreement .*: ([\d.]+)%", Path(f"runs/neighbours_{r}.out").read_text())[1]) for r in runs]
    test = [json.loads(Path(f"runs/eval_{r}.json").read_text())["stsb"] for r in runs]
    loss = [json.loads(Path(f"runs/{r}/log.jsonl").read_text().splitlines()[-1])["loss"] for r in runs]
    wall = [float(Path(f"runs/{r}.time").read_text()) for r in runs]
    print(f"| {run} | {band(agree)} | {band(test)} | {band(loss)} | {min(wall):.0f}-{max(wall):.0f} |")
PY
}

all() { data; exp1; exp2; exp1b; exp3; exp4; results; topics; }
# run the named steps in order (default: all), e.g. `bash examples/experiments.sh exp1_consert exp2_tsdae`
for step in "${@:-all}"; do "$step"; done
