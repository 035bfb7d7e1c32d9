"""Does a label-free signal track the labelled dev score? Read runs that logged both and say.

    python tsdae.py --corpus runs/sts_sentences.txt --heldout 1000 --eval-data data --eval-every 25 --out runs/a
    python examples/heldout_vs_dev.py runs/a [runs/b ...]

A run trained with --heldout N and --eval-data logs, at each evaluation, the dev score ("eval", stsb-dev by
default) beside the held-out signals (heldout-loss, heldout-uniformity; lib.selection.HeldOut), and every step's
training loss. For each signal this prints its Spearman rank correlation with the dev score over the run's
evaluations, signed so that +1 means "lower signal, higher dev score, always" (all three are lower-is-better),
and what selecting on it would give: the dev score at the step of its lowest value, beside the best dev score.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scipy.stats import spearmanr

SIGNALS = ("heldout-loss", "heldout-uniformity", "loss")  # each lower-is-better; "loss": the training batch's


def evaluations(run: Path) -> list[dict]:
    """The log records of the run's evaluations (those with an "eval" score)."""
    path = run / "log.jsonl"
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist: give a run folder (OUT of tsdae.py / consert.py)")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    found = [r for r in records if "eval" in r]
    if len(found) < 3 or not all("heldout-loss" in r for r in found):
        raise SystemExit(f"error: {path}: needs 3 or more evaluations logged with --heldout N and --eval-data")
    return found


def signals(found: list[dict]) -> list[tuple[str, float, int, float, float, float]]:
    """For each signal the run logged at every evaluation: (name, its Spearman with dev, the step of its lowest
    value, the dev score there, its first and last values)."""
    dev, rows = [r["eval"] for r in found], []
    for name in SIGNALS:
        values = [r[name] for r in found if name in r]
        if len(values) < len(found):
            continue
        rho = spearmanr([-v for v in values], dev).statistic  # signed: +1 = the signal falls as dev rises
        chosen = min(range(len(found)), key=values.__getitem__)
        rows.append((name, float(rho), found[chosen]["step"], dev[chosen], values[0], values[-1]))
    return rows


def report(run: Path) -> str:
    found = evaluations(run)
    dev = [r["eval"] for r in found]
    best = max(range(len(found)), key=dev.__getitem__)
    lines = [f"{run}: {len(found)} evaluations, steps {found[0]['step']}-{found[-1]['step']}; best dev "
             f"{dev[best]:.2f} at step {found[best]['step']}",
             f"  {'signal':<20}{'Spearman with dev':>18}{'selects step':>14}{'dev there':>11}"]
    for name, rho, step, there, _, _ in signals(found):
        lines.append(f"  {name:<20}{rho:>18.2f}{step:>14}{there:>11.2f}")
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    p.add_argument("runs", nargs="+", type=Path, help="run folders holding log.jsonl")
    p.add_argument("--json", type=Path, metavar="OUT",
                   help="with one run: also write its evaluations' records to this file (examples/results.py heldout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.json and len(args.runs) != 1:
        raise SystemExit("error: --json takes one run folder")
    print("\n".join(report(run) for run in args.runs))
    if args.json:
        args.json.write_text(json.dumps({"evaluations": evaluations(args.runs[0])}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
