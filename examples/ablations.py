"""The papers' own ablations in miniature, one command per table: TSDAE's app. A (arXiv:2104.06979, tab. 5-7 and
the tied decoder) and ConSERT's §5.2-§5.5 (arXiv:2105.11741: views, few-shot, temperature, batch size), each arm
from the raw bert-mini stand-in over seeds 0-7 (TSDAE) or 0-2 (ConSERT), beside the paper's number and with a verdict.

    python examples/ablations.py tsdae-noise --dry-run     # every arm's commands, and the cost estimate
    python examples/ablations.py tsdae-noise               # run what is not done yet (resumable), then the table
    python examples/ablations.py all --summary             # every table from the saved run folders, no training

The corpora (no STS-b dev or test sentence trains; the scores are STS-b dev, as the TSDAE paper tuned, and test):
  TSDAE    the unlabelled sentences of the NLI files in the data folder (SNLI dev, MNLI dev matched), as the paper's
           tuning corpus was NLI sentences (app. A)
  ConSERT  the STS12-16, STS-b and SICK sentences (the official unsupervised set, §4.1)
Each arm is a run folder under --out (the weights; not kept in git) and a scores file under --results
(RESULTS/scores/METHOD/ARM-sSEED.json, kept in git: a fresh clone rebuilds every table from them); an arm whose
scores file exists is never run again. A table goes to stdout and to RESULTS/TABLE.md; RESULTS/TABLE.json holds its
numbers for examples/plot_ablations.py, which draws RESULTS/TABLE.png.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import arms
from arms import mean_sd, per_seed, run_plan, training, verdict
from lib import cli
from lib.corpus import normalise_whitespace
from lib.datafiles import load_stsb, read_nli, sts_corpus

# TSDAE's arms vary more between seeds: at 3 seeds the rule projected 4-7 for several of its rows, at 5 seeds 7-8
# for two (mask, ratio 0.8). ConSERT's rows (dropout off) are mostly below the minimum effect, where more seeds
# decide nothing.
SEEDS = {"tsdae": (0, 1, 2, 3, 4, 5, 6, 7), "consert": (0, 1, 2)}
COST = {"tsdae": 51, "consert": 47, "evaluate": 13}  # seconds of one command on 2 idle CPU cores (medians, 2026-12-03)


def tsdae_arm(noise: str = "delete", ratio: str = "0.6", pooling: str = "cls", untie: bool = False) -> list[str]:
    """The flags of a TSDAE arm: the paper's choices (app. A) unless told, 300 steps of 8 at lr 1e-4 (2,400
    sentences, the earlier single-seed miniature's). The same settings give the same flags, so tables that share
    an arm share its run."""
    return ["--noise", noise, "--noise-ratio", ratio, "--pooling", pooling, *(["--untie"] if untie else []),
            "--steps", "300", "--batch-size", "8", "--lr", "1e-4"]


def consert_arm(view1: str = "shuffle", view2: str = "feature_cutoff", temperature: str = "0.1", lr: str = "2e-5",
                batch: int = 96, few_shot: str = "all") -> list[str]:
    """The flags of a ConSERT arm: the official views and temperature, at the author's later lr 2e-5 with PyTorch's
    AdamW (the official lr 5e-7 with the official AdamW where asked), 5,760 sentences (60 steps of 96)."""
    optimizer = "official" if lr == "5e-7" else "pytorch"
    sample = ["--few-shot", few_shot, "--upsample"] if few_shot != "all" else []
    return ["--view1", view1, "--view2", view2, "--temperature", temperature, "--lr", lr, "--optimizer", optimizer,
            "--batch-size", str(batch), "--steps", str(5760 // batch), *sample]


@dataclass
class Table:
    """One of the papers' tables: what it varies, its arms (name -> the arm's flags, the paper's number or None),
    the paper's chosen arm, and how the paper orders the others against it where it gives no number (+1: the
    chosen is better, -1: worse)."""

    method: str  # "tsdae" or "consert"
    source: str  # where in the paper
    varied: str
    chosen: str
    arms: dict[str, tuple[list[str], float | None]]
    ordering: dict[str, int] = field(default_factory=dict)
    metric: str = ""  # what the paper's numbers are


def temperature_table(lr: str, setting: str) -> Table:
    """ConSERT §5.4 at one learning rate: the paper's curve peaks at 0.08-0.12, so 0.1 is the chosen arm."""
    temperatures = ("0.01", "0.05", "0.1", "0.2", "0.5")
    return Table("consert", "ConSERT §5.4", f"the temperature, at lr {lr} ({setting})", "0.1",
                 {t: (consert_arm(temperature=t, lr=lr), None) for t in temperatures},
                 ordering={t: +1 for t in temperatures if t != "0.1"},
                 metric="a curve, best at 0.08-0.12, worse on either side")


