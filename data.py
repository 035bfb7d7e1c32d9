"""Text in, tensors out: tokenisation, corpus reading, TSDAE noise, length-bucketed batches.

  load_tokenizer / tokenize / pad      - WordPiece ids, padded per batch
  read_corpus                          - one sentence per line, with clear errors for bad files
  NOISE (delete, swap, mask, ...)      - TSDAE §3.1 / app. A: damage a sentence word by word
  BucketBatchSampler                   - batches of similar length, shuffled, resumable, shardable
  DenoisingDataset + collate           - (damaged, original) pairs, built in DataLoader workers
"""
from __future__ import annotations

import functools
import json
import math
import random
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer
from tqdm.auto import tqdm


class CorpusError(Exception):
    """A corpus file that cannot be used. The message is one line, meant for the user."""


def progress(items: Iterable, **kw) -> tqdm:
    """A tqdm bar (only on a terminal unless disable=False is given)."""
    return tqdm(items, dynamic_ncols=True, mininterval=0.5, **{"disable": None, **kw})


# ----------------------------------------------------------------------------
# Tokenisation


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """tokenizer.json when the folder has one, else vocab.txt with the folder's lower-casing setting."""
    folder = Path(folder)
    if (folder / "tokenizer.json").exists():
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").exists():
        cfg_path = folder / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.exists() else {}
        tok = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=cfg.get("do_lower_case", True))
    else:
        from model import ModelLoadError

        raise ModelLoadError(f"no tokenizer.json or vocab.txt in {folder}")
    tok.no_padding()  # we pad per batch ourselves (see `pad`)
    tok.no_truncation()  # and truncate ourselves (see `tokenize`)
    return tok


def truncate(ids: list[int], max_length: int) -> list[int]:
    """Cut to max_length tokens, keeping the final [SEP]."""
    return ids if len(ids) <= max_length else ids[: max_length - 1] + ids[-1:]


def tokenize(tokenizer: Tokenizer, sentences: list[str], max_length: int) -> list[list[int]]:
    """[CLS] sentence [SEP] as ids, at most max_length long."""
    return [truncate(e.ids, max_length) for e in tokenizer.encode_batch(sentences)]


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
    """Non-blank lines of a UTF-8 text file, stripped.

    bad_bytes: what to do with a line that is not UTF-8: "error" (stop, naming the line),
    "skip" (drop the line) or "replace" (decode with U+FFFD for the bad bytes).
    """
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"corpus file {path} does not exist")
    if path.is_dir():
        raise CorpusError(f"corpus {path} is a folder; give a text file with one sentence per line")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CorpusError(f"cannot read corpus {path}: {e.strerror}") from None
    if b"\x00" in raw[:65536]:
        raise CorpusError(f"corpus {path} looks like a binary file (it contains NUL bytes); give a UTF-8 text file")
    sentences = []
    for n, line in enumerate(raw.splitlines(), start=1):
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


# ----------------------------------------------------------------------------
# TSDAE noise (§3.1, app. A, tab. 5). Words are the tokenizer's own pre-tokenised words: every
# function gets the sentence as a list of words, each word a list of WordPiece ids.


def words_of(tokenizer: Tokenizer, sentence: str) -> tuple[list[int], list[list[int]], list[int]]:
    """Split '[CLS] w1 w2 ... [SEP]' into ([CLS] ids, words as lists of piece ids, [SEP] ids)."""
    enc = tokenizer.encode(sentence)
    head, words, tail, last = [], [], [], None
    for tid, wid in zip(enc.ids, enc.word_ids):
        if wid is None:
            (tail if words or head else head).append(tid)
        elif wid == last:
            words[-1].append(tid)
        else:
            words.append([tid])
            last = wid
    return head, words, tail


def delete_words(words: list[list[int]], ratio: float, rng: random.Random, **_) -> list[list[int]]:
    """Delete each word with probability `ratio`; at least one word always survives (the paper's noise)."""
    kept = [w for w in words if rng.random() >= ratio]
    return kept if kept or not words else [rng.choice(words)]


def swap_words(words: list[list[int]], ratio: float, rng: random.Random, **_) -> list[list[int]]:
    """Pick each word with probability `ratio` and shuffle the picked words among their positions."""
    picked = [i for i in range(len(words)) if rng.random() < ratio]
    moved = picked[:]
    rng.shuffle(moved)
    out = list(words)
    for dst, src in zip(picked, moved):
        out[dst] = words[src]
    return out


def mask_words(words: list[list[int]], ratio: float, rng: random.Random, mask_id: int = 103, **_) -> list[list[int]]:
    """Replace every piece of each picked word (probability `ratio`) with [MASK]."""
    return [[mask_id] * len(w) if rng.random() < ratio else w for w in words]


def replace_words(words: list[list[int]], ratio: float, rng: random.Random, vocab: Sequence[int] = (), **_) -> list[list[int]]:
    """Replace each picked word (probability `ratio`) with one random vocabulary token."""
    return [[rng.choice(vocab)] if rng.random() < ratio else w for w in words]


def add_words(words: list[list[int]], ratio: float, rng: random.Random, vocab: Sequence[int] = (), **_) -> list[list[int]]:
    """After each word, with probability `ratio`, insert one random vocabulary token."""
    out = []
    for w in words:
        out.append(w)
        if rng.random() < ratio:
            out.append([rng.choice(vocab)])
    return out


NOISE: dict[str, Callable[..., list[list[int]]]] = {
    "delete": delete_words, "swap": swap_words, "mask": mask_words, "replace": replace_words, "add": add_words,
}


