"""The corpus: one sentence per line of a UTF-8 text file, with a one-line error for every kind of bad file.

  read_corpus              the non-blank lines, whitespace-normalised, all in memory (small files)
  open_corpus / Corpus     the same lines for a corpus larger than memory: only where each line is (two byte
                           offsets) stays in memory, and a line is read from the file when asked
  scan_lines               the one pass over the file that finds the lines, a block at a time
  hold_out                 lines kept out of training (--heldout N), the same ones for every run on a corpus

data.py turns the lines into tensors; a learner can skip this file.
"""
from __future__ import annotations

import codecs
import os
from pathlib import Path
from typing import BinaryIO, Iterator, Sequence

import numpy as np

from lib.errors import CorpusError, UsageError


def normalise_whitespace(text: str) -> str:
    """Every run of whitespace as one space, none at either end (this also drops a \\r and stray tabs)."""
    return " ".join(text.split())


def read_corpus(path: str | Path, bad_bytes: str = "error", role: str = "corpus") -> list[str]:
    """Non-blank lines of a UTF-8 text file, whitespace-normalised, all in memory: for small files (open_corpus
    gives the same lines for a file of any size).

    bad_bytes: what to do with a line that is not UTF-8: "error" (stop, naming the line),
    "skip" (drop the line) or "replace" (decode with U+FFFD for the bad bytes). role: what the errors call the
    file ("corpus", "NLI file", ...).
    """
    sentences = []
    for n, line in enumerate(read_text_bytes(path, role).splitlines(), start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            if bad_bytes == "skip":
                continue
            if bad_bytes != "replace":
                raise not_utf8_error(path, n) from None
            text = line.decode("utf-8", errors="replace")
        text = normalise_whitespace(text)
        if text:
            sentences.append(text)
    if not sentences:
        raise CorpusError(f"{role} {path} has no non-blank lines")
    return sentences


def not_utf8_error(path: str | Path, line_number: int) -> CorpusError:
    return CorpusError(f"{path} line {line_number} is not valid UTF-8; fix the file or pass --bad-lines skip "
                       "(or replace)")


HEAD_BYTES = 65536  # how much of a file's start is checked for binary data (or UTF-16 without its mark)
# Bytes no text file holds: the control characters but the whitespace ones (tab, line feed, vertical tab, form feed,
# carriage return and 0x1c-0x1f, which str.split splits at) and escape
CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 27, 28, 29, 30, 31)) + b"\x7f"


def read_text_bytes(path: str | Path, role: str = "corpus") -> bytes:
    """The bytes of a text file, with one-line errors that call it `role` for what is not one: a missing file, a
    folder, a binary file, UTF-16 without a byte-order mark. UTF-16 with its byte-order mark is converted to UTF-8;
    a UTF-8 byte-order mark is dropped."""
    path = Path(path)
    check_is_a_file(path, role)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CorpusError(f"cannot read {role} {path}: {e.strerror}") from None
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            raw = raw.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            raise CorpusError(f"{role} {path} starts like UTF-16 but is not valid UTF-16; save it as UTF-8") from None
    raw = raw.removeprefix(codecs.BOM_UTF8)
    check_not_binary(path, raw[:HEAD_BYTES], role)
    return raw


def check_is_a_file(path: Path, role: str = "corpus") -> None:
    if not path.exists():
        raise CorpusError(f"{role} file {path} does not exist")
    if path.is_dir():
        raise CorpusError(f"{role} {path} is a folder; give a text file")


def check_not_binary(path: Path, head: bytes, role: str = "corpus") -> None:
    """Refuse a file whose first bytes (`head`, after any byte-order mark) are not text: UTF-16 without its
    byte-order mark (NUL bytes, but text once read as UTF-16), else binary data (NUL bytes, or more than 1% bytes
    that no text holds: float32 numbers, an archive, an image)."""
    if looks_like_utf16(head):
        raise CorpusError(f"{role} {path} looks like UTF-16 without a byte-order mark; save it as UTF-8 "
                          "(for example: iconv -f UTF-16LE -t UTF-8)")
    if b"\x00" in head or sum(head.count(b) for b in CONTROL_BYTES) > 0.01 * len(head):
        raise CorpusError(f"{role} {path} looks like a binary file, not text; give a UTF-8 text file")


