"""What the experiment scripts of this folder share (pretraining_claim.py, ablations.py): an experiment is a list of
arms, each a run folder made by a few commands; an arm whose result is saved is never run again, one stopped
half-way resumes from its checkpoint; --dry-run prints the commands, --summary only reads the results.

  training        a training command that resumes a stopped run, else starts afresh
  run_plan        the cost estimate, then every command (or, with --dry-run, every command printed)
  mean_sd, verdict   a seed band, and what the per-seed differences say
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


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


def verdict(differences: list[float]) -> str:
    """What per-seed differences (a - b, one per seed) say of "a is better than b": it holds beyond the seed spread
    when every seed's difference is positive and their mean exceeds their standard deviation; it is reversed when
    the same holds below 0; otherwise the difference lies within the spread."""
    mean = statistics.mean(differences)
    sd = statistics.stdev(differences) if len(differences) > 1 else 0.0
    if all(d > 0 for d in differences) and mean > sd:
        return "holds"
    if all(d < 0 for d in differences) and -mean > sd:
        return "reversed"
    return "within the spread"