VIEW_PAIRS = (("shuffle", "feature_cutoff"), ("none", "none"), ("shuffle", "shuffle"), ("token_cutoff", "token_cutoff"),
              ("feature_cutoff", "feature_cutoff"), ("dropout", "dropout"), ("shuffle", "none"),
              ("shuffle", "token_cutoff"), ("shuffle", "dropout"))
TUNING = "STS-b Spearman of the tuning runs"
TABLES = {
    "tsdae-noise": Table(
        "tsdae", "TSDAE app. A, tab. 5", "the noise type, ratio 0.3", "delete",
        {noise: (tsdae_arm(noise=noise, ratio="0.3"), score)
         for noise, score in (("delete", 78.33), ("swap", 76.85), ("mask", 76.56), ("replace", 74.01), ("add", 72.65))},
        metric=TUNING),
    "tsdae-ratio": Table(
        "tsdae", "TSDAE app. A, tab. 6", "the deletion ratio", "0.6",
        {ratio: (tsdae_arm(ratio=ratio), score)
         for ratio, score in (("0.1", 77.81), ("0.3", 77.75), ("0.6", 78.77), ("0.8", 77.69), ("0.9", 75.67))},
        metric=TUNING),
    "tsdae-pooling": Table(
        "tsdae", "TSDAE app. A, tab. 7", "the pooling, deletion 0.6", "cls",
        {pooling: (tsdae_arm(pooling=pooling), score) for pooling, score in (("cls", 78.77), ("mean", 78.84),
                                                                              ("max", 78.17))},
        metric=TUNING),
    "tsdae-tying": Table(
        "tsdae", "TSDAE app. A", "encoder and decoder weights tied or not", "tied",
        # tying raised the paper's validation score from 78.77 to 79.15 (app. A: the best combination ties them)
        {"tied": (tsdae_arm(), 79.15), "untied": (tsdae_arm(untie=True), 78.77)},
        metric="STS-b Spearman (the paper: validation)"),
    "consert-views": Table(
        "consert", "ConSERT §5.2", "the two views", "shuffle+feature_cutoff",
        {f"{a}+{b}": (consert_arm(view1=a, view2=b), 72.74 if (a, b) == VIEW_PAIRS[0] else None)
         for a, b in VIEW_PAIRS},
        # the paper: the official pair is best; of single views shuffle > token cutoff > feature cutoff ~ dropout > none
        ordering={f"{a}+{b}": +1 for a, b in VIEW_PAIRS[1:]},
        metric="the average of the 7 STS tests; only the best pair's is given here"),
    "consert-temperature": temperature_table("5e-7", "official"),
    "consert-temperature-2e-5": temperature_table("2e-5", "the author's later advice"),
    "consert-batch": Table(
        "consert", "ConSERT §5.5", "the batch size, the sentences seen fixed (5,760)", "96",
        {str(b): (consert_arm(batch=b), None) for b in (24, 48, 96, 192)},
        ordering={"24": +1, "48": +1, "192": -1},
        metric="larger batches help modestly"),
    "consert-fewshot": Table(
        "consert", "ConSERT §5.3", "the unlabelled sentences, upsampled to the corpus's size", "all",
        {n: (consert_arm(few_shot=n), None) for n in ("100", "1000", "10000", "all")},
        ordering={"100": +1, "1000": +1, "10000": +1},
        metric="better with more sentences; 100 already beat the baselines"),
}


def make_parser() -> argparse.ArgumentParser:
    p = arms.make_parser(__doc__, out="runs/ablations", results="docs/ablations")
    p.add_argument("table", choices=[*TABLES, "all"], help="the table to run (all: every one, in this order)")
    return p


# ----------------------------------------------------------------------------
# The corpora and the arms


def unseen_sentences(data: Path) -> set[str]:
    """Every STS-b dev and test sentence (both releases), whitespace-normalised: none of them trains."""
    return {normalise_whitespace(s) for split in ("dev", "test")
            for path in (data / "stsbenchmark" / f"sts-{split}.csv",
                         data / "stsbenchmark" / "senteval" / f"sts-{split}.csv")
            for s1, s2, _ in load_stsb(path) for s in (s1, s2)}


