#!/usr/bin/env bash
# Reproduce TSDAE's row of tab. 2 of the TSDAE paper (arXiv:2104.06979) on USEB, on a GPU machine: for each of
# the four domains, TSDAE from bert-base-uncased on that domain's unlabelled USEB corpus with the paper's
# settings (app. A, app. B: 100K steps, batch 8, AdamW lr 3e-5, CLS pooling, deletion ratio 0.6; the final
# model, no early stopping), scored on that domain's USEB test set; the paper's number beside ours.
#
# NOT RUN: this script was written on a machine without a GPU and without internet (no USEB data, no Hub),
# so none of its numbers exist yet; only `--dry-run` was run, by tests/test_useb.py, which checks that every
# printed command parses with evaluate.py's and tsdae.py's own argument parsers. Times are not measured.
#
#   bash examples/reproduce_tsdae.sh              # everything; DATA=data RUNS=runs/useb by default
#   bash examples/reproduce_tsdae.sh --dry-run    # print the commands (and the paper's table) only
#   DATA=/big/data RUNS=/big/runs AMP=fp16 bash examples/reproduce_tsdae.sh
#
# Needs internet once: USEB's data-eval.zip and data-train.zip (into $DATA/useb/), and bert-base-uncased and
# sentence-transformers/bert-base-nli-mean-tokens from the Hugging Face Hub. A run folder that exists already
# is refused by tsdae.py (see --resume and --overwrite there): use a fresh RUNS to start again.
set -euo pipefail
cd "$(dirname "$0")/.."

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY_RUN=1; fi
DATA=${DATA:-data}
RUNS=${RUNS:-runs/useb}
AMP=${AMP:-bf16}  # mixed precision of the training steps: bf16, or fp16 on GPUs without bf16

run() {  # print a command, then run it (--dry-run: print only)
    echo "+ $(printf '%q ' "$@")"
    if [[ $DRY_RUN == 0 ]]; then "$@"; fi
}

# 1. USEB's data: data-eval (the four test and dev sets) and data-train (the unlabelled corpora).
run python evaluate.py --fetch-data "$DATA" --sets useb

# 2. A check of the data and the scorer before any training: the useb README gives 47.6 as the USEB test
#    average of this public SBERT model (its asserted round(avg, 1)).
run python evaluate.py --model sentence-transformers/bert-base-nli-mean-tokens --tasks useb --split test \
    --data-dir "$DATA" --json "$RUNS/sbert-nli/useb.json"

# 3. TSDAE per domain, on data-train/<domain>/unsupervised/train.txt (one sentence a line, read as it is), then
#    its score on that domain's test set: each cell of the paper's row comes from the model of its own domain.
for domain in askubuntu cqadupstack twitter scidocs; do
    task="useb-${domain/twitter/twitterpara}"
    run python tsdae.py --corpus "$DATA/useb/data-train/$domain/unsupervised/train.txt" --model bert-base-uncased \
        --steps 100000 --batch-size 8 --lr 3e-5 --pooling cls --noise delete --noise-ratio 0.6 --amp "$AMP" \
        --out "$RUNS/tsdae-$domain"
    run python evaluate.py --model "$RUNS/tsdae-$domain/model" --tasks "$task" --split test --data-dir "$DATA" \
        --json "$RUNS/tsdae-$domain/useb.json"
done

# 4. Ours beside the paper's (tab. 2, TSDAE, unsupervised, BERT-base; mean of 5 seeds there, 1 seed here).
python - "$RUNS" <<'EOF'
import json
import sys
from pathlib import Path

runs = Path(sys.argv[1])
paper = {"useb-askubuntu": 59.4, "useb-cqadupstack": 14.5, "useb-twitterpara": 73.0, "useb-scidocs": 74.0}
domain = {"useb-askubuntu": "askubuntu", "useb-cqadupstack": "cqadupstack", "useb-twitterpara": "twitter",
          "useb-scidocs": "scidocs"}


def score(path: Path, key: str) -> float | None:
    try:
        return json.loads(path.read_text())[key]
    except (OSError, KeyError, ValueError):
        return None


def shown(value: float | None) -> str:
    return "not run" if value is None else f"{value:.2f}"


sbert = score(runs / "sbert-nli" / "useb.json", "useb-avg")
print(f"check: bert-base-nli-mean-tokens, USEB test average {shown(sbert)} (the useb README: 47.6)")
ours = {task: score(runs / f"tsdae-{domain[task]}" / "useb.json", task) for task in paper}
ours["useb-avg"] = sum(ours.values()) / 4 if None not in ours.values() else None  # as useb.run: the plain mean
paper["useb-avg"] = 55.2
print(f"{'task':<20}{'ours':>10}{'paper':>8}")
for task in paper:
    print(f"{task:<20}{shown(ours[task]):>10}{paper[task]:>8.1f}")
EOF
