"""What each piece of speedups/fast.py buys: in-process A/B, alternating the versions step by step on the same batches.

    python bench/ab.py                     # TSDAE, encode and ConSERT (about 10 minutes on 2 CPU cores)
    python bench/ab.py --only tsdae --steps 60

For TSDAE the reference is the full fast path; each other version leaves ONE piece out (or is the plain path),
so "fast / without" < 1 means the piece makes the step faster (PackedDecoder includes its SentenceVectorAttention
and VocabularyCrossEntropy: the packed rows need both). Every version trains its own copy of the same weights on the
same batches (the bench's STS-benchmark sentences, batch 8, max length 75, AdamW, clip 1.0);
step k of every version runs before step k + 1 of any, so a machine that slows down slows all of them alike.
Reported: the ratio of total times, and the median over steps of the per-step ratio.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch

import consert
import data
from speedups import fast
import train
import tsdae
from bench import (LR, SEED, TRAIN_BATCH, TRAIN_MAX_LENGTH, command_line, finish, machine_description,
                   read_sts_train, record_flags, summary)
from lib.weights import default_model_path
from model import Bert, SentenceEncoder

TSDAE_VERSIONS = {  # name -> the fast pieces it has
    "fast": ("PackedBert", "PackedDecoder", "gradient_memory"),
    "plain": (),
    "fast without PackedBert": ("PackedDecoder", "gradient_memory"),
    "fast without PackedDecoder": ("PackedBert",),
    "fast without gradient_memory": ("PackedBert", "PackedDecoder"),
}


class SparseLookupBert(Bert):
    """Bert.run_layers with the fast path's sparse word lookup: "fast without PackedBert". (PackedDecoder runs the
    tied layers' attention on packed rows, so it is a PackedAttention, which runs the plain attend on Bert's layout.)"""

    attention_class, lookup_class = fast.PackedAttention, fast.SparseGradLookup


class FreshMemoryDecoder(fast.PackedDecoder):
    """PackedDecoder writing E's gradient into a fresh (V, d) tensor every step: "fast without gradient_memory"."""

    def gradient_memory(self, E: torch.Tensor) -> None:
        return None


def tsdae_objective(model_path: str, pieces: tuple[str, ...]) -> torch.nn.Module:
    """A TSDAE objective built with the given fast pieces, the others plain. The same weights every time."""
    torch.manual_seed(SEED)  # the new cross-attention weights too
    bert_class = (fast.SparseLookupPackedBert if "PackedBert" in pieces else SparseLookupBert if pieces else Bert)
    decoder = "PackedDecoder" in pieces
    decoder_class = (tsdae.TSDAEDecoder if not decoder else fast.PackedDecoder if "gradient_memory" in pieces
                     else FreshMemoryDecoder)
    encoder = SentenceEncoder.from_pretrained(model_path, pooling="cls", max_length=TRAIN_MAX_LENGTH,
                                              bert_class=bert_class)
    return tsdae.TSDAELoss(encoder, decoder_class=decoder_class).train()


def consert_objective(model_path: str, packed: bool) -> torch.nn.Module:
    torch.manual_seed(SEED)
    encoder = SentenceEncoder.from_pretrained(model_path, pooling="mean", max_length=TRAIN_MAX_LENGTH,
                                              bert_class=fast.PackedBert if packed else Bert)
    consert.switch_off_dropout(encoder)
    return consert.ConSERTLoss(encoder, (consert.View("feature_cutoff", 0.2), consert.View("shuffle"))).train()


def alternate(versions: dict[str, Callable[[int], None]], steps: int) -> dict[str, list[float]]:
    """Run step k of every version, then step k + 1 of every version, ...; the seconds of each step."""
    seconds = {name: [] for name in versions}
    for k in range(steps):
        order = list(versions) if k % 2 == 0 else list(versions)[::-1]
        for name in order:
            t0 = time.perf_counter()
            versions[name](k)
            seconds[name].append(time.perf_counter() - t0)
    return seconds


def training_step(objective: torch.nn.Module, batches: list[dict]) -> Callable[[int], None]:
    optimizer = train.make_optimizer(objective, train.TrainSettings(out=Path("."), steps=1, lr=LR), torch.device("cpu"))

    def step(k: int) -> None:
        loss = objective(batches[k % len(batches)])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(objective.parameters(), 1.0)
        optimizer.step()
        loss.item()

    return step


