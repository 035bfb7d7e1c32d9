"""What the experiment scripts of this folder share (results.py, ablations.py, pretraining_claim.py, lab_results.py):
an experiment is a list of arms, each a run folder made by a few commands; an arm whose result is saved is never run
again, one stopped half-way resumes from its checkpoint; --dry-run prints the commands, --summary only reads the
results.

  make_parser     the flags every experiment script shares (--model, --data, --out, --results, --dry-run, --summary)
  training        a training command that resumes a stopped run, else starts afresh
  run_plan        the cost estimate, then every command (or, with --dry-run, every command printed)
  mean_sd, verdict   a seed band, and what the per-seed differences say (the rule: MIN_EFFECT, ALPHA)
  gather          the scores a run folder holds, for its scores file in git
  publish         a table into its file and into every document that quotes it
"""
from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scipy import stats

from lib import cli
from lib.run import read_progress

ROOT = Path(__file__).resolve().parent.parent


def make_parser(doc: str, out: str, results: str) -> cli.ArgumentParser:
    """An experiment script's parser with the flags they all share; `doc` is the script's docstring (its first
    paragraph is the description), `out` and `results` the default folders."""
    p = cli.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=cli.HelpFormatter)
    p.add_argument("--model", default=str(ROOT.parent / "shared" / "models" / "bert-mini-mlm"),
                   help="the raw masked-LM stand-in the arms start from (docs/standin.md)")
    p.add_argument("--data", default=os.environ.get("EVAL_DATA_DIR") or str(ROOT / "data"),
                   help="the evaluation data folder (default: $EVAL_DATA_DIR, else data/)")
    p.add_argument("--out", default=out, help="the arms' run folders and corpora (not kept in git)")
    p.add_argument("--results", default=results,
                   help="the arms' scores files (kept in git), and the tables drawn from them")
    p.add_argument("--dry-run", action="store_true", help="print every command and the cost estimate; run nothing")
    p.add_argument("--summary", action="store_true", help="write the tables from the saved scores; run nothing")
    return p


def training(script: str, folder: Path, flags: list[str]) -> list[str]:
    """A training command into `folder`: --resume when it holds a checkpoint of a stopped run, else --overwrite
    (a folder without a checkpoint holds nothing worth keeping)."""
    again = ["--resume"] if (folder / "checkpoint").exists() else ["--overwrite"]
    return [sys.executable, script, *flags, "--out", str(folder), "--save-every", "0", *again]


def run_plan(plan: list[tuple[str, list[str]]], cost: dict[str, float], dry_run: bool) -> None:
    """plan: (kind, command) pairs; cost: the seconds of a command of each kind on 2 CPU cores. The estimate
    first; then each command in turn (a failed one stops the script: rerun it to resume), or only printed."""
    print(f"{len(plan)} commands to run, about {sum(cost[kind] for kind, _ in plan) / 60:.0f} minutes on 2 CPU cores")
    for _, command in plan:
        shown = "python " + " ".join(command[1:])
        if dry_run:
            print(shown)
            continue
        print(f"[{time.strftime('%H:%M:%S')}] {shown}", flush=True)
        if subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "2"}).returncode != 0:
            raise SystemExit(f"error: this arm failed: {shown} (rerun the script to resume)")


