"""The labs of LABS.md, one command each: every arm over seeds 0-2 (lab 5: 0-7) from the raw bert-mini stand-in,
each arm's scores kept in git (docs/labs/scores/ARM-sSEED.json) and each lab's table written from them alone
(docs/labs/LAB.md), the way examples/results.py publishes the README's tables.

    python examples/lab_results.py lab3 --dry-run     # its commands, and the cost estimate
    python examples/lab_results.py all                # run what is not done yet (resumable), then every table
    python examples/lab_results.py all --summary      # every table from the saved scores, no training

Arms shared by two labs are one run (lab 3 and lab 4: simcse; lab 5 and lab 6: tsdae1000). In each table the
rows "ARM - BASELINE" are the per-seed differences (a seed fixes the initial weights and the order of the sentences
in both arms) with the verdict of examples/arms.py's rule, on STS-b test and dev.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import arms
from arms import gather, mean_sd, publish, run_plan, training, verdict
from lib import cli, run
from lib.datafiles import sts_corpus

SEEDS = (0, 1, 2)
MORE_SEEDS = {"lab5": (0, 1, 2, 3, 4, 5, 6, 7)}  # the rule projected 4 to 7 seeds for its gaps at 3 seeds, 7-8 at 5
CONSERT = ["--steps", "100", "--batch-size", "96", "--lr", "2e-5", "--optimizer", "pytorch", "--temperature", "0.05"]
SIMCSE = ["--steps", "100", "--batch-size", "64", "--lr", "3e-5", "--optimizer", "pytorch", "--temperature", "0.05"]
COST = {"consert.py": 50, "tsdae.py": 100, "evaluate": 10}  # seconds on 2 CPU cores (the estimate before a run)
# a lab's entry point (labs/) is its method's run with one piece replaced: it costs as much
COST.update({f"labs/{lab}.py": COST["consert.py"] for lab in ("masked_cutoff", "shared_dropout")})
COST.update({f"labs/{lab}.py": COST["tsdae.py"] for lab in ("noise_once", "token_memory")})


def seeds_of(lab: str) -> tuple[int, ...]:
    return MORE_SEEDS.get(lab, SEEDS)


@dataclass
class Arm:
    script: str
    flags: list[str]
    corpus: str = "sts_sentences.txt"  # under --out: the 89,192 STS sentences, or sts_600.txt (lab 2)
    tasks: str = "stsb"


ARMS = {
    "cutoff": Arm("consert.py", [*CONSERT, "--view1", "none", "--view2", "token_cutoff", "--rate2", "0.2"]),
    "cutoff_masked": Arm("labs/masked_cutoff.py", [*CONSERT, "--view1", "none", "--view2", "token_cutoff_masked",
                                                    "--rate2", "0.2"]),
    "fresh": Arm("tsdae.py", ["--heldout", "200", "--steps", "400", "--lr", "1e-4"], corpus="sts_600.txt"),
    "once": Arm("labs/noise_once.py", ["--heldout", "200", "--steps", "400", "--lr", "1e-4"], corpus="sts_600.txt"),
    "simcse": Arm("consert.py", [*SIMCSE, "--view1", "simcse", "--view2", "simcse"], tasks="stsb,align-uniform"),
    "shared": Arm("labs/shared_dropout.py", [*SIMCSE, "--view1", "simcse", "--view2", "simcse"],
                  tasks="stsb,align-uniform"),
    "no_dropout": Arm("consert.py", [*SIMCSE, "--view1", "none", "--view2", "none", "--encoder-dropout", "off"],
                      tasks="stsb,align-uniform"),
    "tsdae300": Arm("tsdae.py", ["--lr", "1e-4", "--steps", "300"]),
    "tokens300": Arm("labs/token_memory.py", ["--lr", "1e-4", "--steps", "300"]),
    "tsdae1000": Arm("tsdae.py", ["--lr", "1e-4", "--steps", "1000"]),
    "tokens1000": Arm("labs/token_memory.py", ["--lr", "1e-4", "--steps", "1000"]),
    "bucketing": Arm("tsdae.py", ["--lr", "1e-4", "--steps", "1000", "--bucketing"]),
    "bucketing_sentence": Arm("tsdae.py", ["--lr", "1e-4", "--steps", "1000", "--bucketing", "--loss-normalisation",
                                           "sentence"]),
}
# Where each measure sits in an arm's scores file (examples/arms.py: gather).
MEASURES = {
    "STS-b test": ("eval", "stsb"),
    "final training loss (the mean of the last 10% of the steps)": ("loss", "final"),
    "held-out loss (the last evaluation)": ("eval_last",),
    "alignment": ("eval", "details", "align-uniform", "alignment"),
    "uniformity": ("eval", "details", "align-uniform", "uniformity"),
    "smallest gradient norm (before clipping to 1)": ("smallest_grad_norm",),
    "step of the lowest held-out loss (best/)": ("best_step",),
}
# lab -> (the comparisons: (baseline, arm) pairs, the measures of its table)
LABS = {
    "lab1": ([("cutoff", "cutoff_masked")], ["STS-b test"]),
    "lab2": ([("fresh", "once")], ["STS-b test", "final training loss (the mean of the last 10% of the steps)",
                                   "held-out loss (the last evaluation)", "step of the lowest held-out loss (best/)"]),
    "lab3": ([("simcse", "shared")], ["STS-b test", "final training loss (the mean of the last 10% of the steps)",
                                      "alignment", "uniformity"]),
    "lab4": ([("simcse", "no_dropout")], ["STS-b test", "final training loss (the mean of the last 10% of the steps)",
                                          "alignment", "uniformity"]),
    "lab5": ([("tsdae300", "tokens300"), ("tsdae1000", "tokens1000")],
             ["STS-b test", "final training loss (the mean of the last 10% of the steps)"]),
    "lab6": ([("tsdae1000", "bucketing"), ("tsdae1000", "bucketing_sentence")],
             ["STS-b test", "smallest gradient norm (before clipping to 1)"]),
}


def make_parser() -> argparse.ArgumentParser:
    p = arms.make_parser(__doc__, out="runs/labs", results="docs/labs")
    p.add_argument("lab", choices=[*LABS, "all"], help="which lab")
    return p


def commands(arm: str, seed: int, args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """Train OUT/ARM-sSEED from the stand-in (unless it finished), then score its model into OUT/ARM-sSEED/eval.json."""
    spec, folder = ARMS[arm], Path(args.out) / f"{arm}-s{seed}"
    flags = ["--corpus", str(Path(args.out) / spec.corpus), "--model", args.model, *spec.flags, "--seed", str(seed)]
    evaluation = [sys.executable, "evaluate.py", "--model", str(folder / "model"), "--tasks", spec.tasks,
                  "--data-dir", args.data, "--json", str(folder / "eval.json")]
    return ([] if run.finished(folder) else [(spec.script, training(spec.script, folder, flags))]) + \
        [("evaluate", evaluation)]


def table(lab: str, scores: dict[str, list[dict]]) -> str:
    """Markdown: per measure, each arm's seeds and mean ± sd, then each arm minus its baseline per seed; on STS-b
    test, with the verdict on test and on dev."""
    def values(arm: str, measure: str) -> list[float]:
        found = []
        for s in scores[arm]:
            for key in MEASURES[measure]:
                s = s[key]
            found.append(s)
        return found

    def cells(numbers: list[float]) -> str:
        digits = 0 if all(isinstance(v, int) for v in numbers) else 2 if max(abs(v) for v in numbers) >= 0.05 else 4
        # (a step is a whole number; a loss of 0.0004 keeps its digits)
        return " | ".join(f"{v:.{digits}f}" for v in numbers) + f" | {mean_sd(numbers, digits)}"

    comparisons, measures = LABS[lab]
    seeds = seeds_of(lab)
    lines = ["| | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd | verdict (test; dev) |",
             "| --- " * (len(seeds) + 3) + "|"]
    for measure in measures:
        for baseline, arm in comparisons:
            for name in (baseline, arm):
                if f"| {measure}, {name} |" not in "\n".join(lines):
                    lines.append(f"| {measure}, {name} | {cells(values(name, measure))} | |")
            differences = [b - a for a, b in zip(values(baseline, measure), values(arm, measure))]
            said = ""
            if measure == "STS-b test":
                dev = [b["eval"]["details"]["stsb"]["dev"] - a["eval"]["details"]["stsb"]["dev"]
                       for a, b in zip(scores[baseline], scores[arm])]
                said = f"{verdict(differences)}; dev: {verdict(dev)}"
            lines.append(f"| {measure}, {arm} - {baseline} | {cells(differences)} | {said} |")
    return "\n".join(lines)


def prepare(args: argparse.Namespace) -> None:
    """OUT/sts_sentences.txt (the 89,192 STS sentences of lib.datafiles.sts_corpus) and OUT/sts_600.txt (600 of them,
    every 148th: lab 2's small corpus, of which --heldout keeps 200 out)."""
    sentences = None
    for name, pick in (("sts_sentences.txt", slice(None)), ("sts_600.txt", slice(None, 600 * 148, 148))):
        corpus = Path(args.out) / name
        if not corpus.exists():
            sentences = sentences or sts_corpus(args.data)
            corpus.parent.mkdir(parents=True, exist_ok=True)
            corpus.write_text("\n".join(sentences[pick]) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    os.chdir(ROOT)
    labs = list(LABS) if args.lab == "all" else [args.lab]
    files = {(arm, seed): Path(args.results) / "scores" / f"{arm}-s{seed}.json"
             for lab in labs for pair in LABS[lab][0] for arm in pair for seed in seeds_of(lab)}
    if not args.summary:
        if not args.dry_run:
            prepare(args)
        run_plan([c for (arm, seed), path in files.items() if not path.exists() for c in commands(arm, seed, args)],
                 COST, args.dry_run)
        if args.dry_run:
            return 0
        for (arm, seed), path in files.items():
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(gather(Path(args.out) / f"{arm}-s{seed}"), indent=2) + "\n",
                                encoding="utf-8")
    for lab in labs:
        needed, seeds = {arm for pair in LABS[lab][0] for arm in pair}, seeds_of(lab)
        absent = [f"{arm}-s{seed}" for (arm, seed), path in files.items()
                  if arm in needed and seed in seeds and not path.exists()]
        if absent:
            print(f"{lab}: no scores yet for {', '.join(absent)} (python examples/lab_results.py {lab} makes them)")
            continue
        text = table(lab, {arm: [json.loads(files[(arm, seed)].read_text()) for seed in seeds] for arm in needed})
        print(f"{lab}:\n{text}\n")
        publish(Path(args.results) / f"{lab}.md", text)
    return 0


if __name__ == "__main__":
    cli.run(main)
