"""Score sentence embeddings the way the TSDAE and ConSERT papers do.

STS (ConSERT's table and §4.1, SentEval data): Spearman x 100 between gold scores and the cosine similarity of the two
sentence embeddings, on STS12-16, the STS benchmark and SICK-R; "avg7" is the unweighted mean of those seven.
Ranking (TSDAE's table, the USEB protocol): AskUbuntu MAP (plus P@1, P@5, MRR) after re-ranking 20 BM25 candidates
by cosine; TwitterPara average precision. USEB itself (TSDAE's tab. 2, the `useb` package's scores to the digit):
useb-askubuntu, useb-cqadupstack, useb-twitterpara, useb-scidocs on USEB's own data-eval, `--split test|valid`.
Your own data: rerank:PATH (a re-ranking jsonl: MAP); sts:PATH, pairs with a score (Spearman, as
sentence-transformers' EmbeddingSimilarityEvaluator); pairs:PATH, pairs with a 0/1 label (average precision, as
its BinaryClassificationEvaluator). TSV, CSV or JSONL with the columns sentence1, sentence2, score or label.

    python evaluate.py --tasks all --json scores.json      # default model: all-MiniLM-L6-v2
    python evaluate.py --model runs/tsdae/model --tasks stsb,sickr          # a training run's OUT/model
    python evaluate.py --model runs/tsdae/model --tasks sts:my_test.tsv,pairs:my_duplicates.csv
    python evaluate.py --model runs/tsdae/model --tasks useb --split valid  # USEB's dev data
    python evaluate.py --fetch-data data                   # the public data sets (lib/download.py)

From Python (e.g. between training steps), any object with
`encode(sentences, batch_size=..., show_progress=...) -> (N, d) tensor` works:

    from evaluate import evaluate
    scores = evaluate(encoder, ["sts12", "stsb"], data_dir)   # {"sts12": 60.1, ..., "details": {...}}
    useb_dev = evaluate(encoder, ["useb-askubuntu"], data_dir, split="valid")["useb-askubuntu"]

The data folder's layout and sources, and the protocol details: docs/evaluation.md. The files: lib/datafiles.py
(readers), lib/taskfiles.py (which task reads what; your own files), lib/useb.py (USEB's), lib/download.py.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy.stats import pearsonr, spearmanr

from lib import cli, download, useb
from lib.align_uniform import POSITIVE_SCORE, alignment_uniformity_of
from lib.embed import encode_unique  # unit vectors, each sentence once
from lib.datafiles import (STS_SUBSETS, STSB_SPLITS, load_askubuntu, load_pit2015, load_rerank_jsonl, load_sick,
                           load_stsb, load_sts_year, load_twitter_url)
from lib.errors import CorpusError, DataFormatError, DataMissingError
from lib.taskfiles import check_own_file, default_data_dir, load_pairs_file, load_sts_file, missing_file, own_file
from lib.weights import default_model_path
from model import Bert, SentenceEncoder
from speedups import fast

# ---------------------------------------------------------------------------
# Embedding and the metrics (encode_unique: lib/embed.py)

def pair_cosines(encoder, pairs: Sequence[tuple], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
    """Cosine similarity of (sentence1, sentence2, ...) pairs: (n,)."""
    n = len(pairs)
    sentences = [p[0] for p in pairs] + [p[1] for p in pairs]
    emb = encode_unique(encoder, sentences, batch_size, show_progress)  # (2n, d), unit rows
    return (emb[:n] * emb[n:]).sum(-1).numpy()  # (n,): the dot of unit vectors is their cosine


def spearman100(gold: Sequence[float], predicted: Sequence[float]) -> float:
    """Spearman's rank correlation x 100 (the number the papers report)."""
    return 100 * float(spearmanr(gold, predicted).correlation)


