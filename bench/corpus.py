"""What a corpus's size costs `python tsdae.py` before its first step, in time and peak memory (issue 29: a corpus
larger than memory). Runs `python tsdae.py --steps 1` on the corpus and on its first 20,000 lines, each in a fresh
process, and prints both and the difference.

    python bench/corpus.py --lines 1000000              # a generated corpus, in a temporary folder
    python bench/corpus.py --lines 1000000 10000000 --json bench/results/corpus.json   # two, and a record
    python bench/corpus.py --summary bench/results/corpus.json                         # its table again
    python bench/corpus.py --corpus FILE                # a file of your own
    python bench/corpus.py --lines 1000000 --bucketing  # any other flag goes to tsdae.py (--model DIR, ...)

The generated corpus: 5 to 30 words a line, drawn (seed 0) from the whole words of the shipped MiniLM's
vocabulary. Time to the first step: from starting the process to the first line of its log.jsonl (imports, model
loading and the step itself included, the same for both corpora). Peak memory: the process's ru_maxrss.
"""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench import command_line, finish, record_flags, summary
from lib.weights import default_model_path

SMALL_LINES = 20000


def write_corpus(path: Path, lines: int, seed: int = 0) -> None:
    """`lines` lines of 5 to 30 random whole words of the MiniLM vocabulary, written 100,000 at a time."""
    vocabulary = [w for w in (Path(default_model_path()) / "vocab.txt").read_text(encoding="utf-8").split()
                  if w.isalpha()]  # whole words: not [CLS], not ##ing
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for first in range(0, lines, 100000):
            counts = rng.integers(5, 31, size=min(100000, lines - first))
            words = iter([vocabulary[i] for i in rng.integers(len(vocabulary), size=counts.sum())])
            f.writelines(" ".join(itertools.islice(words, n)) + "\n" for n in counts.tolist())


def measure(corpus: Path, out: Path, tsdae_args: list[str]) -> tuple[float, float, float]:
    """(seconds to the first step, seconds in all, peak RSS in MiB) of `python tsdae.py --steps 1` on `corpus`."""
    command = [sys.executable, str(ROOT / "tsdae.py"), "--corpus", str(corpus), "--steps", "1", "--out", str(out),
               *tsdae_args]
    log, first_step = out / "log.jsonl", None
    start = time.perf_counter()
    with open(out.with_name(out.name + ".output.txt"), "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    while True:
        # os.wait4 rather than process.poll: it also gives the ended process's own resource usage (its peak RSS)
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if first_step is None and log.exists() and log.stat().st_size:
            first_step = time.perf_counter() - start
        time.sleep(0.05)
    total = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{out.with_name(out.name + '.output.txt').read_text()[-3000:]}")
    if first_step is None:  # it ended between two looks at its log: at most this
        first_step = total
    return first_step, total, usage.ru_maxrss / 1024  # Linux: ru_maxrss in KiB


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="Other flags go to tsdae.py.",
                                allow_abbrev=False)
    p.add_argument("--corpus", type=Path, help="a corpus to measure (default: generated ones, with --lines)")
    p.add_argument("--lines", type=int, nargs="+", default=[1000000], help="lines of each generated corpus")
    record_flags(p)
    return p


def report(record: dict) -> str:
    """The markdown table of a run, from its --json record alone: each corpus against its own first lines."""
    lines = [f"| corpus | first step s | over {SMALL_LINES // 1000}k lines | peak RSS MiB | "
             f"over {SMALL_LINES // 1000}k lines "
             "| whole run s |", "| --- | --- | --- | --- | --- | --- |"]
    for row in record["rows"]:
        (small_first, _, small_rss), (first, total, rss) = row["small"], row["big"]
        lines.append(f"| {row['corpus']} ({row['mb']:,.0f} MB) | {first:.1f} | {first - small_first:+.1f} | {rss:,.0f} "
                     f"| {rss - small_rss:+,.0f} | {total:.1f} |")
    return "\n".join(lines + ["", f"Command: `{record['command']}`"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    args, tsdae_args = make_parser().parse_known_args(argv)
    if args.summary:
        return summary(args.summary, report, "corpus.py")
    record = {"command": command_line("corpus.py", argv), "rows": []}
    print(" ".join(["python tsdae.py --steps 1", *tsdae_args]))
    print(f"{'corpus':<28} {'MB':>8} {'first step s':>13} {'in all s':>9} {'peak RSS MiB':>12}")
    for lines in [None] if args.corpus else args.lines:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            corpus = args.corpus
            if corpus is None:
                corpus = tmp / f"corpus-{lines}.txt"
                write_corpus(corpus, lines)
            small = tmp / "small.txt"
            with open(corpus, "rb") as big, open(small, "wb") as f:
                f.writelines(itertools.islice(big, SMALL_LINES))
            row = {"corpus": corpus.name if lines is None else f"{lines:,} generated lines",
                   "mb": corpus.stat().st_size / 1e6}
            for key, name, path in [("small", f"its first {SMALL_LINES:,} lines", small), ("big", corpus.name, corpus)]:
                row[key] = first_step, total, rss = measure(path, tmp / f"run-{key}", tsdae_args)
                print(f"{name:<28} {path.stat().st_size / 1e6:>8.1f} {first_step:>13.1f} {total:>9.1f} {rss:>12.0f}")
            record["rows"].append(row)
    print()
    return finish(record, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