def gather(folder: Path) -> dict:
    """What a run folder holds, for its scores file: each JSON a command wrote there (eval.json, neighbours.json, ...;
    without the machine's paths) and, from log.jsonl, the training loss (first, last, the mean of the last 10% of the
    steps), the last held-out evaluation, the smallest gradient norm and the step of best/."""
    scores = {}
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text())
        scores[path.stem] = {key: value for key, value in result.items() if key not in ("model", "data_dir")}
        if "skipped" in result:  # the tasks, not their reasons (which name the machine's folders)
            scores[path.stem]["skipped"] = sorted(result["skipped"])
    if (folder / "log.jsonl").exists():
        log = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
        steps, evals = [r for r in log if "loss" in r], [r for r in log if "eval" in r]
        losses = [r["loss"] for r in steps]
        scores["loss"] = {"first": losses[0], "last": losses[-1],
                          "final": statistics.mean(losses[-max(1, len(losses) // 10):]),
                          "steps": steps[-1]["step"]}
        if norms := [r["grad_norm"] for r in log if "grad_norm" in r]:
            scores["smallest_grad_norm"] = min(norms)
        if evals:  # the last held-out evaluation, and the step of best/ (the score progress.json kept as the best)
            scores["eval_last"] = evals[-1]["eval"]
            state = read_progress(folder / "checkpoint")
            if state is not None and state.best is not None:
                scores["best_step"] = next(r["step"] for r in evals if r["eval"] == state.best)
    return scores


DOCUMENTS = ("README.md", "examples/EXPERIMENTS.md", "LABS.md", "docs/ablations.md", "docs/evaluation.md",
             "bench/README.md")  # where tables are quoted


def publish(path: Path, text: str) -> None:
    """Write a table to its file (docs/results/mini.md, ...), and the same table into every document that quotes it,
    between the lines `<!-- docs/results/mini.md: the command that writes it -->` and `<!-- end -->`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    name = path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else None
    block = re.compile(rf"(<!-- {re.escape(str(name))}:[^\n]*-->\n).*?(<!-- end -->)", re.S)
    for document in DOCUMENTS:
        old = (ROOT / document).read_text(encoding="utf-8")
        new = block.sub(lambda m: m.group(1) + text + "\n" + m.group(2), old)
        if new != old:
            (ROOT / document).write_text(new, encoding="utf-8")


def mean_sd(values: list[float], digits: int = 2) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def per_seed(differences: list[float]) -> str:
    """Per-seed differences and their mean: '+4.42, +1.65, +0.06 (mean +2.04)'."""
    return ", ".join(f"{d:+.2f}" for d in differences) + f" (mean {statistics.mean(differences):+.2f})"


# The verdict rule, the same for every table (docs/ablations.md, "How to read a verdict").
MIN_EFFECT = 1.0  # points of Spearman x 100: a smaller mean difference is no effect, however steady the seeds
ALPHA = 0.05  # the two-sided level of the paired t-test over seeds
MAX_SEEDS = 30  # the most seeds the projection of "needs more seeds" considers


def paired_p(differences: list[float]) -> float:
    """The two-sided p-value of a paired t-test over seeds: t = mean / (sd / sqrt(n)), n - 1 degrees of freedom."""
    mean, sd = statistics.mean(differences), statistics.stdev(differences)
    if sd == 0:
        return 0.0 if mean else 1.0
    return float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(len(differences))), df=len(differences) - 1))


def seeds_needed(differences: list[float]) -> int | None:
    """The fewest seeds at which the paired t-test would reach ALPHA if the mean and sd stayed as they are (a
    projection, not a promise); None beyond MAX_SEEDS."""
    mean, sd = statistics.mean(differences), statistics.stdev(differences)
    for n in range(len(differences) + 1, MAX_SEEDS + 1):
        if abs(mean) / (sd / math.sqrt(n)) > stats.t.ppf(1 - ALPHA / 2, df=n - 1):
            return n
    return None


def verdict(differences: list[float]) -> str:
    """What per-seed differences (a - b, one per seed, Spearman x 100) say of "a is better than b":
    holds        the mean is at least MIN_EFFECT above 0 and a paired t-test over the seeds gives p < ALPHA;
    reversed     the same, below 0;
    cannot tell  the mean is within MIN_EFFECT of 0 ("below the minimum effect": more seeds would not make it an
                 effect), or p >= ALPHA ("needs N seeds": where the test would decide at this mean and sd)."""
    if len(differences) < 2:
        return "cannot tell: needs more seeds"
    mean, p = statistics.mean(differences), paired_p(differences)
    shown = f"p {p:.3f}" if p >= 0.001 else "p < 0.001"
    if abs(mean) < MIN_EFFECT:
        return f"cannot tell: below the minimum effect ({shown})"
    if p < ALPHA:
        return f"{'holds' if mean > 0 else 'reversed'} ({shown})"
    n = seeds_needed(differences)
    return f"cannot tell: needs {f'~{n}' if n else f'over {MAX_SEEDS}'} seeds ({shown})"
