"""The files evaluate.py's tasks read: where each lies in the data folder, the public set it belongs to (named
when it is missing), and the files of your own that rerank:PATH, sts:PATH and pairs:PATH name.

  default_data_dir                         the data folder: $EVAL_DATA_DIR, else data/ in this repository
  TASK_FILES, SOURCES                      the public sets: each task's files, and where they come from
  missing_file                             a one-line message naming the first file a task needs that is absent
  own_file                                 your own file of rerank:PATH, sts:PATH, pairs:PATH
  load_sts_file, load_pairs_file           sts:PATH's scored pairs, pairs:PATH's 0/1 pairs, checked to be scorable
  check_own_file                           read the file once, so that a bad one stops before a model is loaded
The readers of each format: lib/datafiles.py.
"""
from __future__ import annotations

import os
from pathlib import Path

from lib.datafiles import STS_SUBSETS, STSB_SPLITS, read_binary_pairs, read_scored_pairs
from lib.errors import CorpusError
from lib.useb import USEB_EVAL

# ----------------------------------------------------------------------------
# The public sets


def default_data_dir() -> Path:
    """$EVAL_DATA_DIR, else data/ in this repository (where `python evaluate.py --fetch-data data` puts it)."""
    return Path(os.environ.get("EVAL_DATA_DIR") or Path(__file__).resolve().parent.parent / "data")


# Files each task of evaluate.TASKS reads, relative to the data folder.
TASK_FILES = {
    "stsb": ["stsbenchmark/sts-test.csv", "stsbenchmark/sts-dev.csv",
             "stsbenchmark/senteval/sts-test.csv", "stsbenchmark/senteval/sts-dev.csv"],
    "stsb-dev": ["stsbenchmark/sts-dev.csv", "stsbenchmark/senteval/sts-dev.csv"],
    "sickr": ["sick/SICK_test_annotated.txt"],
    **{year: [f"{year}/STS.{kind}.{subset}.txt" for subset in subsets for kind in ("input", "gs")]
       for year, subsets in STS_SUBSETS.items()},
    "twitterpara": ["twitterpara/Twitter_URL_Corpus_test.txt", "twitterpara/test.data"],
    "askubuntu": ["askubuntu/text_tokenized.txt.gz", "askubuntu/dev.txt", "askubuntu/test.txt"],
    "useb-askubuntu": [f"{USEB_EVAL}/askubuntu/text_tokenized.txt", f"{USEB_EVAL}/askubuntu/dev.txt",
                       f"{USEB_EVAL}/askubuntu/test.txt"],
    "useb-cqadupstack": [f"{USEB_EVAL}/cqadupstack/corpus.json", f"{USEB_EVAL}/cqadupstack/retrieval_split.json"],
    "useb-twitterpara": [f"{USEB_EVAL}/twitterpara/Twitter_URL_Corpus_test.txt", f"{USEB_EVAL}/twitterpara/test.data",
                         f"{USEB_EVAL}/twitterpara/test.label"],
    "useb-scidocs": [f"{USEB_EVAL}/scidocs/data.json"],
    "align-uniform": [f"stsbenchmark/sts-{split}.csv" for split in STSB_SPLITS],
}

# Named in the message when a file is missing: which public data set (a file's first folder), and where it comes from.
SOURCES = {
    "stsbenchmark": "the STS benchmark (Cer et al. 2017, SemEval-2017 Task 1): the official "
    "Stsbenchmark.tar.gz; senteval/ holds the tokenized copy that SentEval's get_transfer_data.bash makes",
    "sick": "SICK (Marelli et al. 2014): the SemEval-2014 Task 1 release of SICK-R",
    "sts12": "STS12 (SemEval-2012 Task 6) in SentEval's layout (data/downstream/STS/STS12-en-test)",
    "sts13": "STS13 (*SEM 2013 shared task) in SentEval's layout (data/downstream/STS/STS13-en-test)",
    "sts14": "STS14 (SemEval-2014 Task 10) in SentEval's layout (data/downstream/STS/STS14-en-test)",
    "sts15": "STS15 (SemEval-2015 Task 2) in SentEval's layout (data/downstream/STS/STS15-en-test)",
    "sts16": "STS16 (SemEval-2016 Task 1) in SentEval's layout (data/downstream/STS/STS16-en-test)",
    "twitterpara": "TwitterPara as USEB uses it: the Twitter URL corpus test set (Lan et al. 2017, "
    "github.com/lanwuwei/Twitter-URL-Corpus) and the PIT-2015 test set (Xu et al. 2015, "
    "github.com/cocoxu/SemEval-PIT2015)",
    "askubuntu": "AskUbuntu (Lei et al. 2016, github.com/taolei87/askubuntu): text_tokenized.txt.gz, dev.txt, test.txt",
    "useb": "USEB (Wang et al. 2021, github.com/UKPLab/useb): its data-eval.zip, which is not among the default sets",
}


