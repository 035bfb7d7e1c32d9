"""Plot a run's log.jsonl: the training loss (smoothed) and, when the run evaluated, the dev score.

    python examples/plot_log.py runs/tsdae                   # writes runs/tsdae/log.png
    python examples/plot_log.py runs/consert/log.jsonl --out curve.png --smooth 20

matplotlib is optional (pip install matplotlib); without it this script says so and stops.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read_log(path: Path) -> list[dict]:
    """The records of a log.jsonl: {"step", "loss", "lr"} and, at evaluations, "eval"."""
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                raise SystemExit(f"error: {path} line {number} is not JSON: is it a run's log.jsonl?") from None
    if not records:
        raise SystemExit(f"error: {path} holds no steps yet")
    return records


def smoothed(values: list[float], window: int) -> list[float]:
    """The mean of the last `window` values at every point (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("log", type=Path, help="a run folder (its log.jsonl) or a log.jsonl file")
    p.add_argument("--out", type=Path, default=None, help="the PNG to write (default: log.png beside the log)")
    p.add_argument("--smooth", type=int, default=None, help="steps to average the loss over (default: 1/50 of the run)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    path = args.log / "log.jsonl" if args.log.is_dir() else args.log
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no window
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("error: plotting needs matplotlib, which is not installed (pip install matplotlib)") from None
    records = read_log(path)
    steps, losses = [r["step"] for r in records], [r["loss"] for r in records]
    window = args.smooth or max(1, len(records) // 50)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(steps, losses, color="tab:blue", alpha=0.25, linewidth=0.8, label="loss")
    ax.plot(steps, smoothed(losses, window), color="tab:blue", label=f"loss, mean of {window} steps")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    evals = [(r["step"], r["eval"]) for r in records if "eval" in r]
    if evals:
        dev = ax.twinx()
        dev.plot(*zip(*evals), "o-", color="tab:orange", label="dev score")
        dev.set_ylabel("dev score (STS-b Spearman x 100)")
        dev.legend(loc="upper right")
    ax.legend(loc="upper left")
    ax.set_title(str(path.parent))
    out = args.out or path.with_name("log.png")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out} ({len(records)} steps{f', {len(evals)} evaluations' if evals else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
