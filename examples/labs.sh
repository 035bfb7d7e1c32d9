#!/bin/bash
# The labs of LABS.md: every arm for seeds 0 1 2, then the numbers of its tables.
# Usage: bash examples/labs.sh [--dry-run] [data|lab1|lab2|lab3|lab4|lab5|lab6|summary|all]...   (from the repository root)
#   --dry-run   print the commands, run nothing
# Each run writes runs/labs/<arm>_seed<S>/ (git-ignored), its console output to runs/labs/<arm>_seed<S>.out, its
# wall seconds to runs/labs/<arm>_seed<S>.time and its scores (STS-b; labs 3 and 4 also alignment and uniformity)
# to runs/labs/eval_<arm>_seed<S>.json. An arm
# and seed whose scores exist already is skipped (delete runs/labs/ to start again): lab 3 and lab 4 share the
# simcse arm, lab 5 and lab 6 the tsdae arm. 48 minutes on 2 cores.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
MINI=${MINI:-../shared/models/bert-mini-mlm}  # the raw masked-LM stand-in for bert-base (README, Results)
DATA=${EVAL_DATA_DIR:-data}
SEEDS=${SEEDS:-0 1 2}
OUT=runs/labs
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi

run() {  # run NAME COMMAND...: time one command, keep its output (--dry-run: print it)
    local name=$1; shift
    if [ $DRY = 1 ]; then printf '%q ' "$@"; echo; return; fi
    mkdir -p $OUT
    local s=$(date +%s.%N); "$@" > "$OUT/$name.out" 2>&1; local rc=$?; local e=$(date +%s.%N)
    python -c "print(round($e-$s,1))" > "$OUT/$name.time"
    echo "$name rc=$rc $(cat $OUT/$name.time)s" | tee -a $OUT/progress.log
}
arm() {  # arm NAME SCRIPT ARGS...: for each seed, train OUT/NAME_seedS from $MINI, then score its model on $TASKS
    local name=$1 script=$2 tasks=${TASKS:-stsb}; shift 2
    for seed in $SEEDS; do
        local n=${name}_seed$seed
        if [ $DRY = 0 ] && [ -f $OUT/eval_$n.json ]; then echo "$n: done already"; continue; fi
        run $n python $script --model $MINI --seed $seed --save-every 0 --overwrite --out $OUT/$n "$@"
        run eval_$n python evaluate.py --model $OUT/$n/model --tasks $tasks --data-dir $DATA --json $OUT/eval_$n.json
    done
}

# the miniature settings of examples/experiments.sh (TSDAE's steps: 1000, where lab 6's question was asked, or 300)
TSDAE="--corpus runs/sts_sentences.txt --lr 1e-4"
CONSERT="--corpus runs/sts_sentences.txt --steps 100 --batch-size 96 --lr 2e-5 --optimizer pytorch --temperature 0.05"
SIMCSE="--corpus runs/sts_sentences.txt --steps 100 --batch-size 64 --lr 3e-5 --optimizer pytorch --temperature 0.05"
HALVES=stsb,align-uniform  # labs 3 and 4: STS-b, and SimCSE's two halves (alignment, uniformity)

data() {  # the STS sentences (89,192 lines), and 600 of them for lab 2 (every 148th)
    run sts_sentences python -c "from lib.datafiles import sts_corpus; open('runs/sts_sentences.txt','w').write('\n'.join(sts_corpus('$DATA')))"
    run sts_600 python -c "from lib.datafiles import sts_corpus; open('runs/sts_600.txt','w').write('\n'.join(sts_corpus('$DATA')[::148][:600]))"
}
lab1() {  # token cutoff: cut tokens attended to as zero vectors (official) or masked out
    arm lab1_cutoff consert.py $CONSERT --view1 none --view2 token_cutoff --rate2 0.2
    arm lab1_cutoff_masked consert.py $CONSERT --view1 none --view2 token_cutoff_masked --rate2 0.2
}
lab2() {  # TSDAE noise drawn every epoch (default) or once: 8 epochs over the 398 sentences not held out (200)
    arm lab2_fresh tsdae.py --corpus runs/sts_600.txt --heldout 200 --steps 400 --lr 1e-4
    arm lab2_once tsdae.py --corpus runs/sts_600.txt --heldout 200 --steps 400 --lr 1e-4 --noise-once
}
lab3() {  # SimCSE: two dropout masks (default) or one shared
    TASKS=$HALVES arm simcse consert.py $SIMCSE --view1 simcse --view2 simcse
    TASKS=$HALVES arm lab3_shared consert.py $SIMCSE --view1 simcse --view2 simcse --shared-dropout
}
lab4() {  # SimCSE without dropout: two identical passes (its baseline is lab 3's simcse arm)
    TASKS=$HALVES arm simcse consert.py $SIMCSE --view1 simcse --view2 simcse
    TASKS=$HALVES arm lab4_no_dropout consert.py $SIMCSE --view1 none --view2 none --encoder-dropout off
}
lab5() {  # TSDAE's decoder reads the sentence vector (§3.2, the default) or every token state, 300 and 1000 steps
    arm tsdae300 tsdae.py $TSDAE --steps 300
    arm lab5_tokens300 tsdae.py $TSDAE --steps 300 --decoder-memory tokens
    arm tsdae tsdae.py $TSDAE --steps 1000
    arm lab5_tokens tsdae.py $TSDAE --steps 1000 --decoder-memory tokens
}
lab6() {  # TSDAE batches: plain shuffled (the default), length-bucketed, bucketed with the per-sentence loss
    arm tsdae tsdae.py $TSDAE --steps 1000
    arm lab6_bucketing tsdae.py $TSDAE --steps 1000 --bucketing
    arm lab6_bucketing_sentence tsdae.py $TSDAE --steps 1000 --bucketing --loss-normalisation sentence
}