def prepare_corpora(data: Path, out: Path) -> dict[str, Path]:
    """OUT/nli_sentences.txt (TSDAE's: the unique premises and hypotheses of data/nli/*.jsonl) and
    OUT/sts_sentences.txt (ConSERT's: lib.datafiles.sts_corpus), both without STS-b dev and test sentences."""
    corpora = {"tsdae": out / "nli_sentences.txt", "consert": out / "sts_sentences.txt"}
    if all(path.exists() for path in corpora.values()):
        return corpora
    unseen = unseen_sentences(data)
    nli = [s for path in sorted((data / "nli").glob("*.jsonl")) for p, h, _ in read_nli(path) for s in (p, h)]
    sentences = {"tsdae": list(dict.fromkeys(normalise_whitespace(s) for s in nli)), "consert": sts_corpus(data)}
    out.mkdir(parents=True, exist_ok=True)
    for method, path in corpora.items():
        kept = [s for s in sentences[method] if normalise_whitespace(s) not in unseen]
        path.write_text("\n".join(kept) + "\n", encoding="utf-8")
        print(f"{path}: {len(kept)} sentences")
    return corpora


def arm_commands(table: Table, name: str, seed: int, corpus: Path, args: argparse.Namespace) -> tuple[Path, list]:
    """(the arm's scores file, the (kind, command)s that make it). Arms with the same flags share a folder and a
    scores file (the paper's chosen setting appears in several tables)."""
    flags, _ = table.arms[name]
    key = "_".join(flag.lstrip("-").replace(".", "p") for flag in flags)
    folder = Path(args.out) / table.method / f"{key}-s{seed}"
    scores = Path(args.results) / "scores" / table.method / f"{key}-s{seed}.json"
    script = "tsdae.py" if table.method == "tsdae" else "consert.py"
    command = training(script, folder, ["--corpus", str(corpus), "--model", args.model, *flags, "--seed", str(seed)])
    evaluation = [sys.executable, "evaluate.py", "--model", str(folder / "model"), "--tasks", "stsb", "--data-dir",
                  args.data, "--json", str(scores)]
    return scores, [(table.method, command), ("evaluate", evaluation)]


# ----------------------------------------------------------------------------
# The table: the paper's number, ours, the per-seed difference from the chosen arm, the verdict


def read_scores(path: Path) -> tuple[float, float]:
    """(STS-b dev, STS-b test) Spearman x 100 of an arm's evaluation."""
    result = json.loads(path.read_text())
    return result["details"]["stsb"]["dev"], result["stsb"]


def judge(table: Table, name: str, differences: list[float]) -> str:
    """The verdict on the paper's ordering of `name` against the chosen arm from our per-seed differences (chosen -
    arm, on one split): the paper's own gap, or its stated ordering, gives the expected sign, and arms.verdict's
    rule (docs/ablations.md) decides."""
    paper, chosen_paper = table.arms[name][1], table.arms[table.chosen][1]
    sign = (1 if chosen_paper > paper else -1) if paper is not None and chosen_paper is not None else \
        table.ordering.get(name, 0)
    if not sign:
        return "no ordering in the paper"
    return verdict([sign * d for d in differences])


