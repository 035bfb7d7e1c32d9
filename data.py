"""Text in, tensors out, for any method: tokenisation, corpus reading, padding, batches, data-set readers.

  tokenize / pad                       token ids, padded per batch
  read_corpus                          one sentence per line, with clear errors for bad files
  SentenceDataset, NLIDataset          items of a corpus or of NLI pairs, and their collate functions
  BatchSampler / make_loader           shuffled batches (of similar length), resumable, shardable
  load_stsb / load_sick / load_sts_year / read_nli / sts_corpus
                                       the STS and NLI files that training and evaluation both read
"""
from __future__ import annotations

import codecs
import csv
import functools
import json
import math
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm


class CorpusError(Exception):
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
# Data sets: an item is built from its key (epoch, index); the collate function pads a batch of items


class SentenceDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> token ids of sentence i."""

    def __init__(self, sentences: list[str], tokenizer: Tokenizer, max_length: int):
        self.sentences, self.tokenizer, self.max_length = sentences, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, key: tuple[int, int]) -> list[int]:
        return tokenize(self.tokenizer, [self.sentences[key[1]]], self.max_length)[0]


def sentence_keys(items: list[list[int]]) -> torch.Tensor:
    """A number per sentence, equal exactly for identical token sequences (Python's hash of the ids, the same in
    every process): how ConSERT's NT-Xent recognises a sentence's copies in a batch. (N,) int64"""
    return torch.tensor([hash(tuple(ids)) for ids in items], dtype=torch.long)


def collate_sentences(items: list[list[int]], pad_id: int = 0, multiple: int = 1) -> dict[str, torch.Tensor]:
    input_ids, attention_mask = pad(items, pad_id, multiple)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "sentence_keys": sentence_keys(items)}


class NLIDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> (premise ids, hypothesis ids, label id) of pair i (pairs from read_nli)."""

    def __init__(self, pairs: list[tuple[str, str, int]], tokenizer: Tokenizer, max_length: int):
        self.pairs, self.tokenizer, self.max_length = pairs, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: tuple[int, int]) -> tuple[list[int], list[int], int]:
        premise, hypothesis, label = self.pairs[key[1]]
        p, h = tokenize(self.tokenizer, [premise, hypothesis], self.max_length)
        return p, h, label


def collate_nli(items: list[tuple[list[int], list[int], int]], pad_id: int = 0,
                multiple: int = 1) -> dict[str, torch.Tensor]:
    premise_ids, premise_mask = pad([p for p, _, _ in items], pad_id, multiple)
    hypothesis_ids, hypothesis_mask = pad([h for _, h, _ in items], pad_id, multiple)
    return {"premise_ids": premise_ids, "premise_mask": premise_mask, "hypothesis_ids": hypothesis_ids,
            "hypothesis_mask": hypothesis_mask, "labels": torch.tensor([label for _, _, label in items]),
            "premise_keys": sentence_keys([p for p, _, _ in items]),
            "hypothesis_keys": sentence_keys([h for _, h, _ in items])}


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
    """A DataLoader over shuffled (with `bucketing`, length-bucketed) batches of `dataset`, whose items are built
    (tokenised, damaged) in `workers` background processes: by default 2 on CUDA, none on CPU, where the
    two would compete with the model for the cores. Pinned memory on CUDA for non_blocking copies."""
    sampler = BatchSampler(lengths, batch_size, seed=seed, bucketing=bucketing, rank=rank, world_size=world_size)
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


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def token_lengths(tokenizer: Tokenizer, sentences: list[str], max_length: int) -> np.ndarray:
    """Token count of every sentence (for bucketing), in chunks so memory stays flat."""
    lengths = np.empty(len(sentences), dtype=np.int32)
    for i in range(0, len(sentences), 10000):
        lengths[i : i + 10000] = [min(len(e.ids), max_length) for e in tokenizer.encode_batch(sentences[i : i + 10000])]
    return lengths


# ----------------------------------------------------------------------------
# Data-set files: the STS and NLI sets (layouts: see the README's "Data" section)

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


NLI_LABELS = {"contradiction": 0, "entailment": 1, "neutral": 2}  # the label ids of the official ConSERT code