summary() {  # the numbers of LABS.md's tables, from runs/labs/
    if [ $DRY = 1 ]; then echo "python - (the tables of runs/labs/)"; return; fi
    OUT=$OUT SEEDS="$SEEDS" python - <<'PY'
import json, os, statistics
from pathlib import Path

out, seeds = Path(os.environ["OUT"]), os.environ["SEEDS"].split()

def stsb(run):  # STS-b test Spearman x 100
    path = out / f"eval_{run}.json"
    return json.loads(path.read_text())["stsb"] if path.exists() else None

def log(run):
    path = out / run / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

def final_loss(run):  # the mean training loss of the last 10% of the steps
    losses = [r["loss"] for r in log(run)]
    return statistics.mean(losses[-max(1, len(losses) // 10):]) if losses else None

def heldout_loss(run):  # the last held-out loss (--heldout)
    evals = [r["eval"] for r in log(run) if "eval" in r]
    return evals[-1] if evals else None

def align_uniform(metric):  # alignment or uniformity on the STS benchmark (evaluate.py --tasks align-uniform)
    def read(run):
        path = out / f"eval_{run}.json"
        return json.loads(path.read_text())["details"]["align-uniform"][metric] if path.exists() else None
    return read

def smallest_grad_norm(run):  # the shortest gradient before clipping: above 1, every step was rescaled to norm 1
    norms = [r["grad_norm"] for r in log(run) if "grad_norm" in r]
    return min(norms) if norms else None

def seconds(run):  # the training command's wall time
    path = out / f"{run}.time"
    return float(path.read_text()) if path.exists() else None

LABS = {
    "lab 1: token cutoff": (["lab1_cutoff", "lab1_cutoff_masked"], {"STS-b test": stsb}),
    "lab 2: noise every epoch or once": (["lab2_fresh", "lab2_once"], {"STS-b test": stsb,
                                         "final training loss": final_loss, "held-out loss": heldout_loss}),
    "lab 3: shared dropout masks": (["simcse", "lab3_shared"], {"STS-b test": stsb, "final loss": final_loss,
                                    "alignment": align_uniform("alignment"), "uniformity": align_uniform("uniformity")}),
    "lab 4: SimCSE without dropout": (["simcse", "lab4_no_dropout"], {"STS-b test": stsb, "final loss": final_loss,
                                      "alignment": align_uniform("alignment"), "uniformity": align_uniform("uniformity")}),
    "lab 5: decoder memory, 300 steps": (["tsdae300", "lab5_tokens300"], {"STS-b test": stsb, "final loss": final_loss}),
    "lab 5: decoder memory, 1000 steps": (["tsdae", "lab5_tokens"], {"STS-b test": stsb, "final loss": final_loss}),
    "lab 6: TSDAE batches": (["tsdae", "lab6_bucketing", "lab6_bucketing_sentence"],
                             {"STS-b test": stsb, "train wall s": seconds, "smallest grad norm": smallest_grad_norm}),
}

def row(name, values):  # | name | value per seed | mean ± sd over the seeds |
    got = [v for v in values if v is not None]
    digits = 2 if max((abs(v) for v in got), default=0) >= 0.05 else 4  # a loss of 0.0004 keeps its digits
    band = (f"{statistics.mean(got):.{digits}f} ± {statistics.stdev(got):.{digits}f}" if len(got) > 1
            else f"{got[0]:.{digits}f}" if got else "TODO")
    print(f"| {name} | " + " | ".join("TODO" if v is None else f"{v:.{digits}f}" for v in values) + f" | {band} |")

for lab, (arms, metrics) in LABS.items():
    for metric, fn in metrics.items():
        print(f"\n{lab}, {metric}\n| arm | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd |")
        print("| --- " * (len(seeds) + 2) + "|")
        table = {arm: [fn(f"{arm}_seed{s}") for s in seeds] for arm in arms}
        for arm in arms:
            row(arm, table[arm])
        # A seed fixes the initial weights and the order of the sentences in every arm (lab 6's bucketing changes
        # the batches by design): the difference per seed takes that share of chance out of the comparison.
        for arm in arms[1:]:
            row(f"{arm} - {arms[0]}", [None if a is None or b is None else b - a
                                        for a, b in zip(table[arms[0]], table[arm])])
PY
}

all() { data; lab1; lab2; lab3; lab4; lab5; lab6; summary; }
# run the named steps in order (default: all), e.g. `bash examples/labs.sh lab3 summary`
for step in "${@:-all}"; do "$step"; done
