"""LABS.md, lab 2: TSDAE's noise drawn once, against fresh noise every epoch.

tsdae.DenoisingDataset damages sentence i anew in every epoch (its generator is seeded by (seed, epoch, i)).
sentence-transformers' examples damage the corpus once, before training (their issue #3241): every epoch then
rebuilds the same damaged sentence. `--noise-once` trains with this data set.
"""
from __future__ import annotations

import random

from tsdae import DenoisingDataset


class NoiseOnceDataset(DenoisingDataset):
    """tsdae.DenoisingDataset whose noise generator is seeded by (seed, i) only: the same damage in every epoch."""

    def noise_rng(self, epoch: int, i: int) -> random.Random:
        return random.Random(f"{self.seed}-{i}")
