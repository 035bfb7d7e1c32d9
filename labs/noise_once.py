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

import random  # noqa: E402

import tsdae_train  # noqa: E402
from lib import cli  # noqa: E402
from tsdae import DenoisingDataset  # noqa: E402


class NoiseOnceDataset(DenoisingDataset):
    """tsdae.DenoisingDataset whose noise generator is seeded by (seed, i) only: the same damage in every epoch."""

    def noise_rng(self, epoch: int, i: int) -> random.Random:
        return random.Random(f"{self.seed}-{i}")


def make_parser() -> cli.ArgumentParser:
    """`python tsdae.py`'s flags: this file's command line."""
    return tsdae_train.make_parser()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """`python tsdae.py`'s flags, checked as tsdae_train.main checks them."""
    return tsdae_train.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`python labs/noise_once.py FLAGS`: the run of `python tsdae.py FLAGS`, each sentence damaged once."""
    return tsdae_train.main(argv, dataset_class=NoiseOnceDataset)


if __name__ == "__main__":
    cli.run(main)
