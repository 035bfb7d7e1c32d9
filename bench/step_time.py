"""Median seconds of the forward, the backward and the optimiser step of `python tsdae.py`'s objective, in one
process: for comparing two checkouts of this repository on the same batches (run it in each).

    python bench/step_time.py [--batches 50] [--plain]

MiniLM, batch 8, max length 75, the STS-benchmark train sentences ($EVAL_DATA_DIR), deletion noise with seed 0;
the first 5 steps are not counted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch

from speedups import fast
import train
import tsdae
from bench import LR, SEED, TRAIN_BATCH, TRAIN_MAX_LENGTH, read_sts_train
from lib.taskfiles import default_data_dir
from model import Bert, SentenceEncoder
from lib.weights import default_model_path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--plain", action="store_true", help="the plain objective (python tsdae.py --plain)")
    return p


def main() -> int:
    args = make_parser().parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    sentences = read_sts_train(default_data_dir())[: args.batches * TRAIN_BATCH]
    bert_class = Bert if args.plain else fast.SparseLookupPackedBert  # as tsdae_train.build_objective builds it
    encoder = SentenceEncoder.from_pretrained(default_model_path(), pooling="cls", max_length=TRAIN_MAX_LENGTH,
                                              bert_class=bert_class)
    objective = tsdae.TSDAELoss(encoder, decoder_class=tsdae.TSDAEDecoder if args.plain else fast.PackedDecoder).train()
    dataset = tsdae.DenoisingDataset(sentences, encoder.tokenizer, TRAIN_MAX_LENGTH, seed=SEED)
    batches = [tsdae.collate_pairs([dataset[(0, i)] for i in range(k, k + TRAIN_BATCH)])
               for k in range(0, len(sentences), TRAIN_BATCH)]
    optimizer = train.make_optimizer(objective, train.TrainSettings(out=Path("."), steps=1, lr=LR), torch.device("cpu"))
    times = {"forward": [], "backward": [], "optimiser": []}
    for k, batch in enumerate(batches):
        t0 = time.perf_counter()
        loss = objective(batch)
        t1 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(objective.parameters(), 1.0)
        optimizer.step()
        loss.item()
        t3 = time.perf_counter()
        if k >= 5:
            for name, seconds in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(", ".join(f"{name} {s:.4f} s" for name, s in medians.items()) + f"; step {sum(medians.values()):.4f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