def looks_like_utf16(head: bytes) -> bool:
    """NUL bytes that are the high halves of UTF-16 code units: every other byte NUL (ASCII text in UTF-16), and the
    bytes read as UTF-16 (little- or big-endian) are text, with no NUL or other control character in it."""
    if max(head[0::2].count(0), head[1::2].count(0)) <= 0.4 * len(head) / 2:
        return False
    even = head[: len(head) // 2 * 2]
    for encoding in ("utf-16-le", "utf-16-be"):
        text = even.decode(encoding, errors="replace")
        if text[:-1].count("\ufffd") == 0 and not any(ord(c) < 32 and c not in "\t\n\r\f\v" for c in text):
            return True  # (the last unit may be half of a pair the head cut)
    return False


# ----------------------------------------------------------------------------
# A corpus larger than memory: the lines of read_corpus, read from the file when asked


class Corpus(Sequence[str]):
    """The lines read_corpus returns for a UTF-8 file, but in memory only where each one is in the file (two int64
    byte offsets: 16 MB per million lines); corpus[i] reads line i from the file, corpus[i:j] reads lines i..j-1
    in one go, and iterating reads the file in order. open_corpus builds one.

    A process reads only the lines it is asked for: the batches of a run, and under torchrun only this process's
    share of them (data.BatchSampler deals the indices out), so no process holds the corpus's text. Each process,
    a DataLoader worker too, opens the file for itself (see `file`)."""

    def __init__(self, path: Path, starts: np.ndarray, ends: np.ndarray, errors: str, stamp: tuple[int, int]):
        self.path = path
        self.starts, self.ends = starts, ends  # line i is the bytes [starts[i], ends[i]) of the file
        self.errors = errors  # how bytes are decoded: "strict" (the scan checked them) or "replace" (--bad-lines)
        self.stamp = stamp  # the file's size and modification time when scanned: the offsets hold for that file
        self._file, self._opened_by = None, None

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            first, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(first, stop, step)]
            return self.read_lines(first, stop)
        i = range(len(self))[index]  # a negative index counts from the end; past the end: IndexError
        return self.read_lines(i, i + 1)[0]

    def __iter__(self) -> Iterator[str]:
        for first in range(0, len(self), 10000):
            yield from self.read_lines(first, min(first + 10000, len(self)))

    def read_lines(self, first: int, stop: int) -> list[str]:
        """Lines first..stop-1, from one read of the bytes from the first's start to the last's end."""
        if first >= stop:
            return []
        starts, ends = self.starts[first:stop].tolist(), self.ends[first:stop].tolist()
        file = self.file()
        file.seek(starts[0])
        span = file.read(ends[-1] - starts[0])
        return [normalise_whitespace(span[s - starts[0] : e - starts[0]].decode("utf-8", self.errors))
                for s, e in zip(starts, ends)]

    def subset(self, indices: np.ndarray) -> Corpus:
        """The lines at `indices` (in increasing order), still on disk."""
        return Corpus(self.path, self.starts[indices], self.ends[indices], self.errors, self.stamp)

    def file(self) -> BinaryIO:
        """The file, opened by this process at its first read, and checked at every read: a file whose size or
        modification time is not the scanned one's (edited, or replaced by another) has other lines where the
        offsets point. A process forked from this one (a DataLoader worker) opens its own: sharing one open file,
        the two would move each other's read position."""
        if self._file is None or self._opened_by != os.getpid():
            self._file, self._opened_by = open(self.path, "rb"), os.getpid()
        try:
            status = os.stat(self.path)
        except OSError:
            status = None
        if status is None or (status.st_size, status.st_mtime_ns) != self.stamp:
            raise CorpusError(f"corpus {self.path} changed after it was read; start the run again on the file as it "
                              "is now")
        return self._file

    def __getstate__(self) -> dict:
        """What pickling (a DataLoader worker that is spawned, not forked) sends: all but the open file."""
        return {**self.__dict__, "_file": None, "_opened_by": None}


def file_stamp(file: BinaryIO) -> tuple[int, int]:
    status = os.fstat(file.fileno())
    return status.st_size, status.st_mtime_ns


