"""The public data sets' files: each reader returns plain lists and names the file and the line of a malformed one.

  STS_SUBSETS, STSB_SPLITS, load_stsb, load_sick,    the STS sets (training reads their sentences, evaluate.py
  load_sts_year                                      their scores)
  load_twitter_url, load_pit2015, load_askubuntu     the ranking sets of TSDAE's table (evaluate.py)
  load_rerank_jsonl                                  your own re-ranking file (evaluate.py --tasks rerank:PATH)
  load_json, want                                    JSON files, and their one-line format errors (lib/useb.py)
  read_nli, sts_corpus                               the ConSERT experiment's inputs: NLI pairs, the official
                                                     unsupervised set (STS12-16, STS-b and SICK sentences)
Your own files (TSV, CSV or JSONL, the columns named as sentence-transformers' data sets name them):
  read_rows                                          any of the three formats: the column names and the rows
  read_scored_pairs, read_binary_pairs               pairs with a score (evaluate.py --tasks sts:PATH) or a 0/1
                                                     label (pairs:PATH)
  read_training_file                                 labelled training data: scored pairs, pairs, triplets or
                                                     n-tuples (anchor, positive, negative_1 ... negative_k)
  nli_triplets                                       read_nli's pairs as SimCSE's supervised (anchor, entailed,
                                                     contradicted) triplets
The layouts, and where each set comes from: docs/evaluation.md.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
from pathlib import Path
from typing import Sequence

from lib.corpus import read_corpus, read_text_bytes
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
STSB_SPLITS = ("train", "dev", "test")  # the STS benchmark's files: sts-train.csv, sts-dev.csv, sts-test.csv


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
        bm25_order = [candidates[i]
                      for i in sorted(range(len(bm25)), key=lambda i: -bm25[i])]  # the files are already so
        if similar.split():
            queries.append((qid, set(similar.split()), bm25_order))
    return queries


def load_askubuntu(folder: Path, splits: Sequence[str], corpus: str = "text_tokenized.txt.gz"
                   ) -> tuple[dict[str, list[tuple[str, set[str], list[str]]]], dict[str, str]]:
    """An AskUbuntu release folder: ({split: its queries (load_askubuntu_queries)}, {question id: title} of every
    question those queries name, in the order they first name them). Only the questions of `splits` are read from
    `corpus`; one they name that it lacks is a one-line DataFormatError."""
    queries = {split: load_askubuntu_queries(folder / f"{split}.txt") for split in splits}
    ids = list(dict.fromkeys(i for qs in queries.values() for q, _, candidates in qs for i in [q, *candidates]))
    titles = load_askubuntu_titles(folder / corpus, set(ids))
    if missing := [i for i in ids if i not in titles]:
        named_in = " or ".join(f"{split}.txt" for split in splits)
        raise DataFormatError(f"{folder / corpus}: no line for question {missing[0]}, which {named_in} names")
    return queries, {i: titles[i] for i in ids}


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
    read_corpus(path, bad_bytes, role="NLI file")  # the checks every input gets: exists, text, UTF-8, not empty
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
            raise CorpusError(f"--sts-corpus: missing {path} (docs/evaluation.md lists the layout; python "
                              "evaluate.py --fetch-data DIR downloads it)")
    sentences = [s for path in sts for line in read_lines(path) for s in line.split("\t")[:2]]
    sentences += [s for path in stsb for s1, s2, _ in load_stsb(path) for s in (s1, s2)]
    sentences += [s for path in sick for s1, s2, _ in load_sick(path) for s in (s1, s2)]
    return [s.strip() for s in sentences if s.strip()]


# ----------------------------------------------------------------------------
# Your own files: labelled pairs and triplets in TSV, CSV or JSONL
#
# The column names are those of sentence-transformers' data sets: sentence1, sentence2 and score (or label) for
# pairs; anchor, positive [, negative, or negative_1 ... negative_k] for training pairs, triplets and n-tuples.
# Other columns are not read (read_training_file names them).

SENTENCE_COLUMNS = ("sentence1", "sentence2", "anchor", "positive", "negative")  # JSONL: strings (negative_1... too)
NUMBER_COLUMNS = ("score", "label")  # JSONL: must hold numbers (or numeric strings)


def file_format(path: Path, first_line: str) -> str:
    """The format of a file of yours, "tsv", "csv" or "jsonl": by the extension (.tsv and .txt; .csv; .jsonl and
    .json), else by its first non-blank line: it starts with "{" -> JSONL, it holds a tab -> TSV, else CSV."""
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".txt"):
        return "tsv"
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if first_line.lstrip().startswith("{"):
        return "jsonl"
    return "tsv" if "\t" in first_line else "csv"


def read_rows(path: str | Path, role: str = "file") -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The column names and the rows, (line number, {column: value}), of a TSV, CSV or JSONL file (file_format).
    TSV and CSV: a header line names the columns. JSONL: one JSON object a line; the first object's keys name the
    columns and every line needs them. Blank lines are skipped, but count in the line numbers the errors name.

      TSV    split at every tab; quotes are plain text (csv.QUOTE_NONE, as load_stsb reads the STS benchmark,
             whose sentences hold unbalanced quotes). So a sentence cannot hold a tab.
      CSV    standard quoting: a field in double quotes may hold commas, tabs and "" for a quote.
      JSONL  the values of the sentence columns must be strings, those of score and label numbers (or numeric
             strings); other keys may hold anything.

    Values are returned as text (a JSON number as its JSON text); the pair readers below check them. A file that is
    missing, binary, not UTF-8, empty or malformed raises a one-line CorpusError: "PATH line N: what is wrong" (a
    binary one: "ROLE PATH looks like a binary file", role saying what the file is for: "pairs file", "test set")."""
    path = Path(path)
    text = _read_text(path, role)
    if not text.strip():
        raise CorpusError(f"{path}: the file is empty (want a header line naming the columns, then one row a line)")
    first_line = text.lstrip().split("\n", 1)[0]
    kind = file_format(path, first_line)
    columns, rows = _json_rows(path, text) if kind == "jsonl" else _table_rows(path, text, kind)
    if not rows:
        raise CorpusError(f"{path}: no rows, only the header {', '.join(columns)}")
    return columns, rows