# Exercise 9 (ASSIGNMENTS.md)
def average_precision(labels: Sequence[int], scores: Sequence[float]) -> float:
    """AP of `scores` for 0/1 `labels`, as scikit-learn's average_precision_score computes it (USEB
    calls that for TwitterPara): walk down the scores; at each distinct score value take the whole
    group of tied pairs at once, and add (share of all positives in the group) x (precision so far)."""
    labels, scores = np.asarray(labels, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    labels, scores = labels[order], scores[order]
    true_pos = np.cumsum(labels)
    ranked = np.arange(1, len(labels) + 1)
    group_end = np.append(scores[1:] != scores[:-1], True)  # last pair of each run of equal scores
    true_pos, ranked = true_pos[group_end], ranked[group_end]
    new_pos = np.diff(true_pos, prepend=0)
    return float(np.sum(new_pos * true_pos / ranked) / true_pos[-1])


# Exercise 9 (ASSIGNMENTS.md)
def query_metrics(relevant: Sequence[bool]) -> dict[str, float]:
    """AP, P@1, P@5 and reciprocal rank of one ranked candidate list (True = a gold positive), each keyed by the
    name of its mean over the queries (mean_metrics): "map" holds this query's AP, "mrr" its reciprocal rank.
    AP = mean over the positives of the precision at that positive's rank (USEB's ap_score)."""
    hits, precisions = 0, []
    for rank, is_pos in enumerate(relevant, start=1):
        if is_pos:
            hits += 1
            precisions.append(hits / rank)
    return {
        "map": sum(precisions) / len(precisions),
        "p@1": sum(relevant[:1]) / 1,
        "p@5": sum(relevant[:5]) / 5,
        "mrr": 1 / (list(relevant).index(True) + 1),
    }


def rerank(candidates: Sequence, scores: Sequence[float]) -> list:
    """Candidates by descending score. Python's sort is stable: tied candidates keep their incoming
    order (for AskUbuntu the BM25 order, as USEB does)."""
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])
    return [candidates[i] for i in order]