def open_corpus(path: str | Path, bad_bytes: str = "error") -> Sequence[str]:
    """The lines read_corpus(path, bad_bytes) returns, as a Corpus: one pass over the file finds where each line
    is and applies bad_bytes, so a bad line stops the run here, before training, with its line number.
    The same errors as read_corpus for what is not a text file. A UTF-16 file (rare) is read into memory
    instead: read_corpus's list of its lines."""
    path = Path(path)
    check_is_a_file(path)
    try:
        with open(path, "rb") as file:
            head = file.read(len(codecs.BOM_UTF8) + HEAD_BYTES)
            if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
                return read_corpus(path, bad_bytes)
            text_start = len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0  # after a UTF-8 BOM
            check_not_binary(path, head[text_start : text_start + HEAD_BYTES])
            stamp = file_stamp(file)
            file.seek(text_start)
            starts, ends = scan_lines(file, text_start, bad_bytes, path)
    except OSError as e:
        raise CorpusError(f"cannot read corpus {path}: {e.strerror}") from None
    if not len(starts):
        raise CorpusError(f"corpus {path} has no non-blank lines")
    return Corpus(path, starts, ends, "replace" if bad_bytes == "replace" else "strict", stamp)


BLOCK_BYTES = 1 << 20  # the scan reads 1 MiB at a time: its memory stays flat whatever the file's size


