"""Text in, tensors out, for any method: token ids, padded batches, and the order of the batches.

  tokenize / pad                 [CLS] sentence [SEP] as token ids; a batch of them padded to (B, L)
  BatchSampler / make_loader     shuffled batches (of similar length with bucketing), resumable, shardable
  fixed_batches                  held-out lines (lib.corpus.hold_out) in batches, for a label-free dev signal
Each method brings its own data set and collate function (tsdae.py's damaged pairs, consert.py's sentences and
NLI pairs). Reading the corpus file is lib/corpus.py's job; the evaluation sets' files are lib/datafiles.py's.
Nothing to run here: the experiments (`python tsdae.py --corpus FILE`, ...) build their loaders with make_loader.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from lib.errors import UsageError


def progress(items: Iterable, **kw) -> tqdm:
    """A tqdm bar, shown only on a terminal (disable=True: never)."""
    return tqdm(items, dynamic_ncols=True, mininterval=0.5, **{"disable": None, **kw})


# ----------------------------------------------------------------------------
# Tokenisation


def truncate(ids: list[int], max_length: int) -> list[int]:
    """Cut to max_length tokens, keeping the final one ([SEP], </s>)."""
    return ids if len(ids) <= max_length else ids[: max_length - 1] + ids[-1:]


def tokenize(tokenizer: Tokenizer, sentences: list[str], max_length: int) -> list[list[int]]:
    """[CLS] sentence [SEP] (RoBERTa: <s> sentence </s>) as ids, at most max_length long."""
    return [truncate(e.ids, max_length) for e in tokenizer.encode_batch(sentences)]


def special_token_id(tokenizer: Tokenizer, name: str) -> int | None:
    """The id of the tokenizer's special token called `name` ("mask": BERT's [MASK], RoBERTa's <mask>), or None."""
    found = [i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special and name in t.content.lower()]
    return found[0] if found else None


