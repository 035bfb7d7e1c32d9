"""Plot how a model spreads sentences on the sphere: the cosine similarity of random sentence pairs and of
paraphrase pairs, one panel per model, with alignment and uniformity (evaluate.py's align-uniform task).

    python examples/plot_similarities.py                                   # the shipped all-MiniLM-L6-v2
    python examples/plot_similarities.py --model bert-base-uncased:BERT runs/consert/model:ConSERT --out cone.png

Raw BERT's vectors sit in a narrow cone: even two unrelated sentences have a cosine near 1, so the random
pairs pile up at the right, on top of the paraphrases. A contrastive objective (ConSERT) pushes the random
pairs towards 0 and keeps the paraphrases high (SimCSE, arXiv:2104.08821 app. G, draws the same picture).
The pairs come from the whole STS benchmark (train, dev, test), as SimCSE's alignment and uniformity do:
paraphrases = the pairs of gold score above 4 of 5; random pairs = two of its sentences drawn at random
(seeded). A text summary is printed too; --json keeps the numbers the figure is drawn from (draw() redraws it from
them alone: examples/results.py collapse --summary).

matplotlib is optional (pip install matplotlib); without it this script says so and stops.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import evaluate
from lib.weights import ModelLoadError, default_model_path
from lib import align_uniform
from lib.datafiles import STSB_SPLITS, load_stsb
from lib.taskfiles import default_data_dir, missing_file
from model import SentenceEncoder


def model_and_label(spec: str | None) -> tuple[str, str]:
    """'DIR' or 'DIR:LABEL' -> (DIR, LABEL); None -> the shipped model. The label defaults to the folder's name."""
    if spec is None:
        return default_model_path(), "all-MiniLM-L6-v2"
    if ":" in spec and not Path(spec).exists():
        path, label = spec.rsplit(":", 1)
        return path, label or Path(path).name
    return spec, Path(spec).name or spec


def random_pairs(n_sentences: int, n_pairs: int, seed: int) -> list[tuple[int, int]]:
    """n_pairs (i, j), i != j, drawn uniformly from range(n_sentences), with replacement (seeded)."""
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < n_pairs:
        i, j = rng.randrange(n_sentences), rng.randrange(n_sentences)
        if i != j:
            pairs.append((i, j))
    return pairs


BINS = torch.linspace(-1, 1, 81)  # the figure's 80 bins of cosine (cosines lie in [-1, 1])


def similarities(encoder, pairs: list[tuple], n_random: int, seed: int) -> dict:
    """The numbers the figure is drawn from: the mean cosine of n_random random pairs and of the paraphrase pairs,
    each one's histogram over BINS, alignment and uniformity (the numbers of evaluate.py --tasks align-uniform),
    from one encoding of the set's distinct sentences."""
    emb = evaluate.encode_unique(encoder, [s for p in pairs for s in p[:2]])  # (2 n, d) unit rows: cosine = dot
    positive = torch.tensor([p[2] > align_uniform.POSITIVE_SCORE for p in pairs])  # (n,)
    x, y = emb[0::2][positive], emb[1::2][positive]  # (P, d) each
    i, j = map(list, zip(*random_pairs(len(emb), n_random, seed)))
    cosines = {"random": (emb[i] * emb[j]).sum(-1).clamp(-1, 1),  # (R,) cosines of random pairs (|cos| <= 1)
               "paraphrase": (x * y).sum(-1).clamp(-1, 1)}  # (P,) cosines of the paraphrase pairs
    return {**{kind: c.mean().item() for kind, c in cosines.items()},
            **align_uniform.alignment_uniformity_of(emb, [p[2] for p in pairs]),
            "histogram": {kind: torch.histogram(c, BINS).hist.int().tolist() for kind, c in cosines.items()}}


def summary(results: dict[str, dict]) -> str:
    """One line per model: mean cosine of the random and the paraphrase pairs, alignment, uniformity."""
    width = max(len("model"), *(len(label) for label in results))
    lines = [f"{'model':<{width}}  {'random cos':>10}  {'paraphrase cos':>14}  {'alignment':>9}  {'uniformity':>10}"]
    for label, r in results.items():
        lines.append(f"{label:<{width}}  {r['random']:>10.3f}  {r['paraphrase']:>14.3f}  "
                     f"{r['alignment']:>9.3f}  {r['uniformity']:>10.3f}")
    return "\n".join(lines)


def bars(ax, counts: list[int], **style) -> None:
    """One histogram of cosines on a matplotlib axis, from its counts over BINS (each count at its bin's centre)."""
    ax.hist(((BINS[:-1] + BINS[1:]) / 2).tolist(), bins=BINS.tolist(), weights=counts, density=True, **style)


def draw(results: dict[str, dict], out: Path) -> None:
    """The figure, from the numbers alone ({label: similarities(...)}, as --json writes them): a panel per model,
    the two histograms of cosines. Needs matplotlib (ImportError without it)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.8 * len(results)), sharex=True, squeeze=False)
    for ax, (label, r) in zip(axes[:, 0], results.items()):
        for kind, color in (("random", "tab:gray"), ("paraphrase", "tab:orange")):
            counts = r["histogram"][kind]
            name = f"{kind} pairs ({sum(counts)}), mean cosine {r[kind]:.2f}"
            bars(ax, counts, alpha=0.55, color=color, label=name)
        ax.set_title(f"{label}: alignment {r['alignment']:.3f}, uniformity {r['uniformity']:.3f} (lower is better)",
                     fontsize=10)
        ax.set_ylabel("density")
        ax.legend(loc="upper left", fontsize=8)
    axes[-1, 0].set_xlabel("cosine similarity (the whole STS benchmark; paraphrase = gold score above 4)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", nargs="+", action="extend", metavar="DIR[:LABEL]",
                   help="model folders or Hub ids, each with an optional display label (default: the shipped "
                        "all-MiniLM-L6-v2)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="evaluation data, for stsbenchmark/sts-{train,dev,test}.csv "
                        "(default: $EVAL_DATA_DIR, else data/)")
    p.add_argument("--out", type=Path, default=Path("similarities.png"), help="the PNG to write")
    p.add_argument("--pairs", type=int, default=2000, help="random sentence pairs to draw")
    p.add_argument("--seed", type=int, default=0, help="seed of the random pairs")
    p.add_argument("--json", type=Path, default=None,
                   help="also write the numbers the figure is drawn from to this JSON file")
    return p


def main(argv: list[str] | None = None) -> int:
    p = make_parser()
    args = p.parse_args(argv)
    if args.pairs < 1:
        p.error(f"--pairs must be at least 1 (got {args.pairs})")
    data_dir = args.data_dir or default_data_dir()
    if problem := missing_file("align-uniform", data_dir):
        raise SystemExit(f"error: {problem}")
    try:
        import matplotlib  # noqa: F401  (checked before the models are encoded)
    except ImportError:
        raise SystemExit("error: plotting needs matplotlib, which is not installed (pip install matplotlib)") from None
    pairs = [p for split in STSB_SPLITS for p in load_stsb(data_dir / "stsbenchmark" / f"sts-{split}.csv")]
    results = {}
    for spec in args.model or [None]:
        path, label = model_and_label(spec)
        try:
            encoder = SentenceEncoder.from_pretrained(path)
        except ModelLoadError as err:
            raise SystemExit(f"error: {err}") from None
        results[label] = similarities(encoder, pairs, args.pairs, args.seed)
    draw(results, args.out)
    print(summary(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(results)} model{'s' if len(results) > 1 else ''}, {args.pairs} random pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