def table_text(key: str, table: Table, results: dict[str, list[tuple[float, float]]]) -> tuple[str, dict, dict]:
    """The table as Markdown, its numbers (for the figure), and each arm's (dev, test) verdicts (for the summary).
    Where the two splits' verdicts differ (holds, reversed, cannot tell), the test verdict says so."""
    chosen = results.get(table.chosen, [])
    lines = [f"**{key}**: {table.varied} ({table.source}; the paper's numbers: {table.metric}). Chosen: "
             f"{table.chosen}. STS-b Spearman x 100, mean ± sd over seeds {', '.join(map(str, SEEDS[table.method]))}.",
             "",
             "| arm | paper | ours: dev | ours: test | chosen - arm, dev, per seed (mean) | verdict: dev "
             "| chosen - arm, test, per seed (mean) | verdict: test |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    numbers, verdicts = {}, {}
    for name, (_, paper) in table.arms.items():
        runs, shown = results.get(name, []), paper if paper is not None else ""
        if len(runs) < len(SEEDS[table.method]) or len(chosen) < len(SEEDS[table.method]):
            lines.append(f"| {name} | {shown} | (not all seeds done) | | | | | |")
            continue
        dev, test = [d for d, _ in runs], [t for _, t in runs]
        numbers[name] = {"paper": paper, "dev": dev, "test": test}
        if name == table.chosen:
            lines.append(f"| **{name}** | {shown} | {mean_sd(dev)} | {mean_sd(test)} | | | | |")
            continue
        cells = []
        for split, ours in enumerate((dev, test)):
            differences = [c[split] - o for c, o in zip(chosen, ours)]
            cells.append((per_seed(differences), judge(table, name, differences)))
        verdicts[name] = (cells[0][1], cells[1][1])
        disagree = " (**differs from dev**)" if word(cells[0][1]) != word(cells[1][1]) else ""
        lines.append(f"| {name} | {shown} | {mean_sd(dev)} | {mean_sd(test)} | {cells[0][0]} | {cells[0][1]} | "
                     f"{cells[1][0]} | {cells[1][1]}{disagree} |")
    return "\n".join(lines), numbers, verdicts


def word(said: str) -> str:
    """A verdict's word: holds, reversed or cannot tell (without its reason and p-value)."""
    return said.split(":")[0].split(" (")[0]


def summary_text(verdicts: dict[str, dict[str, tuple[str, str]]]) -> str:
    """The tables' verdicts gathered, every arm of every table named once: on both splits alike, then where dev
    and test disagree; then which of the undecided ones more seeds could decide. It restates the rows; it explains
    nothing."""
    groups: dict[str, list[str]] = {}
    seeds, small = [], []
    for key, rows in verdicts.items():
        for name, (dev, test) in rows.items():
            said = word(test) if word(dev) == word(test) else f"{word(dev)} on dev, {word(test)} on test"
            groups.setdefault(said, []).append(f"{key} {name}")
            needs = [f"{split} {v.split('needs ')[1].split(' (')[0]}" for split, v in (("dev", dev), ("test", test))
                     if "needs" in v]
            if needs:
                seeds.append(f"{key} {name} ({', '.join(needs)})")
            if all("below the minimum effect" in v for v in (dev, test)):
                small.append(f"{key} {name}")
    order = ["holds", "reversed", "cannot tell"]
    lines = [f"Of {sum(map(len, groups.values()))} arms against their table's chosen setting (the rule above, on "
             "each split):", ""]
    for said in sorted(groups, key=lambda g: (order.index(g) if g in order else len(order), g)):
        label = f"{said} on dev and test" if said in order else f"dev and test disagree: {said}"
        lines.append(f"- **{label}** ({len(groups[said])}): {', '.join(groups[said])}")
    lines += ["", f"Undecided with a mean of at least the minimum effect, where more seeds could decide (the rule's "
              f"projection, per split): {', '.join(seeds) or 'none'}. Below the minimum effect on both splits (no "
              f"verdict unless more seeds move the mean itself past it): {', '.join(small) or 'none'}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    os.chdir(ROOT)
    out, results_dir = Path(args.out), Path(args.results)
    keys = list(TABLES) if args.table == "all" else [args.table]
    corpora = ({"tsdae": out / "nli_sentences.txt", "consert": out / "sts_sentences.txt"}
               if args.dry_run or args.summary else prepare_corpora(Path(args.data), out))
    plan, done, files, planned = [], [], {}, set()
    for key in keys:
        table = TABLES[key]
        for seed in SEEDS[table.method]:
            for name in table.arms:
                scores, commands = arm_commands(table, name, seed, corpora[table.method], args)
                files[(key, name, seed)] = scores
                if scores in planned:  # an arm two tables share runs once
                    continue
                planned.add(scores)
                if scores.exists():
                    done.append(scores)
                else:
                    plan.extend(commands)
    if args.dry_run and done:
        print(f"{len(done)} arms done (never run again):", *done, sep="\n")
    if not args.summary:
        run_plan(plan, COST, args.dry_run)
    if args.dry_run:
        return 0
    verdicts = {}
    for key in keys:
        results = {}
        for seed in SEEDS[TABLES[key].method]:
            for name in TABLES[key].arms:
                if files[(key, name, seed)].exists():
                    results.setdefault(name, []).append(read_scores(files[(key, name, seed)]))
        text, numbers, verdicts[key] = table_text(key, TABLES[key], results)
        print(text + "\n")
        results_dir.mkdir(parents=True, exist_ok=True)
        (results_dir / f"{key}.md").write_text(text + "\n", encoding="utf-8")
        (results_dir / f"{key}.json").write_text(json.dumps({"chosen": TABLES[key].chosen, "arms": numbers}, indent=1))
    if args.table == "all":
        text = summary_text(verdicts)
        print(text)
        (results_dir / "summary.md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    cli.run(main)
