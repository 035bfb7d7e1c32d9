"""Two models, one STS-b test score: one model counted twice, or two that rank the test pairs differently?

LABS.md's lab 5 met it: seeds 2 and 3 of an arm score alike on STS-b test to the fourth decimal while their dev
scores differ. For each pair of model folders this scores both on STS-b test and dev, then asks how alike their
rankings are: the Spearman correlation between the two models' cosines, each model's score on three random thirds
of the test pairs, and the spread of the difference between the two scores over bootstrap resamples of the pairs.

The models LABS.md compares: lab 5's arms (python examples/lab_results.py lab5 trains runs/labs/ARM-sSEED), and the
same TSDAE run stopped 10 steps earlier, for seeds 2 and 3 (MINI: the stand-in, docs/standin.md):

    python tsdae.py --corpus runs/labs/sts_sentences.txt --model $MINI --lr 1e-4 --steps 290 --seed 2 \
        --save-every 0 --out runs/labs/tsdae290-s2
    python examples/same_score.py --pair "tsdae300, seeds 2 and 3" runs/labs/tsdae300-s2/model \
        runs/labs/tsdae300-s3/model --pair "tokens300, seeds 2 and 3" runs/labs/tokens300-s2/model \
        runs/labs/tokens300-s3/model --pair "tsdae290, seeds 2 and 3" runs/labs/tsdae290-s2/model \
        runs/labs/tsdae290-s3/model
    python examples/same_score.py --summary     # the table from docs/labs/same_score/scores.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import evaluate
from lib import cli
from lib.datafiles import load_stsb
from lib.taskfiles import default_data_dir
from model import SentenceEncoder

RESAMPLES = 1000


def compare(first: Path, second: Path, data_dir: Path) -> dict:
    """Both models' STS-b scores, and how alike they rank the test pairs (x 100)."""
    rng = np.random.default_rng(0)
    encoders = [SentenceEncoder.from_pretrained(m) for m in (first, second)]
    found = {}
    for split in ("test", "dev"):
        pairs = load_stsb(data_dir / "stsbenchmark" / f"sts-{split}.csv")
        gold = np.array([p[2] for p in pairs])  # (n,)
        cos = [evaluate.pair_cosines(encoder, pairs) for encoder in encoders]  # 2 x (n,)
        found[split] = [evaluate.spearman100(gold, c) for c in cos]
        if split == "test":
            thirds = np.array_split(rng.permutation(len(gold)), 3)
            found["thirds"] = [[evaluate.spearman100(gold[t], c[t]) for t in thirds] for c in cos]
            differences = []
            for _ in range(RESAMPLES):
                i = rng.integers(0, len(gold), len(gold))  # (n,): the pairs drawn with replacement
                differences.append(evaluate.spearman100(gold[i], cos[0][i]) - evaluate.spearman100(gold[i], cos[1][i]))
            found["bootstrap_sd"] = float(np.std(differences))
            found["cosines_spearman"] = 100 * float(spearmanr(cos[0], cos[1]).correlation)
    return found


def table(results: dict) -> str:
    rows = ["| pair | STS-b test | STS-b dev | Spearman of their test cosines | on three random thirds of the "
            f"test pairs | sd of the test difference over {RESAMPLES} resamples |", "| --- " * 6 + "|"]
    for name, r in results.items():
        thirds = " / ".join(f"{a:.2f} vs {b:.2f}" for a, b in zip(*r["thirds"]))
        rows.append(f"| {name} | {r['test'][0]:.4f} vs {r['test'][1]:.4f} | {r['dev'][0]:.2f} vs {r['dev'][1]:.2f} "
                    f"| {r['cosines_spearman']:.2f} | {thirds} | {r['bootstrap_sd']:.2f} |")
    return "\n".join(rows) + "\n"


def make_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=cli.HelpFormatter)
    p.add_argument("--pair", nargs=3, action="append", metavar=("NAME", "MODEL1", "MODEL2"), default=[],
                   help="a name and two model folders (repeat for more pairs)")
    p.add_argument("--data", help="the evaluation data folder (default: $EVAL_DATA_DIR, else data/)")
    p.add_argument("--results", default=str(ROOT / "docs" / "labs" / "same_score"),
                   help="where scores.json and table.md go")
    p.add_argument("--summary", action="store_true", help="write the table from scores.json; read no model")
    return p


def main(argv: list[str] | None = None) -> int:
    p = make_parser()
    args = p.parse_args(argv)
    saved = Path(args.results) / "scores.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    if not args.summary:
        if not args.pair:
            p.error("give --pair NAME MODEL1 MODEL2, or --summary")
        for name, first, second in args.pair:
            results[name] = compare(Path(first), Path(second), Path(args.data or default_data_dir()))
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(results, indent=1) + "\n")
    (Path(args.results) / "table.md").write_text(table(results), encoding="utf-8")
    print(table(results), end="")
    return 0


if __name__ == "__main__":
    cli.run(main)
