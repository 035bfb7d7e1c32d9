"""A figure per ablation table, from the numbers examples/ablations.py wrote (docs/ablations/TABLE.json): our STS-b
test mean with a bar from the lowest to the highest seed for each arm, the chosen arm darker, and the paper's number
where it gives one as a red mark on its own axis (its scale is bert-base's, ours bert-mini's: compare the orderings).

    python examples/plot_ablations.py                       # every docs/ablations/TABLE.json -> docs/ablations/TABLE.png
    python examples/plot_ablations.py tsdae-ratio --out /tmp/figures

matplotlib is optional (pip install matplotlib); without it this script says so and stops.
"""  # noqa: E501
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plot(name: str, numbers: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(numbers["arms"])
    tests = [numbers["arms"][arm]["test"] for arm in arms]
    means = [statistics.mean(t) for t in tests]
    low = [m - min(t) for m, t in zip(means, tests)]
    high = [max(t) - m for m, t in zip(means, tests)]
    fig, ax = plt.subplots(figsize=(1.1 * len(arms) + 2, 3.4))
    colours = ["tab:blue" if arm == numbers["chosen"] else "lightsteelblue" for arm in arms]
    ax.bar(range(len(arms)), means, yerr=[low, high], color=colours, capsize=4)
    ax.set_xticks(range(len(arms)), arms, rotation=30 if len(arms) > 5 else 0,
                  ha="right" if len(arms) > 5 else "center")
    ax.set_ylabel("ours: STS-b test x 100 (seed range)")
    ax.set_ylim(min(min(t) for t in tests) - 5, max(max(t) for t in tests) + 3)
    papers = [(i, numbers["arms"][arm]["paper"]) for i, arm in enumerate(arms) if numbers["arms"][arm]["paper"]]
    if papers:
        twin = ax.twinx()
        twin.plot([i for i, _ in papers], [p for _, p in papers], "r_", markersize=18, markeredgewidth=2)
        twin.set_ylabel("the paper (bert-base)", color="tab:red")
    ax.set_title(name)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tables", nargs="*", help="table names (default: every TABLE.json in --results)")
    p.add_argument("--results", type=Path, default=ROOT / "docs" / "ablations",
                   help="where ablations.py wrote its tables (its --results)")
    p.add_argument("--out", type=Path, default=None, help="folder for the figures (default: --results)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    args.out = args.out or args.results
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("error: this script needs matplotlib (pip install matplotlib)") from None
    files = [args.results / f"{name}.json" for name in args.tables] or sorted(args.results.glob("*.json"))
    for path in files:
        if not path.is_file():
            raise SystemExit(f"error: {path} does not exist: run python examples/ablations.py {path.stem} first")
        numbers = json.loads(path.read_text())
        if not numbers["arms"]:
            print(f"{path.stem}: no arm has all its seeds yet; no figure")
            continue
        plot(path.stem, numbers, args.out / f"{path.stem}.png")
        print(f"{args.out / (path.stem + '.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