def scan_lines(file: BinaryIO, offset: int, bad_bytes: str, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends): the byte offsets in the file of each line that read_corpus keeps, found by reading `file`
    from `offset` (where its text starts) to its end, a block at a time."""
    starts, ends = [], []  # an array per block
    lines_before = 0  # the lines of the blocks before, blank ones too: the line number of a bad line
    buffer = b""  # bytes read but not yet cut into lines: the start of a line that the last block did not end
    while True:
        # at least as much again as the buffer holds: a line longer than a block takes a few reads, not thousands
        block = file.read(max(BLOCK_BYTES, len(buffer)))
        buffer += block
        at_end = not block
        line_starts, line_ends = split_lines(buffer, at_end)
        kept = kept_lines(buffer, line_starts, line_ends, bad_bytes, lines_before, path)
        starts.append(offset + line_starts[kept])
        ends.append(offset + line_ends[kept])
        lines_before += len(line_starts)
        if at_end:
            return np.concatenate(starts), np.concatenate(ends)
        done = line_ends[-1] + 1 if len(line_ends) else 0  # up to and with the last line ending
        buffer, offset = buffer[done:], offset + done


def split_lines(buffer: bytes, at_end: bool) -> tuple[np.ndarray, np.ndarray]:
    """The lines of `buffer`, cut where bytes.splitlines (and so read_corpus) cuts: at \\n, \\r\\n and a lone \\r.
    (starts, ends): line k is buffer[starts[k]:ends[k]], without its line ending (but for the \\r of a \\r\\n,
    whitespace that normalising drops). Only the lines whose ending is in the buffer; at_end (the buffer ends the
    file), a last line without one too."""
    byte = np.frombuffer(buffer, dtype=np.uint8)  # the bytes as an array, no copy
    newline = byte == ord("\n")
    lone_return = byte == ord("\r")
    lone_return[:-1] &= ~newline[1:]  # a \r followed by \n is half of one line ending: the \n ends the line
    if not at_end and len(buffer):
        lone_return[-1] = False  # the next block may begin with its \n: decide then
    ends = np.flatnonzero(newline | lone_return)  # the position of each line ending, the end of its line
    starts = np.concatenate([[0], ends + 1])  # the first line, and one after each ending
    if at_end and starts[-1] < len(buffer):
        return starts, np.append(ends, len(buffer))  # the file's last line, without a line ending
    return starts[:-1], ends  # what follows the last ending is not a whole line yet (or nothing)


# The bytes below 128 that are not whitespace for str.split: letters, digits, punctuation, control codes.
ASCII_INK = np.array([b < 128 and not chr(b).isspace() for b in range(256)])


def kept_lines(buffer: bytes, starts: np.ndarray, ends: np.ndarray, bad_bytes: str, lines_before: int,
               path: Path) -> np.ndarray:
    """Which lines buffer[start:end] read_corpus keeps (True/False each): the non-blank ones, and with
    bad_bytes "skip" only those that are UTF-8. With "error", the first that is not UTF-8 stops here, named by its
    line number (lines_before + its place in the buffer)."""
    kept = np.ones(len(starts), dtype=bool)
    if not len(starts):
        return kept
    # UTF-8: no multi-byte character holds a \n or \r, so the lines are valid exactly when all of them are at
    # once, which one decode checks at C speed; only a block with a bad line is checked line by line
    if bad_bytes != "replace" and not is_utf8(buffer[starts[0] : ends[-1]]):
        for k, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
            if not is_utf8(buffer[start:end]):
                if bad_bytes != "skip":
                    raise not_utf8_error(path, lines_before + k + 1)
                kept[k] = False
    # Blank lines: one that starts with an ASCII letter, digit or punctuation mark is not blank (most lines: one
    # look-up each, all at once), an empty one is. Python decides the rest (a line that starts with a space, or
    # with a character outside ASCII, as in Chinese text) by read_corpus's own rule: str.split.
    first_bytes = np.frombuffer(buffer, dtype=np.uint8)[starts]  # an empty line's "first byte" is its line ending
    not_blank = ASCII_INK[first_bytes]
    errors = "replace" if bad_bytes == "replace" else "strict"
    for k in np.flatnonzero(~not_blank & (ends > starts) & kept).tolist():
        not_blank[k] = bool(buffer[starts[k] : ends[k]].decode("utf-8", errors).split())
    return kept & not_blank


def is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def hold_out(items: Sequence, n: int, seed: int = 0) -> tuple[Sequence, list]:
    """(the items to train on, the n items kept out of training), both in their original order. The n are a random
    sample drawn from their own generator (seeded by `seed`, not by the run's --seed), so every run on a corpus
    keeps the same lines out and their held-out scores compare. Held out means unseen: an item to train on that
    holds a sentence of the n (the same text once whitespace is normalised, as the corpus reader does; for NLI pairs
    its premise or hypothesis; for labelled rows, any of their sentences) is dropped from training too. The n
    come as a list; the items to train on as a list
    too, but from a Corpus as a Corpus (a subset: their text stays on disk)."""
    if n <= 0:
        return items, []
    if n >= len(items):
        raise UsageError(f"--heldout {n}: the data has {len(items)} lines; "
                         f"keep fewer out, so some are left to train on")
    is_out = np.zeros(len(items), dtype=bool)
    is_out[np.random.default_rng(seed).choice(len(items), size=n, replace=False)] = True
    kept_out = [items[i] for i in np.flatnonzero(is_out).tolist()]
    unseen = {text for item in kept_out for text in sentences_of(item)}
    trains = ~is_out  # every other item, unless it repeats a held-out sentence
    for i, item in enumerate(items):  # a Corpus reads its file in order, 10,000 lines at a time
        if trains[i] and not unseen.isdisjoint(sentences_of(item)):
            trains[i] = False
    if not trains.any():
        raise UsageError(f"--heldout {n}: every other line repeats a held-out sentence; keep fewer out")
    if isinstance(items, Corpus):
        return items.subset(np.flatnonzero(trains)), kept_out
    return [x for x, train in zip(items, trains.tolist()) if train], kept_out


def sentences_of(item: str | tuple) -> list[str]:
    """The sentences of a corpus line, or of a row (an NLI pair with its label; labelled pairs, triplets),
    whitespace-normalised."""
    return [normalise_whitespace(item)] if isinstance(item, str) else [normalise_whitespace(s) for s in item
                                                                        if isinstance(s, str)]


def few_shot(items: Sequence, n: int, seed: int = 0, upsample: bool = False) -> list:
    """ConSERT's few-shot study (arXiv:2105.11741 §5.3; the official --data_proportion, --do_upsampling): n items
    drawn at random (by `seed`), in their original order. With `upsample`, repeated up to the size of all the
    items, so that an epoch holds as many batches as on the full corpus: each of the n appears floor(size / n)
    times, and size mod n of them (drawn at random too) once more. (The official code repeats them int(1 / p) times,
    which falls short of the full size when p does not divide 1.)"""
    if not 0 < n <= len(items):
        raise UsageError(f"--few-shot {n}: choose 1 to {len(items)}, the lines of the data")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(items), size=n, replace=False)).tolist()
    sample = [items[i] for i in chosen]
    if not upsample:
        return sample
    times, extra = divmod(len(items), n)
    once_more = set(rng.choice(n, size=extra, replace=False).tolist())
    return [item for i, item in enumerate(sample) for _ in range(times + (i in once_more))]