def pad(batch: Sequence[Sequence[int]], pad_id: int, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence, rounded up to a multiple of `multiple`.
    Returns input_ids and attention_mask, both (B, L) int64; mask 1 = real token."""
    L = math.ceil(max(len(s) for s in batch) / multiple) * multiple
    ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), L), dtype=torch.long)
    for i, s in enumerate(batch):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


# ----------------------------------------------------------------------------
# Batching: length buckets that keep the epoch random

POOL_BATCHES = 64  # with bucketing: the batches' worth of shuffled sentences sorted by length together


class BatchSampler:
    """Yields, step by step, this process's share of each batch: a list of (epoch, corpus index) keys.

    Each epoch: shuffle the corpus and cut it into batches, the last one shorter when the corpus does not divide
    (as DataLoader(shuffle=True) does, which the reference codes use). With `bucketing`, first cut the shuffled
    corpus into pools of POOL_BATCHES batches and sort each pool by length, then shuffle the order of all
    batches: sentences in a batch have similar lengths (little padding), though which meet is still random.
    The order depends only on (seed, epoch), so a resumed run can skip exactly the batches it has seen.
    Without bucketing only the number of sentences matters: `lengths` can be that number, which spares the
    tokenisation of the whole corpus before the first step.
    With several processes (`rank` of `world_size`), `batch_size` is the GLOBAL batch: each process
    takes every world_size-th sentence of it, so N processes see exactly what one process would (but for a last
    batch with fewer sentences than processes, which joins the one before: every process needs a share).
    """

    def __init__(self, lengths: Sequence[int] | int, batch_size: int, seed: int = 0, bucketing: bool = False,
                 rank: int = 0, world_size: int = 1):
        """lengths: each sentence's token count (token_lengths), or, without bucketing, just how many there are."""
        self.count = lengths if isinstance(lengths, int) else len(lengths)
        self.lengths = None if isinstance(lengths, int) else np.asarray(lengths)
        if bucketing and self.lengths is None:
            raise ValueError("bucketing needs each sentence's length, not only their number")
        if min(self.count, batch_size) < world_size:
            raise UsageError(f"the batch ({batch_size}) and the corpus ({self.count} sentences) must have at least "
                              f"one sentence for each of the {world_size} processes")
        self.batch_size, self.seed, self.bucketing = batch_size, seed, bucketing
        self.rank, self.world_size = rank, world_size
        self.epoch, self.skip = 0, 0

    def iter_batches(self, epoch: int, skip: int = 0) -> Iterator[list[int]]:
        """The (global) batches of the epoch in order, from its `skip`-th on. Each is cut from the epoch's one
        permutation when its turn comes: a corpus of any size costs one array of indices, not a list per batch.
        The last batch runs to the end of the permutation: it is the short one, or the short one joined to the
        one before (len: the steps of an epoch)."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.count)
        steps, size = len(self), self.batch_size
        if self.bucketing:  # sorted by length within each pool of POOL_BATCHES batches
            pool = size * POOL_BATCHES
            order = np.concatenate([
                chunk[np.argsort(self.lengths[chunk], kind="stable")]
                for chunk in np.array_split(order, range(pool, len(order), pool))
            ])
        cut = lambda k: order[k * size : self.count if k == steps - 1 else (k + 1) * size].tolist()
        batches = rng.permutation(steps) if self.bucketing else range(steps)  # buckets: a random order, not by length
        yield from map(cut, batches[skip:])

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Start `epoch`, skipping its first `skip` steps (what a resumed run has already done)."""
        self.epoch, self.skip = epoch, skip

    def __len__(self) -> int:
        """Steps per epoch."""
        steps = math.ceil(self.count / self.batch_size)
        short = self.count % self.batch_size
        return steps - (steps > 1 and 0 < short < self.world_size)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for batch in self.iter_batches(self.epoch, self.skip):
            # the dataset gets the epoch too: fresh noise every epoch
            yield [(self.epoch, i) for i in batch[self.rank :: self.world_size]]


def make_loader(dataset: torch.utils.data.Dataset, *, lengths: Sequence[int] | int, collate: Callable, pad_id: int,
                batch_size: int, seed: int, device: torch.device, bucketing: bool, workers: int | None = None,
                rank: int = 0, world_size: int = 1) -> torch.utils.data.DataLoader:
    """A DataLoader over shuffled (with `bucketing`, length-bucketed) batches of `dataset`. dataset[(epoch, i)] is
    item i, built (tokenised, damaged) in `workers` background processes: by default 2 on CUDA, none on CPU, where the
    two would compete with the model for the cores; collate(items, pad_id, multiple) pads a batch of them.
    Pinned memory on CUDA for non_blocking copies. lengths: as BatchSampler takes them (with `bucketing`, each
    item's token count; without, the number of items is enough)."""
    sampler = BatchSampler(lengths, batch_size, seed=seed, bucketing=bucketing, rank=rank, world_size=world_size)
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=workers if workers is not None else 2 * (device.type == "cuda"),
        pin_memory=device.type == "cuda",
        collate_fn=functools.partial(collate, pad_id=pad_id, multiple=pad_multiple(device)),
        # its own generator: starting an epoch draws from it, not from the global RNG that dropout and the
        # ConSERT views use, so a resumed run draws exactly what an uninterrupted one would
        generator=torch.Generator().manual_seed(seed),
    )


def fixed_batches(dataset: torch.utils.data.Dataset, *, collate: Callable, pad_id: int, batch_size: int,
                  device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Every item of `dataset` once, in order, as epoch 0 builds it (the same noise every time), in batches on
    `device`: what an evaluation reads again and again."""
    keys = [(0, i) for i in range(len(dataset))]
    return [to_device(collate([dataset[key] for key in keys[i : i + batch_size]], pad_id=pad_id,
                              multiple=pad_multiple(device)), device)
            for i in range(0, len(keys), batch_size)]


def pad_multiple(device: torch.device) -> int:
    """Round padded lengths up to a multiple of 8 on CUDA (tensor-core friendly shapes). On CPU every
    extra position is pure extra work, so pad only to the longest sentence."""
    return 8 if device.type == "cuda" else 1


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def token_lengths(tokenizer: Tokenizer, sentences: Sequence[str], max_length: int) -> np.ndarray:
    """Token count of every sentence (for bucketing), in chunks so memory stays flat: from a Corpus, 10,000 lines
    are read at a time."""
    lengths = np.empty(len(sentences), dtype=np.int32)
    for i in range(0, len(sentences), 10000):
        lengths[i : i + 10000] = [min(len(e.ids), max_length) for e in tokenizer.encode_batch(sentences[i : i + 10000])]
    return lengths
