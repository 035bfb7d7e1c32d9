"""LABS.md, lab 2: TSDAE's noise drawn once, against fresh noise every epoch.

tsdae.DenoisingDataset damages sentence i anew in every epoch (its generator is seeded by (seed, epoch, i)).
sentence-transformers' examples damage the corpus once, before training (their issue #3241): every epoch then
rebuilds the same damaged sentence. `python labs/noise_once.py FLAGS` trains with this data set: `python tsdae.py
FLAGS` otherwise.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (tsdae.py, consert.py, lib/) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import random

import train
from commands import experiment, tsdae_train
from lib import cli
from tsdae import DenoisingDataset


class NoiseOnceDataset(DenoisingDataset):
    """tsdae.DenoisingDataset whose noise generator is seeded by (seed, i) only: the same damage in every epoch."""

    def noise_rng(self, epoch: int, i: int) -> random.Random:
        return random.Random(f"{self.seed}-{i}")


def make_parser() -> cli.ArgumentParser:
    """`python tsdae.py`'s flags, under this lab's description: this file's command line."""
    return tsdae_train.make_parser(__doc__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = make_parser()
    return tsdae_train.check_args(p, p.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    """`python labs/noise_once.py FLAGS`: tsdae_train.main's steps, each sentence damaged once."""
    args = parse_args(argv)
    sentences, kept_out, device, card = tsdae_train.read_inputs(args, argv)
    objective = tsdae_train.build_objective(args)
    encoder = objective.encoder
    pairs = NoiseOnceDataset(sentences, encoder.tokenizer, encoder.max_length, noise=args.noise,
                             ratio=args.noise_ratio, seed=args.seed)
    loader = tsdae_train.pair_loader(pairs, encoder, args, device)
    run = tsdae_train.prepare_run(objective, loader, kept_out, card, args, device)
    train.train(encoder, objective, loader, run, device)
    experiment.say_done(run.out, f"{args.pooling} pooling")
    return 0


if __name__ == "__main__":
    cli.run(main)
