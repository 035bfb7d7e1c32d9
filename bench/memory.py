"""Peak memory and seconds per sentence of ConSERT's training step, by batch size, with and without the cached
gradient (--micro-batch, speedups/gradcache.py): does the memory stop growing with the batch, and what does it cost?

    python bench/memory.py [--batch-sizes 64 256 1024] [--micro-batch 64] [--steps 3] [--corpus FILE] [--json OUT]
    python bench/memory.py --summary OUT   # the table again, from a saved run

Each row is `python consert.py` (the shipped MiniLM, the official unsupervised views, CPU) run as a fresh process:
peak memory is that process's maximum resident set (os.wait4's ru_maxrss), seconds per sentence is
(the wall time of a run of --steps steps - that of a 1-step run) / ((steps - 1) x batch), so loading and saving
cancel out. The corpus: --corpus, else the STS sentences of $EVAL_DATA_DIR (consert.py --sts-corpus).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench import command_line, finish, record_flags, summary
from lib.taskfiles import default_data_dir


def run(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of `python consert.py ARGS` in a process of its own."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, str(ROOT / "consert.py"), *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"error: consert.py {' '.join(args)} failed:\n{child.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--micro-batch", type=int, default=64, help="the chunk of the cached-gradient rows")
    p.add_argument("--steps", type=int, default=3, help="steps of the timed run (at least 2)")
    p.add_argument("--corpus", help="one sentence per line (default: --sts-corpus $EVAL_DATA_DIR)")
    record_flags(p)
    return p


def ms_per_sentence(row: dict, steps: int) -> float:
    """(a run of `steps` steps - a 1-step run) / the sentences of the steps between: loading and saving cancel out."""
    return 1000 * (row["seconds"] - row["seconds_one_step"]) / ((steps - 1) * row["batch"])


def report(record: dict) -> str:
    """The markdown table of a run, from its --json record alone."""
    lines = ["| batch | chunks of | peak RSS MiB | ms / sentence |", "| --- | --- | --- | --- |"]
    for row in record["rows"]:
        lines.append(f"| {row['batch']} | {row['chunk'] or '-'} | {row['peak_mib']:,.0f} | "
                     f"{ms_per_sentence(row, record['steps']):.1f} |")
    return "\n".join(lines + ["", f"Command: `{record['command']}`"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.summary:
        return summary(args.summary, report, "memory.py")
    source = ["--corpus", args.corpus] if args.corpus else ["--sts-corpus", str(default_data_dir())]
    record = {"command": command_line("memory.py", argv), "steps": args.steps, "rows": []}
    print(f"{'batch':>6} {'chunks':>7} {'peak RSS MiB':>13} {'ms / sentence':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for batch in args.batch_sizes:
            for chunk in (None, args.micro_batch):
                if chunk is not None and chunk >= batch:
                    continue
                common = [*source, "--batch-size", str(batch), "--device", "cpu", "--save-every", "0",
                          "--overwrite", "--out", tmp, *(["--micro-batch", str(chunk)] if chunk else [])]
                one, _ = run([*common, "--steps", "1"])
                many, peak = run([*common, "--steps", str(args.steps)])
                row = {"batch": batch, "chunk": chunk, "peak_mib": peak, "seconds": many, "seconds_one_step": one}
                record["rows"].append(row)
                print(f"{batch:>6} {chunk or '-':>7} {peak:>13.0f} {ms_per_sentence(row, args.steps):>14.1f}",
                      flush=True)
    print()
    return finish(record, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
