"""A corpus larger than memory: open_corpus gives read_corpus's lines from their byte offsets, in DataLoader
workers too; plain batches need no token lengths, and neither the batches nor the model card change."""
import pickle

import numpy as np
import pytest
import torch

from lib import card
import data
from commands import consert_train, tsdae_train
from lib import corpus as lib_corpus
from lib.corpus import BLOCK_BYTES, Corpus, hold_out, open_corpus, read_corpus
from lib import errors

AWKWARD_FILES = {
    "blank lines and spaces": b"\n\n  first  line \n   \n\t\nsecond\tline\n\n",
    "\\r\\n, a lone \\r, no final newline": b"one\r\ntwo\r\n\r\nthree\rfour\r\n\rfive",
    "a UTF-8 byte-order mark": "\ufeffthe first line\nthe second\n".encode("utf-8"),
    "non-ASCII whitespace and text": " \u3000\n\u00a0\nn\u0085o\n中文句子\n  été\n\x0b\x1c\n".encode("utf-8"),
    "bad bytes": b"good line\n\xff\xfe bad bytes\n\xff\n  \xe2\x82\n\xc3\xa9 fine\nlast \xc3",
}


@pytest.mark.parametrize("bad_bytes", ["skip", "replace"])
@pytest.mark.parametrize("name", AWKWARD_FILES)
@pytest.mark.parametrize("block_bytes", [3, BLOCK_BYTES])  # 3: lines (and a \r\n) cut across blocks
def test_the_lazy_corpus_reads_what_read_corpus_reads(name, bad_bytes, block_bytes, tmp_path, monkeypatch):
    monkeypatch.setattr(lib_corpus, "BLOCK_BYTES", block_bytes)
    path = tmp_path / "corpus.txt"
    path.write_bytes(AWKWARD_FILES[name])
    expected = read_corpus(path, bad_bytes)
    corpus = open_corpus(path, bad_bytes)
    assert isinstance(corpus, Corpus) and len(corpus) == len(expected)
    assert list(corpus) == [corpus[i] for i in range(len(corpus))] == corpus[:] == expected
    assert corpus[-1] == expected[-1] and corpus[1:3] == expected[1:3] and corpus[::2] == expected[::2]


def test_a_bad_line_stops_the_scan_with_its_line_number(tmp_path, monkeypatch):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"good\n\n" * 1000 + b"still good\r\nbad \xff\n")
    for block_bytes in (5, BLOCK_BYTES):
        monkeypatch.setattr(lib_corpus, "BLOCK_BYTES", block_bytes)
        with pytest.raises(errors.CorpusError, match="line 2002 is not valid UTF-8; fix the file or pass --bad-lines"):
            open_corpus(path)
        with pytest.raises(errors.CorpusError, match="line 2002 is not valid UTF-8"):
            read_corpus(path)


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("folder", "is a folder"),
    (b"\n \n\t\n", "has no non-blank lines"),
    (b"\x00\x01\x02binary", "looks like a binary file"),
    ("two lines\nof text\n".encode("utf-16-le"), "looks like UTF-16 without a byte-order mark"),
])
def test_what_is_not_a_text_file_gets_read_corpus_errors(content, message, tmp_path):
    path = tmp_path / "corpus.txt"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(errors.CorpusError, match=message):
        open_corpus(path)


def test_utf16_with_its_byte_order_mark_is_read_into_memory(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("héllo wörld\r\nsecond line\n", encoding="utf-16")
    assert open_corpus(path) == read_corpus(path) == ["héllo wörld", "second line"]


def test_a_corpus_reads_in_dataloader_workers_and_pickles_without_its_file(small_corpus):
    corpus = open_corpus(small_corpus)
    expected = read_corpus(small_corpus)
    assert corpus[0] == expected[0]  # the file is open in this process now: forked workers must open their own
    unpickled = pickle.loads(pickle.dumps(corpus))
    assert unpickled._file is None and list(unpickled) == expected
    loader = torch.utils.data.DataLoader(corpus, batch_size=3, num_workers=2, collate_fn=list)
    assert [line for batch in loader for line in batch] == expected


def test_a_file_changed_after_the_scan_is_refused(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("one\ntwo\n")
    corpus = open_corpus(path)
    path.write_text("one\ntwo\nthree\n")
    with pytest.raises(errors.CorpusError, match="changed after it was read"):
        corpus[0]


def test_hold_out_of_a_corpus_keeps_the_text_on_disk(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"line {i}\n\n" for i in range(100)))
    corpus, lines = open_corpus(path), read_corpus(path)
    kept, held = hold_out(corpus, 10)
    assert isinstance(kept, Corpus) and (kept[:], held) == hold_out(lines, 10)
    assert hold_out(corpus, 0) == (corpus, [])


def test_plain_batches_are_those_of_the_lengths_computed_before():
    """Without bucketing the sampler needs only the number of sentences, and gives exactly the batches it gave
    when it was handed every length: the permutation of the count drawn from (seed, epoch), cut into batches."""
    n, batch_size = 103, 8
    lengths = [len(str(i)) + i % 7 for i in range(n)]
    for seed, epoch, world in [(0, 0, 1), (5, 3, 1), (5, 0, 2), (1, 2, 7)]:
        order = np.random.default_rng([seed, epoch]).permutation(n)  # the computation before, written out
        before = [order[i : i + batch_size].tolist() for i in range(0, n, batch_size)]
        if len(before[-1]) < world:  # 103 = 12 x 8 + 7: a 7th process would get nothing of the last batch
            before[-2] += before.pop()
        by_count = data.BatchSampler(n, batch_size, seed=seed, world_size=world)
        by_lengths = data.BatchSampler(lengths, batch_size, seed=seed, world_size=world)
        assert list(by_count.iter_batches(epoch)) == list(by_lengths.iter_batches(epoch)) == before
        assert len(by_count) == len(by_lengths) == len(before)
    with pytest.raises(ValueError, match="bucketing needs each sentence's length"):
        data.BatchSampler(n, batch_size, bucketing=True)


@pytest.mark.parametrize("module", [tsdae_train, consert_train])
def test_token_lengths_only_with_bucketing(module, tiny_model_dir, small_corpus, tmp_path, monkeypatch):
    def refuse(*args, **kw):
        raise AssertionError("plain batches tokenised the whole corpus")

    monkeypatch.setattr(data, "token_lengths", refuse)
    module.main(["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path / "run"),
                 "--steps", "2", "--batch-size", "4"])
    assert len((tmp_path / "run" / "log.jsonl").read_text().splitlines()) == 2


def test_the_card_fingerprint_of_a_corpus_is_that_of_its_lines(tmp_path):
    """The model card's corpus_lines and corpus_sha256: the same from the file's offsets as from the list of lines
    (over more lines than one read of the stream, 10,000, holds)."""
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"  sentence\tnumber {i} é\r\n" + "\n" * (i % 3) for i in range(25000)), encoding="utf-8")
    corpus = open_corpus(path)
    assert card.corpus_fingerprint(corpus) == card.corpus_fingerprint(read_corpus(path))
    kept, _ = hold_out(corpus, 5)
    assert card.corpus_fingerprint(kept) == card.corpus_fingerprint(hold_out(read_corpus(path), 5)[0])