def ordinary_token_ids(tokenizer: Tokenizer) -> list[int]:
    """Vocabulary ids that are not special tokens like [PAD] or [unused0] (for replace/add noise)."""
    return sorted(i for t, i in tokenizer.get_vocab().items() if not (t.startswith("[") and t.endswith("]")))


# ----------------------------------------------------------------------------
# Batching: length buckets that keep the epoch random


class BucketBatchSampler:
    """Yields, step by step, this process's share of each batch: a list of (epoch, corpus index) keys.

    Each epoch: shuffle the corpus, cut it into pools of `pool_batches` batches, sort each pool by
    length, cut the pool into batches, then shuffle the order of all batches. Sentences in a batch
    have similar lengths (little padding) but which sentences meet is still random.
    The order depends only on (seed, epoch), so a resumed run can skip exactly the batches it has seen.
    With several processes (`rank` of `world_size`), `batch_size` is the GLOBAL batch: each process
    takes every world_size-th sentence of it, so N processes see exactly what one process would.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int = 0, bucketing: bool = True,
                 pool_batches: int = 64, rank: int = 0, world_size: int = 1):
        if min(len(lengths), batch_size) < world_size:
            raise CorpusError(f"the batch ({batch_size}) and the corpus ({len(lengths)} sentences) must have at least "
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
        if len(batches) > 1 and len(batches[-1]) < self.batch_size:
            last = batches.pop()
            batches[-1] += last  # a short last batch joins the one before (one sentence has no negatives)
        if self.bucketing:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Start `epoch`, skipping its first `skip` steps (what a resumed run has already done)."""
        self.epoch, self.skip = epoch, skip

    def __len__(self) -> int:
        """Steps per epoch (the last batch may be up to twice as large, see `batches`)."""
        return max(1, len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for batch in self.batches(self.epoch)[self.skip :]:
            # the dataset gets the epoch too: fresh noise every epoch
            yield [(self.epoch, i) for i in batch[self.rank :: self.world_size]]


def make_loader(dataset: torch.utils.data.Dataset, lengths: Sequence[int], collate: Callable, pad_id: int,
                batch_size: int, seed: int, device: torch.device, bucketing: bool = True, workers: int | None = None,
                rank: int = 0, world_size: int = 1) -> torch.utils.data.DataLoader:
    """A DataLoader over length-bucketed batches (BucketBatchSampler) of `dataset`, whose items are built
    (tokenised, damaged) in `workers` background processes: by default 2 on CUDA, none on CPU, where the
    two would compete with the model for the cores. Pinned memory on CUDA for non_blocking copies."""
    sampler = BucketBatchSampler(lengths, batch_size, seed=seed, bucketing=bucketing, rank=rank, world_size=world_size)
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=workers if workers is not None else 2 * (device.type == "cuda"),
        pin_memory=device.type == "cuda",
        collate_fn=functools.partial(collate, pad_id=pad_id, multiple=pad_multiple(device)),
        # its own generator: starting an epoch draws from it, not from the global RNG that dropout and the
        # ConSERT views use, so a resumed run draws exactly what an uninterrupted one would
        generator=torch.Generator().manual_seed(seed),
    )


def pad_multiple(device: torch.device) -> int:
    """Round padded lengths up to a multiple of 8 on CUDA (tensor-core friendly shapes). On CPU every
    extra position is pure extra work, so pad only to the longest sentence."""
    return 8 if device.type == "cuda" else 1


def token_lengths(tokenizer: Tokenizer, sentences: list[str], max_length: int) -> np.ndarray:
    """Token count of every sentence (for bucketing), in chunks so memory stays flat."""
    lengths = np.empty(len(sentences), dtype=np.int32)
    for i in range(0, len(sentences), 10000):
        lengths[i : i + 10000] = [min(len(e.ids), max_length) for e in tokenizer.encode_batch(sentences[i : i + 10000])]
    return lengths


class DenoisingDataset(torch.utils.data.Dataset):
    """TSDAE training pairs. Item (epoch, i) -> (damaged ids, original ids) of sentence i.

    The noise is drawn from a generator seeded by (seed, epoch, i): fresh every epoch, yet the same
    however many DataLoader workers or distributed ranks there are, and the same after a resume.
    """

    def __init__(self, sentences: list[str], tokenizer: Tokenizer, max_length: int, noise: str = "delete",
                 ratio: float = 0.6, seed: int = 0):
        self.sentences, self.tokenizer, self.max_length = sentences, tokenizer, max_length
        self.noise, self.ratio, self.seed = NOISE[noise], ratio, seed
        self.mask_id = tokenizer.token_to_id("[MASK]")
        self.vocab = ordinary_token_ids(tokenizer) if noise in ("replace", "add") else ()

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, key: tuple[int, int]) -> tuple[list[int], list[int]]:
        epoch, i = key
        rng = random.Random(f"{self.seed}-{epoch}-{i}")
        head, words, tail = words_of(self.tokenizer, self.sentences[i])
        damaged = self.noise(words, self.ratio, rng, mask_id=self.mask_id, vocab=self.vocab)
        join = lambda ws: head + [t for w in ws for t in w] + tail
        return truncate(join(damaged), self.max_length), truncate(join(words), self.max_length)


def collate_pairs(items: list[tuple[list[int], list[int]]], pad_id: int = 0, multiple: int = 1) -> dict[str, torch.Tensor]:
    """Pad damaged and original ids separately, each to its own longest (rounded up to `multiple`)."""
    damaged_ids, damaged_mask = pad([d for d, _ in items], pad_id, multiple)
    original_ids, original_mask = pad([o for _, o in items], pad_id, multiple)
    return {"damaged_ids": damaged_ids, "damaged_mask": damaged_mask,
            "original_ids": original_ids, "original_mask": original_mask}
