"""Text in, tensors out, for any method: tokenisation, corpus reading, padding, batches, the STS files.

  UsageError, CorpusError              the one-line errors a user sees (cli.run prints them)
  tokenize / pad                       token ids, padded per batch
  read_corpus                          one sentence per line, with clear errors for bad files
  BatchSampler / make_loader           shuffled batches (of similar length), resumable, shardable
  hold_out / fixed_batches             lines kept out of training, and their batches for a label-free dev signal
  load_stsb / load_sick / load_sts_year
                                       the STS files that training and evaluation both read
Each method brings its own data set and collate function (tsdae.py's noisy pairs, consert.py's sentences and
NLI pairs); the readers of the ConSERT experiment's own inputs (NLI pairs, the STS sentences) are consert_train.py's.
"""
from __future__ import annotations

import codecs
import csv
import functools
import math
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm


class UsageError(Exception):
    """A run that cannot go on as asked (an unavailable device, a run folder in use, a loss that became NaN, a
    batch too small for the processes). The message is one line, meant for the user: cli.run prints it, no
    traceback. Defined here, the lowest layer that raises one, so no layer needs cli.py to raise it."""


class CorpusError(UsageError):
    """A corpus file that cannot be used. The message is one line, meant for the user."""


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
# Corpus


def read_corpus(path: str | Path, bad_bytes: str = "error") -> list[str]:
    """Non-blank lines of a UTF-8 text file, whitespace-normalised.

    bad_bytes: what to do with a line that is not UTF-8: "error" (stop, naming the line),
    "skip" (drop the line) or "replace" (decode with U+FFFD for the bad bytes).
    """
    sentences = []
    for n, line in enumerate(read_text_bytes(path).splitlines(), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            if bad_bytes == "skip":
                continue
            if bad_bytes != "replace":
                raise CorpusError(
                    f"{path} line {n} is not valid UTF-8; fix the file or pass --bad-lines skip (or replace)"
                ) from None
            text = line.decode("utf-8", errors="replace")
        text = " ".join(text.split())  # also drops \r and stray tabs
        if text:
            sentences.append(text)
    if not sentences:
        raise CorpusError(f"corpus {path} has no non-blank lines")
    return sentences


def read_text_bytes(path: str | Path) -> bytes:
    """The bytes of a text file, with one-line errors for what is not one: a missing file, a folder, a binary
    file, UTF-16 without a byte-order mark. UTF-16 with its byte-order mark is converted to UTF-8; a UTF-8
    byte-order mark is dropped."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"corpus file {path} does not exist")
    if path.is_dir():
        raise CorpusError(f"corpus {path} is a folder; give a text file with one sentence per line")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CorpusError(f"cannot read corpus {path}: {e.strerror}") from None
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            raw = raw.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            raise CorpusError(f"corpus {path} starts like UTF-16 but is not valid UTF-16; save it as UTF-8") from None
    raw = raw.removeprefix(codecs.BOM_UTF8)
    head = raw[:65536]
    if b"\x00" in head:
        if max(head[0::2].count(0), head[1::2].count(0)) > 0.4 * len(head) / 2:  # every other byte 0: ASCII in UTF-16
            raise CorpusError(f"corpus {path} looks like UTF-16 without a byte-order mark; save it as UTF-8 "
                              "(for example: iconv -f UTF-16LE -t UTF-8)")
        raise CorpusError(f"corpus {path} looks like a binary file (it contains NUL bytes); give a UTF-8 text file")
    return raw


# ----------------------------------------------------------------------------
# Batching: length buckets that keep the epoch random


class BatchSampler:
    """Yields, step by step, this process's share of each batch: a list of (epoch, corpus index) keys.

    Each epoch: shuffle the corpus and cut it into batches, the last one shorter when the corpus does not divide
    (as DataLoader(shuffle=True) does, which the reference codes use). With `bucketing`, first cut the shuffled
    corpus into pools of `pool_batches` batches and sort each pool by length, then shuffle the order of all
    batches: sentences in a batch have similar lengths (little padding), though which meet is still random.
    The order depends only on (seed, epoch), so a resumed run can skip exactly the batches it has seen.
    With several processes (`rank` of `world_size`), `batch_size` is the GLOBAL batch: each process
    takes every world_size-th sentence of it, so N processes see exactly what one process would (but for a last
    batch with fewer sentences than processes, which joins the one before: every process needs a share).
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int = 0, bucketing: bool = False,
                 pool_batches: int = 64, rank: int = 0, world_size: int = 1):
        if min(len(lengths), batch_size) < world_size:
            raise UsageError(f"the batch ({batch_size}) and the corpus ({len(lengths)} sentences) must have at least "
                              f"one sentence for each of the {world_size} processes")
        self.lengths = np.asarray(lengths)
        self.batch_size, self.seed, self.bucketing, self.pool_batches = batch_size, seed, bucketing, pool_batches
        self.rank, self.world_size = rank, world_size
        self.epoch, self.skip = 0, 0

    def batches(self, epoch: int) -> list[list[int]]:
        """Every (global) batch of the epoch, in order."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.lengths))
        if self.bucketing:
            pool = self.batch_size * self.pool_batches
            order = np.concatenate([
                chunk[np.argsort(self.lengths[chunk], kind="stable")]
                for chunk in np.array_split(order, range(pool, len(order), pool))
            ])
        batches = [order[i : i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]
        if len(batches) > 1 and len(batches[-1]) < self.world_size:  # too short to give every process a share:
            last = batches.pop()
            batches[-1] += last  # it joins the one before
        if self.bucketing:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Start `epoch`, skipping its first `skip` steps (what a resumed run has already done)."""
        self.epoch, self.skip = epoch, skip

    def __len__(self) -> int:
        """Steps per epoch."""
        steps = math.ceil(len(self.lengths) / self.batch_size)
        short = len(self.lengths) % self.batch_size
        return steps - (steps > 1 and 0 < short < self.world_size)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for batch in self.batches(self.epoch)[self.skip :]:
            # the dataset gets the epoch too: fresh noise every epoch
            yield [(self.epoch, i) for i in batch[self.rank :: self.world_size]]