def mean_metrics(per_query: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over the queries, x 100."""
    return {name: 100 * float(np.mean([q[name] for q in per_query])) for name in ("map", "p@1", "p@5", "mrr")}


# ---------------------------------------------------------------------------
# Tasks: each returns (main score, details); all numbers x 100

# --- STS: Spearman of the cosine against the gold scores (ConSERT's table) ---------------------------------

def sts_group_scores(encoder, groups: dict[str, list], batch_size: int, show_progress: bool) -> tuple[dict, float]:
    """Spearman of each group of pairs, and over all groups concatenated; one encoding pass for all."""
    pairs = [p for group in groups.values() for p in group]
    cosines = pair_cosines(encoder, pairs, batch_size, show_progress)
    gold = np.array([p[2] for p in pairs])
    scores, start = {}, 0
    for name, group in groups.items():
        end = start + len(group)
        scores[name] = spearman100(gold[start:end], cosines[start:end])
        start = end
    return scores, spearman100(gold, cosines)


def task_sts_year(year: str):
    def run(encoder, data_dir: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
        groups = load_sts_year(data_dir / year, STS_SUBSETS[year])
        per_subset, concatenated = sts_group_scores(encoder, groups, batch_size, show_progress)
        # ConSERT's "all" (§4.1): one Spearman over every subset's pairs concatenated (not a mean of subsets).
        details = {**per_subset, "pairs": sum(len(g) for g in groups.values())}
        return concatenated, details
    return run


def task_stsb(*splits: str):
    """The STS benchmark: Spearman of each split of the original release and of SentEval's tokenized copy
    (senteval/); main score: the original release's first split."""
    def run(encoder, data_dir: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
        groups = {f"{copy}{split}": load_stsb(data_dir / "stsbenchmark" / copy / f"sts-{split}.csv")
                  for copy in ("", "senteval/") for split in splits}
        scores, _ = sts_group_scores(encoder, groups, batch_size, show_progress)
        return scores[splits[0]], scores
    return run


def task_sickr(encoder, data_dir: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    pairs = load_sick(data_dir / "sick" / "SICK_test_annotated.txt")
    score = spearman100([p[2] for p in pairs], pair_cosines(encoder, pairs, batch_size, show_progress))
    return score, {"pairs": len(pairs)}


# --- Ranking (TSDAE's table, the USEB protocol): TwitterPara, AskUbuntu, your own rerank:PATH ------------------

def task_twitterpara(encoder, data_dir: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    url = load_twitter_url(data_dir / "twitterpara" / "Twitter_URL_Corpus_test.txt")
    pit = load_pit2015(data_dir / "twitterpara" / "test.data")
    cosines = pair_cosines(encoder, url + pit, batch_size, show_progress)
    # USEB: average precision of the cosine over each test set's pairs; main score = mean of the two.
    url_ap = 100 * average_precision([p[2] for p in url], cosines[: len(url)])
    pit_ap = 100 * average_precision([p[2] for p in pit], cosines[len(url):])
    details = {"url_ap": url_ap, "pit_ap": pit_ap, "url_pairs": len(url), "pit_pairs": len(pit)}
    return (url_ap + pit_ap) / 2, details


def askubuntu_scores(encoder, folder: Path, splits: Sequence[str] = ("test", "dev"), batch_size: int = 64,
                     show_progress: bool = False, corpus: str = "text_tokenized.txt.gz") -> dict[str, dict[str, float]]:
    """MAP, P@1, P@5, MRR of each split in an AskUbuntu release folder (USEB protocol): embed the TITLES
    of the query and its 20 BM25 candidates, re-rank by cosine (ties keep BM25 order), score the list.
    Only the questions of `splits` are read and encoded; `corpus` names the question file."""
    queries, titles = load_askubuntu(folder, splits, corpus)
    emb = encode_unique(encoder, list(titles.values()), batch_size, show_progress)
    row = {qid: n for n, qid in enumerate(titles)}
    results = {}
    for split, split_queries in queries.items():
        per_query = []
        for qid, positives, candidates in split_queries:
            scores = (emb[[row[c] for c in candidates]] @ emb[row[qid]]).tolist()
            ranked = rerank(candidates, scores)
            per_query.append(query_metrics([c in positives for c in ranked]))
        results[split] = {**mean_metrics(per_query), "queries": len(per_query)}
    return results


def task_askubuntu(encoder, data_dir: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    results = askubuntu_scores(encoder, data_dir / "askubuntu", ("test", "dev"), batch_size, show_progress)
    details = {**results["test"], **{f"dev/{name}": value for name, value in results["dev"].items()}}
    return results["test"]["map"], details


def task_rerank_file(encoder, path: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    """rerank:PATH: MAP (P@1, P@5, MRR in details) of a re-ranking jsonl file (queries without positives skipped).
    Candidates are listed negatives first, so an exact score tie never favours a positive: a collapsed
    encoder that gives every text the same vector gets the worst possible ranking, not the best."""
    queries = [q for q in load_rerank_jsonl(path) if q[1]]
    texts = list(dict.fromkeys(t for query, pos, neg in queries for t in [query, *pos, *neg]))
    emb = encode_unique(encoder, texts, batch_size, show_progress)
    row = {text: n for n, text in enumerate(texts)}
    per_query = []
    for query, positives, negatives in queries:
        candidates = [*negatives, *positives]
        is_positive = [False] * len(negatives) + [True] * len(positives)
        scores = (emb[[row[c] for c in candidates]] @ emb[row[query]]).tolist()
        ranked = rerank(range(len(candidates)), scores)
        per_query.append(query_metrics([is_positive[i] for i in ranked]))
    details = {**mean_metrics(per_query), "queries": len(per_query)}
    return details["map"], details


# --- Your own labelled pairs: sts:PATH and pairs:PATH, scored as sentence-transformers' evaluators score them --------

def task_sts_file(encoder, path: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    """sts:PATH: Spearman x 100 between the cosine of the two sentences' vectors and the gold score (Pearson in
    details), the spearman_cosine and pearson_cosine of sentence-transformers' EmbeddingSimilarityEvaluator (scipy's
    spearmanr and pearsonr of the scores and the cosines). The file, read and checked: lib/taskfiles.py."""
    pairs = load_sts_file(path)
    cosines = pair_cosines(encoder, pairs, batch_size, show_progress)
    gold = [score for _, _, score in pairs]
    details = {"spearman": spearman100(gold, cosines), "pearson": 100 * float(pearsonr(gold, cosines)[0]),
               "pairs": len(pairs)}
    return details["spearman"], details


def task_pairs_file(encoder, path: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    """pairs:PATH: average precision x 100 of the cosine for the 0/1 labels, the cosine_ap of sentence-transformers'
    BinaryClassificationEvaluator (scikit-learn's average_precision_score, which average_precision equals). No
    threshold is chosen: AP scores the ranking of the pairs by cosine."""
    pairs = load_pairs_file(path)
    cosines = pair_cosines(encoder, pairs, batch_size, show_progress)
    labels = [label for _, _, label in pairs]
    details = {"ap": 100 * average_precision(labels, cosines), "pairs": len(pairs), "positives": sum(labels)}
    return details["ap"], details


# ---------------------------------------------------------------------------
# USEB, the TSDAE paper's benchmark (arXiv:2104.06979 §4, tab. 2), scored as the `useb` package scores it
# Its files, their layout and the retrieval: lib/useb.py. As USEB, evaluate() rounds every number: round(x, 2).

def task_useb_askubuntu(encoder, data_dir: Path, batch_size: int, show_progress: bool,
                        split: str = "test") -> tuple[float, dict]:
    """USEB's AskUbuntu: the askubuntu task's metrics on one split of USEB's copy, dev.txt for "valid"."""
    name = {"test": "test", "valid": "dev"}[split]
    scores = askubuntu_scores(encoder, data_dir / useb.USEB_EVAL / "askubuntu", [name], batch_size, show_progress,
                              corpus="text_tokenized.txt")[name]
    return scores["map"], scores


def task_useb_twitterpara(encoder, data_dir: Path, batch_size: int, show_progress: bool,
                          split: str = "test") -> tuple[float, dict]:
    """USEB's TwitterPara: the twitterpara task on USEB's copy. There is no dev set: for "valid" USEB scores the
    test set (with a warning); so does this."""
    if split == "valid" and show_progress:
        print("[evaluate] useb-twitterpara has no dev set: scoring its test set, as USEB does", file=sys.stderr)
    return task_twitterpara(encoder, data_dir / useb.USEB_EVAL, batch_size, show_progress)


def task_useb_cqadupstack(encoder, data_dir: Path, batch_size: int, show_progress: bool,
                          split: str = "test") -> tuple[float, dict]:
    """USEB's CQADupStack: MAP@100 of each forum; main score: their unweighted mean (each forum counts once,
    whatever its size). A query's AP@100: its 100 best pool titles by cosine (lib/useb.py) scored with
    scikit-learn's AP, so recall counts only the duplicates among those 100; 0 when none of them is one."""
    embed = functools.partial(encode_unique, encoder, batch_size=batch_size, show_progress=show_progress)
    folder = data_dir / useb.USEB_EVAL / "cqadupstack"
    maps = {forum: float(np.mean([average_precision(labels, cosines) if any(labels) else 0.0
                                  for labels, cosines in retrieved]))
            for forum, retrieved in useb.cqadupstack_retrieved(embed, folder, split, show_progress)}
    return 100 * float(np.mean(list(maps.values()))), {forum: 100 * value for forum, value in maps.items()}


def task_useb_scidocs(encoder, data_dir: Path, batch_size: int, show_progress: bool,
                      split: str = "test") -> tuple[float, dict]:
    """USEB's SciDocs: MAP of each subset (cite, cocite, coread, coview); main score: their mean. A query's AP:
    trec_eval's, of its title against the titles of the papers judged for it, by cosine (lib/useb.py)."""
    embed = functools.partial(encode_unique, encoder, batch_size=batch_size, show_progress=show_progress)
    aps = useb.scidocs_aps(embed, data_dir / useb.USEB_EVAL / "scidocs" / "data.json", split)
    maps = {subset: float(np.mean(subset_aps)) for subset, subset_aps in aps.items()}
    return 100 * float(np.mean(list(maps.values()))), {subset: 100 * value for subset, value in maps.items()}


# ---------------------------------------------------------------------------
# Alignment and uniformity (Wang & Isola 2020): why a score moves; the formulas are lib/align_uniform.py's

def alignment_uniformity(encoder, pairs: Sequence[tuple], above: float = POSITIVE_SCORE, batch_size: int = 64,
                         show_progress: bool = False) -> dict[str, float | int]:
    """{"alignment", "uniformity", "positive_pairs", "sentences"} of (sentence1, sentence2, gold score) pairs,
    as lib.datafiles.load_stsb gives them: alignment over the pairs scored above `above`, uniformity over every sentence
    of every pair (repeats included; each distinct one encoded once). Lower is better for both."""
    emb = encode_unique(encoder, [s for p in pairs for s in p[:2]], batch_size, show_progress)  # (2 n, d) unit rows
    return alignment_uniformity_of(emb, [p[2] for p in pairs], above)


def task_align_uniform(encoder, data_dir: Path, batch_size: int, show_progress: bool) -> tuple[float, dict]:
    """Main score: uniformity over the whole STS benchmark (the one a collapsed encoder cannot fake: its
    alignment would be a perfect 0); details: alignment and the counts."""
    pairs = [p for split in STSB_SPLITS for p in load_stsb(data_dir / "stsbenchmark" / f"sts-{split}.csv")]
    result = alignment_uniformity(encoder, pairs, batch_size=batch_size, show_progress=show_progress)
    return result["uniformity"], result


# ---------------------------------------------------------------------------
# The tables: every task, the tasks on a file of your own, the groups (the files each task reads: lib/taskfiles.py)

# name -> task function, in the order --help and the errors list them.
TASKS = {
    **{year: task_sts_year(year) for year in STS_SUBSETS},
    "stsb": task_stsb("test", "dev"),
    "stsb-dev": task_stsb("dev"),
    "sickr": task_sickr,
    "twitterpara": task_twitterpara,
    "askubuntu": task_askubuntu,
    "useb-askubuntu": task_useb_askubuntu,
    "useb-cqadupstack": task_useb_cqadupstack,
    "useb-twitterpara": task_useb_twitterpara,
    "useb-scidocs": task_useb_scidocs,
    "align-uniform": task_align_uniform,
}

# The tasks on a file of your own, KIND:PATH -> task function(encoder, PATH, batch_size, show_progress).
OWN_FILE_TASKS = {"rerank": task_rerank_file, "sts": task_sts_file, "pairs": task_pairs_file}

# The groups. `--tasks all`, in table order: ConSERT's seven STS columns, then TSDAE's ranking tasks.
ALL_TASKS = ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "twitterpara", "askubuntu"]
AVG7_TASKS = ALL_TASKS[:7]
# `--tasks useb`, in order: USEB's four (arXiv:2104.06979 tab. 2), and their mean useb-avg.
USEB_TASKS = ["useb-askubuntu", "useb-cqadupstack", "useb-twitterpara", "useb-scidocs"]


# ---------------------------------------------------------------------------
# The entry point from Python: evaluate (the training scripts' dev score: experiment.dev_score)

def parse_tasks(tasks: str | Sequence[str]) -> list[str]:
    """'stsb,sickr' or ['stsb', 'sickr'] -> list of names; raises ValueError on an unknown one."""
    names = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks) if t.strip()]
    for name in names:
        if name not in ("all", "useb") and name not in TASKS and own_file(name) is None:
            raise ValueError(f"unknown task {name!r}; choose from all, useb, {', '.join(TASKS)}, rerank:PATH, "
                             "sts:PATH, pairs:PATH")
        if own_file(name) is not None and not name.partition(":")[2]:
            raise ValueError(f"task {name!r} names no file: write {name}PATH")
    return names


def evaluate(encoder, tasks: str | Sequence[str], data_dir: str | Path | None = None, batch_size: int = 64,
             show_progress: bool = False, split: str = "test") -> dict:
    """Run the tasks; returns {task: score x 100, ..., "avg7": ... (when all seven STS ran), "useb-avg": ...
    (when the four useb tasks ran), "details": {task: {...}}, "skipped": {task: reason}}. "all" runs ALL_TASKS
    whose data is present (the seven STS tests, twitterpara, askubuntu); "useb" the four useb tasks. A task named
    explicitly whose data is missing raises DataMissingError before anything is encoded. `split` ("test" or "valid",
    USEB's dev data, for model selection) is what the useb tasks score; the other tasks ignore it (each reports its test
    score, with dev in details where it has one)."""
    if split not in useb.USEB_SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(useb.USEB_SPLITS)}")
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    names, skipped = [], {}
    for name in parse_tasks(tasks):
        for task in ALL_TASKS if name == "all" else USEB_TASKS if name == "useb" else [name]:
            problem = missing_file(task, data_dir)
            if problem and name == "all":
                skipped[task] = problem
            elif problem:
                raise DataMissingError(problem)
            elif task not in names:
                names.append(task)

    result, details = {}, {}
    for task in names:
        if show_progress:
            print(f"[evaluate] {task}", file=sys.stderr, flush=True)
        if task in USEB_TASKS:  # as USEB: the split asked for, and every number round(x, 2)
            score, found = TASKS[task](encoder, data_dir, batch_size, show_progress, split=split)
            result[task] = round(score, 2)
            details[task] = {name: round(v, 2) if isinstance(v, float) else v for name, v in found.items()}
        elif own_file(task) is not None:
            run = OWN_FILE_TASKS[task.partition(":")[0]]
            result[task], details[task] = run(encoder, own_file(task), batch_size, show_progress)
        else:
            result[task], details[task] = TASKS[task](encoder, data_dir, batch_size, show_progress)
    if all(task in result for task in AVG7_TASKS):
        result["avg7"] = float(np.mean([result[task] for task in AVG7_TASKS]))  # ConSERT: unweighted mean of 7
    if all(task in result for task in USEB_TASKS):  # useb.run's "avg": the mean of the four ROUNDED scores
        result["useb-avg"] = sum(result[task] for task in USEB_TASKS) / len(USEB_TASKS)
    return {**result, "details": details, "skipped": skipped}


# ---------------------------------------------------------------------------
# The command line: python evaluate.py

def format_table(result: dict) -> str:
    """The scores as a text table; details indented under each task."""
    lines = [f"{'task':<24}{'score':>8}"]
    for task, score in result.items():
        if task in ("details", "skipped"):
            continue
        lines.append(f"{task:<24}{score:>8.2f}")
        for name, value in result["details"].get(task, {}).items():
            shown = f"{value:>8d}" if isinstance(value, int) else f"{value:>8.2f}"
            lines.append(f"  {name:<22}{shown}")
    for task, reason in result.get("skipped", {}).items():
        lines.append(f"skipped {task}: {reason}")
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(description="Score a sentence-embedding model on the papers' STS and "
                                            "ranking tasks.", formatter_class=cli.HelpFormatter)
    parser.add_argument("--model", help="model folder or Hub id (default: the shipped all-MiniLM-L6-v2)")
    parser.add_argument("--tasks", default="all",
                        help=f"comma-separated: all, useb, {', '.join(TASKS)}, rerank:PATH, sts:PATH, pairs:PATH. "
                             f"all: {', '.join(ALL_TASKS)} (those whose data is present); useb: the four useb-* "
                             "tasks and their mean useb-avg, scored as the useb package does on its data-eval (an "
                             "hour or more on a CPU). askubuntu and twitterpara: the same metrics on the separately "
                             "fetched releases, not rounded. Your own files (this file's docstring): rerank:PATH, a "
                             "re-ranking jsonl; sts:PATH and pairs:PATH, TSV, CSV or JSONL with the columns "
                             "sentence1, sentence2, score or label")
    parser.add_argument("--split", default="test", choices=useb.USEB_SPLITS,
                        help="the split the useb tasks score: test, or valid (USEB's dev data, for model selection; "
                             "TwitterPara has none and scores test, as USEB does). The other tasks ignore it")
    parser.add_argument("--data-dir", help="evaluation data (default: $EVAL_DATA_DIR, else data/ here)")
    parser.add_argument("--pooling", choices=["cls", "mean", "max", "last2-mean"],
                        help="default: the model folder's own; last2-mean = the average of the mean-pooled last two "
                             "layers, ConSERT's official evaluation")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per encoder pass")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when available, else CPU), cpu, cuda, cuda:1, ...")
    parser.add_argument("--plain", action="store_true",
                        help="encode with the plain model.py code instead of speedups/fast.py's")
    parser.add_argument("--json", help="also write the scores and details to this JSON file")
    fetching = parser.add_argument_group("getting the data (lib/download.py)")
    fetching.add_argument("--fetch-data", metavar="DIR", type=Path,
                          help="download the public evaluation sets into DIR (SHA256-checked), then stop")
    fetching.add_argument("--sets", help=f"with --fetch-data: comma-separated, of {', '.join(download.SETS)} (default: "
                                         "all but useb, USEB's data-eval.zip and data-train.zip, several hundred MB)")
    fetching.add_argument("--mirror", metavar="URL",
                          help="with --fetch-data: read every file from URL/<its place in the layout> instead "
                               "(a local copy: file:///path/to/data)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """python evaluate.py: the table on stdout (and --json). A bad argument exits as argparse does (code 2);
    any other mistake raises a one-line UsageError (DataMissingError and CorpusError are ones) or ModelLoadError,
    which cli.run prints as "error: ..." (code 1)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.fetch_data:  # a failed download: a one-line DownloadError
        download.fetch(args.fetch_data, args.sets.split(",") if args.sets else None, args.mirror)
        return 0
    try:
        tasks = parse_tasks(args.tasks)
    except ValueError as err:
        parser.error(str(err))
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1 (got {args.batch_size})")
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    if problem := next(filter(None, (missing_file(t, data_dir) for t in tasks if t != "all")), None):
        raise DataMissingError(problem)  # before the model is loaded
    for task in tasks:
        check_own_file(task)  # a malformed file of yours: one line (CorpusError), before the model is loaded
    device = cli.device(args.device)  # cli.UsageError: a device this machine does not have
    model_dir = args.model or default_model_path()
    bert_class = Bert if args.plain else fast.PackedBert
    encoder = SentenceEncoder.from_pretrained(model_dir, pooling=args.pooling,
                                              bert_class=bert_class).to(device)  # or ModelLoadError
    try:
        result = evaluate(encoder, tasks, data_dir, args.batch_size, show_progress=True, split=args.split)
    except DataFormatError as err:  # a malformed data file: one line, as a bad corpus
        raise CorpusError(str(err)) from None
    print(format_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            meta = {"model": str(model_dir), "pooling": encoder.pooling, "data_dir": str(data_dir), "split": args.split}
            json.dump({**meta, **result}, f, indent=2)
    return 0


if __name__ == "__main__":
    cli.run(main)