def missing_file(task: str, data_dir: Path) -> str | None:
    """A one-line message naming the first file `task` (or the group useb: every useb-* task) needs that is absent,
    with its public set and how to download it (your own file: what it should hold); None when all are there."""
    if own_file(task) is not None:
        return missing_own_file(task)
    tasks = [name for name in TASK_FILES if name.startswith("useb-")] if task == "useb" else [task]
    for rel in (rel for name in tasks for rel in TASK_FILES[name]):
        if not (data_dir / rel).is_file():
            sets = " --sets useb" if rel.startswith("useb/") else ""  # USEB is not among the default sets
            return (f"missing data file {data_dir / rel}: it belongs to {SOURCES[rel.split('/')[0]]} "
                    f"(python evaluate.py --fetch-data {data_dir}{sets} downloads the public sets)")
    return None


# ----------------------------------------------------------------------------
# Your own files: rerank:PATH, sts:PATH, pairs:PATH (their formats: lib/datafiles.py, read_rows)

OWN_FILE_KINDS = ("rerank", "sts", "pairs")  # evaluate.OWN_FILE_TASKS scores them


def own_file(task: str) -> Path | None:
    """The file a task on your own data names (rerank:PATH, sts:PATH, pairs:PATH), or None for any other task."""
    kind, colon, path = task.partition(":")
    return Path(path) if colon and kind in OWN_FILE_KINDS else None


def missing_own_file(task: str) -> str | None:
    """missing_file of rerank:PATH, sts:PATH or pairs:PATH."""
    path = own_file(task)
    if path.is_file():
        return None
    return {"rerank": f"missing re-ranking file {path} (your own jsonl, see evaluate.py)",
            "sts": f"missing file {path} (sts:PATH: your own scored pairs, TSV, CSV or JSONL with the columns "
                   "sentence1, sentence2, score)",
            "pairs": f"missing file {path} (pairs:PATH: your own 0/1 pairs, TSV, CSV or JSONL with the columns "
                     "sentence1, sentence2, label)"}[task.partition(":")[0]]


def load_sts_file(path: Path) -> list[tuple[str, str, float]]:
    """The (sentence1, sentence2, score) pairs of sts:PATH, with at least two different scores (else no rank
    correlation is defined). A bad file: a one-line CorpusError."""
    pairs = read_scored_pairs(path)
    if len({score for _, _, score in pairs}) < 2:
        raise CorpusError(f"{path}: every pair has the score {pairs[0][2]:g}; a rank correlation needs at least "
                          "two different scores")
    return pairs


def load_pairs_file(path: Path) -> list[tuple[str, str, int]]:
    """The (sentence1, sentence2, 0/1 label) pairs of pairs:PATH, with both labels present (with no positive the
    average precision is undefined; with no negative it is 100 whatever the model). A bad file: a one-line
    CorpusError."""
    pairs = read_binary_pairs(path)
    positives = sum(label for _, _, label in pairs)
    if positives in (0, len(pairs)):
        raise CorpusError(f"{path}: every pair has the label {pairs[0][2]}; average precision needs pairs labelled "
                          "1 and pairs labelled 0")
    return pairs


def check_own_file(task: str) -> None:
    """Read the file of sts:PATH or pairs:PATH once, so that a malformed one stops in one line before a model is
    loaded (python evaluate.py; the training scripts' --eval-task check). Any other task: nothing to do."""
    if task.startswith("sts:"):
        load_sts_file(own_file(task))
    elif task.startswith("pairs:"):
        load_pairs_file(own_file(task))