def make_loader(dataset: torch.utils.data.Dataset, *, lengths: Sequence[int], collate: Callable, pad_id: int,
                batch_size: int, seed: int, device: torch.device, bucketing: bool, workers: int | None = None,
                rank: int = 0, world_size: int = 1) -> torch.utils.data.DataLoader:
    """A DataLoader over shuffled (with `bucketing`, length-bucketed) batches of `dataset`. dataset[(epoch, i)] is
    item i, built (tokenised, damaged) in `workers` background processes: by default 2 on CUDA, none on CPU, where the
    two would compete with the model for the cores; collate(items, pad_id, multiple) pads a batch of them.
    Pinned memory on CUDA for non_blocking copies."""
    sampler = BatchSampler(lengths, batch_size, seed=seed, bucketing=bucketing, rank=rank, world_size=world_size)
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=workers if workers is not None else 2 * (device.type == "cuda"),
        pin_memory=device.type == "cuda",
        collate_fn=functools.partial(collate, pad_id=pad_id, multiple=pad_multiple(device)),
        # its own generator: starting an epoch draws from it, not from the global RNG that dropout and the
        # ConSERT views use, so a resumed run draws exactly what an uninterrupted one would
        generator=torch.Generator().manual_seed(seed),
    )


def hold_out(items: list, n: int, seed: int = 0) -> tuple[list, list]:
    """(the items to train on, the n items kept out of training), both in their original order. The n are a random
    sample drawn from their own generator (seeded by `seed`, not by the run's --seed), so every run on a corpus
    keeps the same lines out and their held-out scores compare."""
    if n <= 0:
        return items, []
    if n >= len(items):
        raise UsageError(f"--heldout {n}: the data has {len(items)} lines; keep fewer out, so some are left to train on")
    out = set(np.random.default_rng(seed).choice(len(items), size=n, replace=False).tolist())
    return [x for i, x in enumerate(items) if i not in out], [x for i, x in enumerate(items) if i in out]


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


def token_lengths(tokenizer: Tokenizer, sentences: list[str], max_length: int) -> np.ndarray:
    """Token count of every sentence (for bucketing), in chunks so memory stays flat."""
    lengths = np.empty(len(sentences), dtype=np.int32)
    for i in range(0, len(sentences), 10000):
        lengths[i : i + 10000] = [min(len(e.ids), max_length) for e in tokenizer.encode_batch(sentences[i : i + 10000])]
    return lengths


# ----------------------------------------------------------------------------
# Data-set files: the STS sets (layouts: see the README's "Data" section)

# The SentEval subsets of each STS year (STS13's SMT is LDC-licensed and never redistributed).
STS_SUBSETS = {
    "sts12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    "sts13": ["FNWN", "headlines", "OnWN"],
    "sts14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "sts15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "sts16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}


def read_lines(path: Path) -> list[str]:
    """Lines without their line ending (splits on newlines only, unlike str.splitlines)."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def load_stsb(path: Path) -> list[tuple[str, str, float]]:
    """STS benchmark csv: genre, file, year, id, score, sentence1, sentence2 [, 2 licence columns].
    QUOTE_NONE: sentences hold unbalanced '"', default csv quoting would swallow rows."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    bad = [i for i, row in enumerate(rows, 1) if len(row) not in (7, 9)]
    if bad:
        raise ValueError(f"{path}: line {bad[0]} has not 7 or 9 tab-separated fields")
    return [(row[5], row[6], float(row[4])) for row in rows]


def load_sick(path: Path) -> list[tuple[str, str, float]]:
    """SICK split file (header line; pair_ID, sentence_A, sentence_B, relatedness_score, judgment)."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [(row[1], row[2], float(row[3])) for row in rows[1:]]


def load_sts_year(folder: Path, subsets: Sequence[str]) -> dict[str, list[tuple[str, str, float]]]:
    """SentEval layout: STS.input.<subset>.txt (sentence1 TAB sentence2 [TAB ...]) and STS.gs.<subset>.txt
    (one score a line). A blank gold line means the pair was never scored: skip it, as SentEval does."""
    pairs_of = {}
    for subset in subsets:
        inputs = read_lines(folder / f"STS.input.{subset}.txt")
        gold = read_lines(folder / f"STS.gs.{subset}.txt")
        if len(inputs) != len(gold):
            raise ValueError(f"{folder}: {subset} has {len(inputs)} input lines but {len(gold)} gold lines")
        pairs = []
        for line, score in zip(inputs, gold):
            if score.strip():
                s1, s2 = line.split("\t")[:2]
                pairs.append((s1, s2, float(score)))
        pairs_of[subset] = pairs
    return pairs_of