def read_nli(path: str | Path, bad_bytes: str = "error") -> list[tuple[str, str, int]]:
    """(premise, hypothesis, label id) pairs from
      - JSON lines with "premise", "hypothesis", "label" (SNLI's own "sentence1", "sentence2", "gold_label" too), or
      - a SICK file: tab-separated, a header naming sentence_A, sentence_B and entailment_judgment
        (the SemEval splits) or entailment_label (SICK.txt).
    Labels are entailment / neutral / contradiction, any case; pairs labelled "-" (no consensus) are skipped."""
    read_corpus(path, bad_bytes)  # the checks every input file gets: exists, text, UTF-8, not empty
    path = Path(path)
    lines = []  # (line number, text); read again because read_corpus folds the tabs SICK needs
    for n, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            lines.append((n, raw.decode("utf-8")))
        except UnicodeDecodeError:  # read_corpus has already stopped on these unless told to skip/replace
            if bad_bytes == "replace":
                lines.append((n, raw.decode("utf-8", errors="replace")))
    lines = [(n, text) for n, text in lines if text.strip()]
    rows = _nli_json_rows(path, lines) if lines[0][1].lstrip().startswith("{") else _nli_tsv_rows(path, lines)
    pairs = []
    for n, premise, hypothesis, label in rows:
        label = str(label).strip().lower()
        if label == "-":
            continue
        if label not in NLI_LABELS:
            raise CorpusError(f"{path} line {n}: label '{label}' is not entailment, neutral or contradiction")
        pairs.append((premise, hypothesis, NLI_LABELS[label]))
    if not pairs:
        raise CorpusError(f"{path} has no labelled NLI pairs")
    return pairs


def _nli_json_rows(path: Path, lines: list[tuple[int, str]]) -> list[tuple[int, str, str, str]]:
    rows = []
    for n, text in lines:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            raise CorpusError(f"{path} line {n} is not valid JSON") from None
        row = [obj.get(a, obj.get(b)) if isinstance(obj, dict) else None
               for a, b in (("premise", "sentence1"), ("hypothesis", "sentence2"), ("label", "gold_label"))]
        if any(not isinstance(x, str) for x in row):
            raise CorpusError(f'{path} line {n}: expected string fields "premise", "hypothesis" and "label"')
        rows.append((n, *row))
    return rows


def _nli_tsv_rows(path: Path, lines: list[tuple[int, str]]) -> list[tuple[int, str, str, str]]:
    header = lines[0][1].split("\t")
    label_column = next((c for c in ("entailment_judgment", "entailment_label") if c in header), None)
    if "sentence_A" not in header or "sentence_B" not in header or label_column is None:
        raise CorpusError(f"{path}: not an NLI file: give JSON lines with premise/hypothesis/label, or a SICK "
                          "file whose header has sentence_A, sentence_B and entailment_judgment")
    columns = [header.index(c) for c in ("sentence_A", "sentence_B", label_column)]
    rows = []
    for n, text in lines[1:]:
        fields = text.split("\t")
        if len(fields) <= max(columns):
            raise CorpusError(f"{path} line {n} has {len(fields)} tab-separated fields, the header {len(header)}")
        rows.append((n, *(fields[c] for c in columns)))
    return rows


def sts_corpus(data_dir: str | Path) -> list[str]:
    """ConSERT's official unsupervised training set (arXiv:2105.11741 §4.1): every sentence of the STS12-16
    inputs (scored or not), of the STS benchmark train/dev/test (the SentEval copies the official code reads)
    and of SICK train/trial/test, duplicates kept. No label is read. The official count is 89,192."""
    data_dir = Path(data_dir)
    sts = [data_dir / year / f"STS.input.{subset}.txt" for year, subsets in STS_SUBSETS.items() for subset in subsets]
    stsb = [data_dir / "stsbenchmark" / "senteval" / f"sts-{split}.csv" for split in ("train", "dev", "test")]
    sick = [data_dir / "sick" / f"SICK_{split}.txt" for split in ("train", "trial", "test_annotated")]
    for path in sts + stsb + sick:
        if not path.is_file():
            raise CorpusError(f"--sts-corpus: missing {path} (the README's \"Data\" section lists the layout)")
    sentences = [s for path in sts for line in read_lines(path) for s in line.split("\t")[:2]]
    sentences += [s for path in stsb for s1, s2, _ in load_stsb(path) for s in (s1, s2)]
    sentences += [s for path in sick for s1, s2, _ in load_sick(path) for s in (s1, s2)]
    return [s.strip() for s in sentences if s.strip()]
