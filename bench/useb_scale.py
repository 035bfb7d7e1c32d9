"""What USEB's CQADupStack costs on a CPU: titles encoded and scored per second, and the scoring alone.

    python bench/useb_scale.py --json bench/results/useb_scale.json   # about a minute on 2 CPU cores
    python bench/useb_scale.py --summary bench/results/useb_scale.json

Encoding: one synthetic forum (--pool titles and --queries queries of 6 to 14 words drawn, seed 0, from
examples/topics.txt; two duplicates each) scored through `evaluate.evaluate(encoder, ["useb-cqadupstack"], ...)`
with the shipped MiniLM as evaluate.py builds it. Scoring alone: lib.useb.top_100 of 1,000 queries against a
pool of 69,000 random unit vectors (384-d), a large forum's size, in chunks of lib.useb.CQADUPSTACK_CHUNK.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch

import evaluate
from bench import command_line, finish, machine_description, record_flags, summary
from lib import useb
from lib.weights import default_model_path
from model import SentenceEncoder
from speedups import fast

CQADUPSTACK_TITLES = 500_000  # about, over its 12 forums (USEB's data-eval): what the projection is for


def encode_and_score(pool: int, n_queries: int) -> float:
    """Seconds to encode and score one synthetic forum of pool + n_queries titles."""
    rng = random.Random(0)
    words = (ROOT / "examples" / "topics.txt").read_text(encoding="utf-8").split()
    titles = {str(i): " ".join(rng.choices(words, k=rng.randint(6, 14))) for i in range(n_queries + pool)}
    queries = {str(i): [str(rng.randrange(n_queries, n_queries + pool)) for _ in range(2)] for i in range(n_queries)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / useb.USEB_EVAL / "cqadupstack"
        folder.mkdir(parents=True)
        (folder / "corpus.json").write_text(json.dumps({"bench": titles}))
        (folder / "retrieval_split.json").write_text(json.dumps({"test": {"bench": queries},
                                                                 "valid": {"bench": queries}}))
        encoder = SentenceEncoder.from_pretrained(default_model_path(), bert_class=fast.PackedBert)  # as evaluate.py
        start = time.perf_counter()
        evaluate.evaluate(encoder, ["useb-cqadupstack"], Path(tmp))
        return time.perf_counter() - start


def scoring_alone(pool: int, n_queries: int, dim: int = 384) -> float:
    """Seconds of lib.useb.top_100 over random unit vectors: the retrieval without the encoder."""
    generator = torch.Generator().manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(pool + n_queries, dim, generator=generator), dim=-1)
    pool_ids = [f"p{i}" for i in range(pool)]
    queries = {f"q{i}": [f"p{i}"] for i in range(n_queries)}
    start = time.perf_counter()
    for _ in useb.top_100(vectors[pool:], vectors[:pool], pool_ids, queries):
        pass
    return time.perf_counter() - start


def report(record: dict) -> str:
    """The markdown table of a run, from its --json record alone."""
    rate = record["titles"] / record["encode_seconds"]
    minutes = CQADUPSTACK_TITLES / rate / 60
    return "\n".join([
        "| measure | value |", "| --- | --- |",
        f"| one forum of {record['titles']:,} titles encoded and scored | {record['encode_seconds']:.1f} s, "
        f"{rate:.0f} titles/s |",
        f"| {record['scoring_queries']:,} queries scored against {record['scoring_pool']:,} titles (random vectors) | "
        f"{record['scoring_seconds']:.1f} s |",
        f"| projection (an estimate): CQADupStack's {CQADUPSTACK_TITLES:,} titles at that rate | about {minutes:.0f} "
        f"minutes with {record['threads']} torch thread{'s' if record['threads'] > 1 else ''} |",
        "", f"{record['machine']}. Command: `{record['command']}`"]) + "\n"


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pool", type=int, default=5000, help="titles of the synthetic forum's pool")
    p.add_argument("--queries", type=int, default=500, help="its queries")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    record_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.summary:
        return summary(args.summary, report, "useb_scale.py")
    torch.set_num_threads(args.threads)
    record = {"command": command_line("useb_scale.py", argv),
              "machine": machine_description(torch.device("cpu"), args.threads), "threads": args.threads,
              "titles": args.pool + args.queries, "encode_seconds": encode_and_score(args.pool, args.queries),
              "scoring_pool": 69_000, "scoring_queries": 1_000, "scoring_seconds": scoring_alone(69_000, 1_000)}
    return finish(record, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