def _read_text(path: Path, role: str) -> str:
    """The file's text, with lib.corpus's checks (a binary file, UTF-16) and one-line errors."""
    if not path.exists():
        raise CorpusError(f"{path}: no such file")
    if not path.is_file():
        raise CorpusError(f"{path}: not a file (a folder?)")
    raw = read_text_bytes(path, role)  # refuses a binary file; converts UTF-16 with a byte-order mark, drops UTF-8's
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise CorpusError(f"{path} line {line}: not valid UTF-8 (save the file as UTF-8)") from None


def _table_rows(path: Path, text: str, kind: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """TSV or CSV: the header's column names and the rows. The two differ only in the delimiter and the quoting."""
    lines = io.StringIO(text, newline="")  # as the csv module wants: it finds the line ends itself
    if kind == "tsv":
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(lines, strict=True)  # strict: a stray quote is an error, not a silently merged field
    header, rows, next_line = None, [], 1
    try:
        for fields in reader:
            number, next_line = next_line, reader.line_num + 1  # a quoted CSV field may run over several lines
            if not "".join(fields).strip():
                continue  # a blank line
            if header is None:
                header = [name.strip() for name in fields]
                if len(set(header)) < len(header):
                    twice = next(name for name in header if header.count(name) > 1)
                    raise CorpusError(f"{path} line {number}: the header names the column {twice!r} twice")
                continue
            if len(fields) != len(header):
                raise CorpusError(_field_count_error(path, number, kind, len(fields), len(header)))
            rows.append((number, dict(zip(header, fields))))
    except csv.Error as e:  # CSV's quoting rules, or a field over the csv module's size limit
        hint = ' (CSV: quote a field that holds a quote, and double the quotes inside it: "say ""hi""")'
        raise CorpusError(f"{path} line {reader.line_num}: {e}{hint if kind == 'csv' else ''}") from None
    return header, rows


def _field_count_error(path: Path, number: int, kind: str, fields: int, wanted: int) -> str:
    if kind == "csv":
        hint = " (a comma inside a sentence? put the sentence in double quotes)" if fields > wanted else ""
        return f"{path} line {number}: {fields} comma-separated fields, the header has {wanted}{hint}"
    hint = " (a tab inside a sentence? TSV splits at every tab: use CSV or JSONL)" if fields > wanted else ""
    return f"{path} line {number}: {fields} tab-separated fields, the header has {wanted}{hint}"


def _json_rows(path: Path, text: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """JSONL: the first object's keys as the column names, and the rows."""
    columns, rows = None, []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path} line {number}: not valid JSON ({e.msg}); want one JSON object a line") from None
        if not isinstance(item, dict):
            what = "an array" if isinstance(item, list) else f"{json.dumps(item)[:40]}"
            raise CorpusError(f"{path} line {number}: {what}, not a JSON object; want one object a line, "
                              "its keys naming the columns")
        if columns is None:
            columns = list(item)
        missing = [column for column in columns if column not in item]
        if missing:
            raise CorpusError(f'{path} line {number}: no key "{missing[0]}", which the first object has '
                              "(every line needs the same keys)")
        rows.append((number, {column: _json_value(path, number, column, item[column]) for column in columns}))
    return columns or [], rows


def _json_value(path: Path, number: int, column: str, value) -> str:
    """A JSONL value as text: a sentence column's must be a string, a score's or label's a number (or a string)."""
    shown = json.dumps(value)[:40]
    if (column in SENTENCE_COLUMNS or negative_columns([column])) and not isinstance(value, str):
        raise CorpusError(f"{path} line {number}: {column} is {shown}, not a string")
    if column in NUMBER_COLUMNS and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise CorpusError(f"{path} line {number}: {column} is {shown}, not a number")
    return value if isinstance(value, str) else json.dumps(value)


def _missing_columns(path: Path, columns: list[str], wanted: str) -> CorpusError:
    return CorpusError(f"{path}: want the columns {wanted}; found {', '.join(columns) or 'none'}")


def _sentence(path: Path, number: int, row: dict[str, str], column: str) -> str:
    """The row's value in a sentence column, refused when empty; kept as written (not stripped)."""
    if not row[column].strip():
        raise CorpusError(f"{path} line {number}: {column} is empty")
    return row[column]


def _number(path: Path, number: int, row: dict[str, str], column: str) -> float:
    """The row's value in a score or label column as a float, refused unless a finite number."""
    try:
        value = float(row[column])
    except ValueError:
        raise CorpusError(f"{path} line {number}: {column} {row[column]!r} is not a number") from None
    if not math.isfinite(value):
        raise CorpusError(f"{path} line {number}: {column} {row[column]!r} is not a finite number")
    return value


def _scored_pairs(path: Path, columns: list[str], rows: list[tuple[int, dict[str, str]]],
                  score_range: tuple[float, float] | None = None) -> list[tuple[str, str, float]]:
    score_column = "score" if "score" in columns else "label"
    if not {"sentence1", "sentence2", score_column} <= set(columns):
        raise _missing_columns(path, columns, "sentence1, sentence2 and score (or label)")
    pairs = []
    for number, row in rows:
        score = _number(path, number, row, score_column)
        if score_range is not None and not score_range[0] <= score <= score_range[1]:
            raise CorpusError(f"{path} line {number}: {score_column} {row[score_column]!r} is outside the score range "
                              f"{score_range[0]:g},{score_range[1]:g}")
        pairs.append((_sentence(path, number, row, "sentence1"), _sentence(path, number, row, "sentence2"), score))
    return pairs


def read_scored_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """(sentence1, sentence2, score) from a file with the columns sentence1, sentence2 and score (else label), any
    numbers: the gold similarity of each pair. evaluate.py's sts:PATH scores these; CoSENT and cosine-regression
    training learn from them. read_rows gives the formats and the one-line errors."""
    path = Path(path)
    columns, rows = read_rows(path, role="test set")
    return _scored_pairs(path, columns, rows)


def read_binary_pairs(path: str | Path) -> list[tuple[str, str, int]]:
    """(sentence1, sentence2, label) from a file with the columns sentence1, sentence2 and label (else score), each
    0 or 1 (1: the pair is similar, a paraphrase, a duplicate). evaluate.py's pairs:PATH scores these."""
    path = Path(path)
    columns, rows = read_rows(path, role="test set")
    label_column = "label" if "label" in columns else "score"
    if not {"sentence1", "sentence2", label_column} <= set(columns):
        raise _missing_columns(path, columns, "sentence1, sentence2 and label (or score), 0 or 1")
    pairs = []
    for number, row in rows:
        label = _number(path, number, row, label_column)
        if label not in (0.0, 1.0):
            raise CorpusError(f"{path} line {number}: {label_column} {row[label_column]!r} is not 0 or 1 "
                              "(graded scores: evaluate them with sts:PATH)")
        pairs.append((_sentence(path, number, row, "sentence1"), _sentence(path, number, row, "sentence2"), int(label)))
    return pairs


def negative_columns(columns: list[str]) -> list[str]:
    """The hard-negative columns: negative, and negative_1, negative_2, ... in their order (the n-tuple files of
    sentence-transformers' mine_hard_negatives(output_format="n-tuple"))."""
    numbered = [c for c in columns if c.startswith("negative_") and c.removeprefix("negative_").isdigit()]
    return (["negative"] if "negative" in columns else []) + sorted(numbered, key=lambda c: int(c.split("_")[1]))


def read_training_file(path: str | Path, score_range: tuple[float, float] | None = None
                       ) -> tuple[str, list[tuple], list[str]]:
    """Labelled training data, its kind told by the header (or the JSONL keys), first match wins:

      sentence1, sentence2, score (or label)   -> ("scored", [(sentence1, sentence2, score)])  CoSENT, cosine regression
      anchor, positive, negative               -> ("triplets", [(anchor, positive, negative)])
      anchor, positive, negative_1 ... _k      -> ("tuples", [(anchor, positive, negative_1, ..., negative_k)])
      anchor, positive                         -> ("pairs", [(anchor, positive)])  in-batch negatives
      sentence1, sentence2 [, negative ...]    -> as anchor, positive [, negative ...]

    Returns (kind, rows, the columns not used), the last for the caller to name. score_range (LOW, HIGH): a score
    outside it is refused, naming its line. An NLI file (premise, hypothesis, label) is not one of these: read_nli,
    then nli_triplets."""
    path = Path(path)
    columns, rows = read_rows(path, role="pairs file")
    unused = lambda used: [c for c in columns if c not in used]
    if {"sentence1", "sentence2"} <= set(columns) and ("score" in columns or "label" in columns):
        score_column = "score" if "score" in columns else "label"
        return "scored", _scored_pairs(path, columns, rows, score_range), unused(["sentence1", "sentence2",
                                                                                  score_column])
    if {"anchor", "positive"} <= set(columns):
        first, second = "anchor", "positive"
    elif {"sentence1", "sentence2"} <= set(columns):
        first, second = "sentence1", "sentence2"
    else:
        raise _missing_columns(path, columns, "anchor, positive [, negative], or sentence1, sentence2 [, score]")
    used = [first, second, *negative_columns(columns)]
    kind = {2: "pairs", 3: "triplets"}.get(len(used), "tuples")
    return kind, [tuple(_sentence(path, number, row, c) for c in used) for number, row in rows], unused(used)


def nli_triplets(pairs: list[tuple[str, str, int]]) -> list[tuple[str, str, str]]:
    """(premise, entailed hypothesis, contradicted hypothesis) triplets from read_nli's (premise, hypothesis,
    label id) pairs: SimCSE's supervised setting (Gao et al. 2021, arXiv:2104.08821: entailment pairs as the
    positives, contradiction pairs as the hard negatives). Each entailment hypothesis of a premise is the positive
    of one triplet, with a contradiction hypothesis of the same premise as its negative: the first for the first
    positive, the second for the second, and so on, starting again from the first when they run out. A premise
    without both an entailment and a contradiction gives none; neutral pairs are not used. Deterministic: the
    triplets come in the order of each premise's first entailment pair."""
    entailed: dict[str, list[str]] = {}  # premise -> its entailment hypotheses, in file order
    contradicted: dict[str, list[str]] = {}
    for premise, hypothesis, label in pairs:
        if label == NLI_LABELS["entailment"]:
            entailed.setdefault(premise, []).append(hypothesis)
        elif label == NLI_LABELS["contradiction"]:
            contradicted.setdefault(premise, []).append(hypothesis)
    triplets = []
    for premise, positives in entailed.items():
        negatives = contradicted.get(premise, [])
        if negatives:
            for i, positive in enumerate(positives):
                triplets.append((premise, positive, negatives[i % len(negatives)]))
    return triplets