def report(record: dict) -> str:
    """The markdown tables of a run, from its --json record alone (`--summary FILE` prints them again)."""
    lines = []
    for table in record["tables"]:
        seconds, reference, warmup = table["seconds"], table["reference"], table["warmup"]
        ref = seconds[reference][warmup:]
        lines += [f"{table['title']} ({len(ref)} timed steps after {warmup} untimed):", "",
                  f"| version | s/step | {reference} / version (total) | median per-step ratio |", "|---|---|---|---|"]
        for name, times in seconds.items():
            times = times[warmup:]
            per_step = statistics.median(r / t for r, t in zip(ref, times))
            lines.append(f"| {name} | {sum(times) / len(times):.3f} | x{sum(ref) / sum(times):.3f} | x{per_step:.3f} |")
        lines.append("")
    return "\n".join(lines + [f"{record['machine']}. Command: `{record['command']}`"]) + "\n"


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None,
                   help="folder with stsbenchmark/ (default: $EVAL_DATA_DIR, else ../shared/data)")
    p.add_argument("--model", default=None, help="BERT folder (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per version")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--only", nargs="*", default=["tsdae", "encode", "consert"], choices=["tsdae", "encode", "consert"])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    record_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.summary:
        return summary(args.summary, report, "ab.py")
    torch.set_num_threads(args.threads)
    tables = []

    def measured(title: str, seconds: dict[str, list[float]], reference: str, warmup: int) -> None:
        tables.append({"title": title, "reference": reference, "warmup": warmup, "seconds": seconds})
        print(f"{title}: done", file=sys.stderr)
    from lib.taskfiles import default_data_dir

    model_path = args.model or default_model_path()
    sentences = read_sts_train(Path(args.data_dir) if args.data_dir else default_data_dir())
    tokenizer = SentenceEncoder.from_pretrained(model_path).tokenizer
    n = (args.steps + args.warmup) * TRAIN_BATCH
    picked = sentences[:n]
    steps = args.steps + args.warmup

    if "tsdae" in args.only:
        dataset = tsdae.DenoisingDataset(picked, tokenizer, TRAIN_MAX_LENGTH, seed=SEED)
        lengths = data.token_lengths(tokenizer, picked, TRAIN_MAX_LENGTH)
        order = list(data.BatchSampler(lengths, TRAIN_BATCH, seed=SEED).iter_batches(0))  # tsdae.py's batches: random
        batches = [tsdae.collate_pairs([dataset[(0, i)] for i in b]) for b in order]
        steppers = {name: training_step(tsdae_objective(model_path, pieces), batches)
                    for name, pieces in TSDAE_VERSIONS.items()}
        measured("TSDAE training step", alternate(steppers, steps), "fast", args.warmup)

    if "encode" in args.only:
        plain = SentenceEncoder.from_pretrained(model_path)
        quick = SentenceEncoder.from_pretrained(model_path, bert_class=fast.PackedBert)
        chunks = [sentences[i : i + 250] for i in range(0, 250 * 8, 250)]
        encoders = {"fast": quick, "plain": plain}
        steppers = {name: (lambda k, e=e: e.encode(chunks[k % len(chunks)])) for name, e in encoders.items()}
        measured("encode, 250 sentences a call (batch 64, max length 256)", alternate(steppers, 8 + 1), "fast", 1)

    if "consert" in args.only:
        ids = data.tokenize(tokenizer, picked, TRAIN_MAX_LENGTH)
        for bucketing in (False, True):
            sampler = data.BatchSampler([len(x) for x in ids], TRAIN_BATCH, seed=SEED, bucketing=bucketing)
            order = list(sampler.iter_batches(0))
            batches = [consert.collate_sentences([ids[i] for i in b]) for b in order]
            steppers = {"fast": training_step(consert_objective(model_path, True), batches),
                        "plain": training_step(consert_objective(model_path, False), batches)}
            kind = "length buckets" if bucketing else "random batches"
            measured(f"ConSERT training step, {kind}", alternate(steppers, steps), "fast", args.warmup)
    record = {"command": command_line("ab.py", argv),
              "machine": machine_description(torch.device("cpu"), args.threads), "tables": tables}
    return finish(record, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
