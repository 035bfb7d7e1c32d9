"""What the experiment scripts of this folder share (pretraining_claim.py, ablations.py): an experiment is a list of
arms, each a run folder made by a few commands; an arm whose result is saved is never run again, one stopped
half-way resumes from its checkpoint; --dry-run prints the commands, --summary only reads the results.

  training        a training command that resumes a stopped run, else starts afresh
  run_plan        the cost estimate, then every command (or, with --dry-run, every command printed)
  mean_sd, verdict   a seed band, and what the per-seed differences say (the rule: MIN_EFFECT, ALPHA)
"""
from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scipy import stats


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


def mean_sd(values: list[float]) -> str:
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{values[0]:.2f}"


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
