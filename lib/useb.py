"""USEB, the TSDAE paper's benchmark (arXiv:2104.06979 §4, tab. 2): its files and its retrieval protocol, as the
`useb` package computes them (tests/test_useb.py compares to the digit). evaluate.py scores the useb-* tasks
with these pieces and its own metrics: `embed` below is any function from texts to unit rows, one per text
(evaluate.encode_unique with the encoder).

USEB's data-eval.zip unpacked under DATA/useb/ (python evaluate.py --fetch-data DATA --sets useb), the files its
evaluators read:
  useb/data-eval/askubuntu/    text_tokenized.txt, dev.txt, test.txt   (the taolei87 release, corpus un-gzipped)
  useb/data-eval/cqadupstack/  corpus.json {forum: {id: title}}, retrieval_split.json {split: {forum: {id: [ids]}}}
  useb/data-eval/twitterpara/  Twitter_URL_Corpus_test.txt, test.data, test.label (test only: no dev set)
  useb/data-eval/scidocs/      data.json {"corpus": {id: {"title": ...}}, split: {subset: {id: {id: relevance}}}}
As USEB: every text is stripped before it is encoded, every number is round(100 x value, 2), the split is "test"
or "valid" (the dev data), and useb-avg is the plain mean of the four rounded scores (useb.run's "avg").
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import torch
from tqdm.auto import tqdm

from lib.datafiles import load_json, want

USEB_EVAL = "useb/data-eval"  # relative to the data folder
USEB_SPLITS = ("test", "valid")
CQADUPSTACK_TOP = 100    # USEB's MAP@100: the AP of the 100 best titles of the pool
CQADUPSTACK_CHUNK = 256  # queries scored at once: no score matrix is larger than (CHUNK, pool)

Embed = Callable[[list[str]], torch.Tensor]  # texts -> (N, d) unit rows, one per text


# ----------------------------------------------------------------------------
# CQADupStack: retrieval from each forum's pool


def load_cqadupstack(folder: Path, split: str) -> dict[str, tuple[dict[str, str], dict[str, list[str]]]]:
    """{forum: (its titles {id: title}, the split's queries {query id: [duplicate ids]})}, forums in the order
    of corpus.json (USEB's order)."""
    corpus_path, split_path = folder / "corpus.json", folder / "retrieval_split.json"
    corpus, queries = load_json(corpus_path), load_json(split_path)
    want(isinstance(corpus, dict) and corpus, corpus_path, "top level", "{forum: {id: title}}")
    want(isinstance(queries, dict) and isinstance(queries.get(split), dict), split_path, "top level",
         f'{{"{split}": {{forum: {{query id: [duplicate ids]}}}}}}')
    forums = {}
    for forum, titles in corpus.items():
        want(isinstance(titles, dict) and all(isinstance(t, str) for t in titles.values()), corpus_path, forum,
             "{id: title} with string titles")
        split_queries = queries[split].get(forum)
        want(isinstance(split_queries, dict) and split_queries, split_path, f"{split}/{forum}",
             "{query id: [duplicate ids]} with at least one query")
        for qid, duplicates in split_queries.items():
            want(qid in titles, split_path, f"{split}/{forum}/{qid}", "a query id of corpus.json")
            want(isinstance(duplicates, list), split_path, f"{split}/{forum}/{qid}", "a list of duplicate ids")
        forums[forum] = (titles, split_queries)
    return forums


def top_k_by_cosine(queries: torch.Tensor, pool: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best pool rows for each query: their cosines and row numbers, both (Q, k), best first. Rows are
    unit vectors. A tie at the k-th place is broken the way torch.topk breaks it, as USEB (which calls it too)."""
    scores = queries @ pool.T  # (Q, P) cosines: the only (queries x pool) matrix, Q <= CQADUPSTACK_CHUNK
    return scores.topk(k, dim=-1)  # (Q, k) values, (Q, k) row numbers


def top_100(query_emb: torch.Tensor, pool: torch.Tensor, pool_ids: list[str], queries: dict[str, list[str]],
            forum: str = "", show_progress: bool = False) -> Iterator[tuple[list[int], list[float]]]:
    """CQADupStack's retrieval for each query of one forum, in the order of `queries`: (labels, cosines) of its
    CQADUPSTACK_TOP best pool titles, best first, label 1 for a duplicate of the query. query_emb (Q, d) and
    pool (P, d) are unit rows; the pool is the forum's titles less ALL of the split's queries (a query never
    finds itself), in the corpus order, which decides ties at the 100th place."""
    pool_row = {doc: n for n, doc in enumerate(pool_ids)}
    k = min(CQADUPSTACK_TOP, len(pool_ids))  # USEB fails on a pool smaller than 100; here it takes the pool
    qids = list(queries)
    starts = range(0, len(qids), CQADUPSTACK_CHUNK)
    for start in tqdm(starts, desc=f"cqadupstack/{forum}", unit="chunk", disable=None if show_progress else True):
        top_scores, top_rows = top_k_by_cosine(query_emb[start:start + CQADUPSTACK_CHUNK], pool, k)  # (C, k) each
        for qid, scores, rows in zip(qids[start:start + CQADUPSTACK_CHUNK], top_scores.tolist(), top_rows.tolist()):
            duplicates = {pool_row[doc] for doc in queries[qid] if doc in pool_row}
            yield [int(row in duplicates) for row in rows], scores


def cqadupstack_retrieved(embed: Embed, folder: Path, split: str, show_progress: bool = False
                          ) -> Iterator[tuple[str, Iterator[tuple[list[int], list[float]]]]]:
    """For each forum, in the order of corpus.json (USEB's): (forum, top_100's (labels, cosines) of each of its
    queries). The forum's titles are embedded stripped, the pool's then the queries'. Every forum is read and
    checked before the first is embedded."""
    for forum, (titles, queries) in load_cqadupstack(folder, split).items():
        pool_ids = [i for i in titles if i not in queries]  # the corpus order: it decides ties at the 100th place
        emb = embed([titles[i].strip() for i in [*pool_ids, *queries]])  # (P + Q, d) unit rows
        yield forum, top_100(emb[len(pool_ids):], emb[: len(pool_ids)], pool_ids, queries, forum, show_progress)


# ----------------------------------------------------------------------------
# SciDocs: re-ranking each query's judged papers, trec_eval's MAP


def trec_eval_ap(judged: dict[str, int], run: dict[str, float]) -> float:
    """Average precision of one query as trec_eval's `map` computes it (USEB calls it through pytrec_eval).
    `judged`: {doc id: relevance}, relevant = relevance >= 1; `run`: {doc id: score}. trec_eval ranks by score,
    highest first, and breaks a tie by the doc id, the LARGER string first (strcmp; "9" before "10").
    AP = (sum of the precision at the rank of each relevant doc retrieved) / (relevant docs judged, retrieved
    or not); 0 when the query has no relevant doc."""
    relevant = sum(1 for relevance in judged.values() if relevance >= 1)
    ranked = sorted(run, key=lambda doc: (run[doc], doc), reverse=True)  # score, then id, both descending
    hits, total = 0, 0.0
    for rank, doc in enumerate(ranked, 1):
        if judged.get(doc, 0) >= 1:
            hits += 1
            total += hits / rank
    return total / relevant if relevant else 0.0


def load_scidocs(path: Path, split: str) -> tuple[dict[str, str], dict[str, dict[str, dict[str, int]]]]:
    """data.json -> ({paper id: title} for the papers that have a title, {subset: {query id: {doc id: relevance}}}).
    As USEB: a paper missing from the corpus, or whose title is null or empty, has no title."""
    data = load_json(path)
    want(isinstance(data, dict) and isinstance(data.get("corpus"), dict), path, "top level",
         '{"corpus": {id: {"title": ...}}, "valid": ..., "test": ...}')
    want(isinstance(data.get(split), dict) and data[split], path, split, "{subset: {query id: {doc id: relevance}}}")
    titles = {}
    for pid, paper in data["corpus"].items():
        want(isinstance(paper, dict), path, f"corpus/{pid}", '{"title": ...}')
        title = paper.get("title")
        want(title is None or isinstance(title, str), path, f"corpus/{pid}/title", "a string or null")
        if title:
            titles[pid] = title
    for subset, qrel in data[split].items():
        want(isinstance(qrel, dict) and all(isinstance(judged, dict) and
                                            all(isinstance(r, int) for r in judged.values())
                                            for judged in qrel.values()),
             path, f"{split}/{subset}", "{query id: {doc id: integer relevance}}")
    return titles, data[split]


def scidocs_aps(embed: Embed, path: Path, split: str) -> dict[str, list[float]]:
    """{subset: trec_eval's AP of each of its queries that has a title (USEB skips the others)}: the query's title
    compared by cosine with the titles of the papers judged for it. A judged paper without a title is left out of
    the run, but a relevant one still counts in the AP's denominator. Only the titles the split scores are embedded."""
    titles, qrels = load_scidocs(path, split)
    qrels = {subset: {qid: judged for qid, judged in qrel.items() if qid in titles} for subset, qrel in qrels.items()}
    for subset, qrel in qrels.items():
        want(bool(qrel), path, f"{split}/{subset}", "at least one query with a title")
    needed = {pid for qrel in qrels.values() for qid, judged in qrel.items() for pid in [qid, *judged] if pid in titles}
    texts = list(dict.fromkeys(titles[pid].strip() for pid in titles if pid in needed))  # the corpus order
    emb = embed(texts)  # (T, d) unit rows
    row = {text: n for n, text in enumerate(texts)}
    aps = {}
    for subset, qrel in qrels.items():
        aps[subset] = []
        for qid, judged in qrel.items():
            docs = [doc for doc in judged if doc in titles]
            cosines = (emb[[row[titles[d].strip()] for d in docs]] @ emb[row[titles[qid].strip()]]).tolist()  # (D,)
            aps[subset].append(trec_eval_ap(judged, dict(zip(docs, cosines))))  # no doc with a title: AP 0
    return aps
