"""The public data sets' files: each reader returns plain lists and names the file and the line of a malformed one.

  STS_SUBSETS, load_stsb, load_sick, load_sts_year   the STS sets (training reads their sentences, evaluate.py
                                                     their scores)
  load_twitter_url, load_pit2015, load_askubuntu_*   the ranking sets of TSDAE's table (evaluate.py)
  load_rerank_jsonl                                  your own re-ranking file (evaluate.py --tasks rerank:PATH)
  load_json, want                                    JSON files, and their one-line format errors (lib/useb.py)
  read_nli, sts_corpus                               the ConSERT experiment's inputs: NLI pairs, the official
                                                     unsupervised set (STS12-16, STS-b and SICK sentences)
The layouts: the README's "Data" section and docs/evaluation.md.
"""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Sequence

from lib.corpus import read_corpus
from lib.errors import CorpusError, DataFormatError

NLI_LABELS = {"contradiction": 0, "entailment": 1, "neutral": 2}  # the label ids of the official ConSERT code

# ----------------------------------------------------------------------------
# The STS sets
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


# ----------------------------------------------------------------------------
# The ranking sets, and your own re-ranking file


def load_twitter_url(path: Path) -> list[tuple[str, str, int]]:
    """Twitter URL corpus test set: sentence1 TAB sentence2 TAB (n,6) TAB url, n of 6 annotators said
    paraphrase. USEB's rule: n > 3 -> paraphrase (1), n < 3 -> not (0), n = 3 undecided -> dropped."""
    pairs = []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():  # the file has 250 blank lines
            continue
        try:
            s1, s2, votes = line.split("\t")[:3]
            n = int(votes.strip("()").split(",")[0])
        except ValueError:
            raise DataFormatError(f"{path}:{number}: want sentence1 TAB sentence2 TAB (n,6) votes") from None
        if n != 3:
            pairs.append((s1.strip(), s2.strip(), int(n > 3)))  # stripped, as USEB encodes them
    return pairs


def load_pit2015(path: Path) -> list[tuple[str, str, int]]:
    """PIT-2015 test.data: topic id, topic, sentence1, sentence2, expert score 0-5, two tag columns.
    USEB's rule on the expert score: 4-5 -> paraphrase (1), 0-2 -> not (0), 3 (debatable) -> dropped.
    This is the same split as the official test.label (true / false / ----)."""
    pairs = []
    for number, line in enumerate(read_lines(path), 1):
        fields = line.split("\t")
        try:
            expert = int(fields[4])
        except (IndexError, ValueError):
            raise DataFormatError(f"{path}:{number}: want topic id, topic, sentence1, sentence2, expert score "
                                  "0-5, ... (tab-separated)") from None
        if expert != 3:
            pairs.append((fields[2].strip(), fields[3].strip(), int(expert > 3)))  # stripped, as USEB encodes them
    return pairs


def load_askubuntu_titles(path: Path, keep: set[str] | None = None) -> dict[str, str]:
    """text_tokenized.txt.gz of the AskUbuntu release (USEB's data-eval: text_tokenized.txt, not compressed):
    question id TAB title TAB body. Only the ids in `keep` when given (the corpus has 167,765 questions)."""
    titles = {}
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
        for number, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t", 2)
            if len(fields) < 2:
                raise DataFormatError(f"{path}:{number}: want question id TAB title TAB body")
            if keep is None or fields[0].strip() in keep:
                titles[fields[0].strip()] = fields[1].strip()
    return titles


def load_askubuntu_queries(path: Path) -> list[tuple[str, set[str], list[str]]]:
    """dev.txt / test.txt: query id, similar ids, candidate ids, BM25 scores (tab-separated, ids
    space-separated). Returns (query, positives, candidates in BM25 order) for the queries that have at
    least one similar question; the others do not count in USEB's (or anyone's) MAP."""
    queries = []
    for number, line in enumerate(read_lines(path), 1):
        fields = line.split("\t")
        try:
            qid, similar, candidates, bm25 = fields
            candidates, bm25 = candidates.split(), [float(s) for s in bm25.split()]
        except ValueError:
            raise DataFormatError(f"{path}:{number}: want query id, similar ids, candidate ids, BM25 scores "
                                  f"(4 tab-separated fields, got {len(fields)})") from None
        if len(bm25) != len(candidates):
            raise DataFormatError(f"{path}:{number}: {len(candidates)} candidates but {len(bm25)} BM25 scores")
        if similar.split() and not set(similar.split()) & set(candidates):
            raise DataFormatError(f"{path}:{number}: none of the similar questions is among the candidates")
        bm25_order = [candidates[i] for i in sorted(range(len(bm25)), key=lambda i: -bm25[i])]  # the files are already so
        if similar.split():
            queries.append((qid, set(similar.split()), bm25_order))
    return queries


def load_rerank_jsonl(path: Path) -> list[tuple[str, list[str], list[str]]]:
    """Generic re-ranking file: one JSON object a line, {"query": str, "positive": [str], "negative": [str]}."""
    queries = []
    for number, line in enumerate(read_lines(path), 1):
        if line.strip():
            item = json.loads(line)
            if not isinstance(item.get("query"), str) or not isinstance(item.get("positive"), list) \
                    or not isinstance(item.get("negative"), list):
                raise ValueError(f"{path}:{number}: want keys query (str), positive (list), negative (list)")
            queries.append((item["query"], item["positive"], item["negative"]))
    return queries


def load_json(path: Path):
    """A JSON file; a malformed one raises a one-line DataFormatError naming the file and the line."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def want(ok: bool, path: Path, where: str, what: str) -> None:
    """Raise DataFormatError('PATH: WHERE: want WHAT') unless ok."""
    if not ok:
        raise DataFormatError(f"{path}: {where}: want {what}")


# ----------------------------------------------------------------------------
# The ConSERT experiment's inputs


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
