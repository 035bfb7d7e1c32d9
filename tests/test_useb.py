"""USEB (evaluate.py's useb-* tasks) against the `useb` package itself, the oracle: a small copy of USEB's
data-eval layout made here by hand (ties, a query without a duplicate, missing titles, several forums, both
splits), the same deterministic fake embeddings fed to both, and every score and detail compared."""
import functools
import json
import shlex
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import evaluate as ev
from commands import experiment
from test_evaluate import HashEncoder  # a fixed pseudo-random 8-d vector per text
from test_evaluate import cli_error  # python evaluate.py ARGV's one-line error, as cli.run gives it
from lib import useb as useb_files
from lib.datafiles import load_askubuntu_titles
from lib.taskfiles import missing_file

ROOT = Path(__file__).resolve().parent.parent
SPLITS = ["valid", "test"]


class GridEncoder(HashEncoder):
    """Exact ties on purpose: each text gets 4 entries +-1 and 4 zeros out of 8 (picked by its hash). The norm is
    exactly 2, so every cosine is a multiple of 1/4 and comes out bit for bit the same whatever the order of
    the sums: ties everywhere, and the same ties in the oracle's arithmetic as in ours."""

    def encode(self, sentences, batch_size=64, show_progress=False):
        self.encoded.extend(sentences)
        rows = []
        for s in sentences:
            rng = np.random.default_rng(zlib.crc32(s.encode()))
            row = np.zeros(8)
            row[rng.choice(8, size=4, replace=False)] = rng.choice([-1.0, 1.0], size=4)
            rows.append(row)
        return torch.tensor(np.array(rows), dtype=torch.float32)


ENCODERS = {"grid": GridEncoder, "hash": HashEncoder}

WORDS = ("ubuntu wifi driver boot grub kernel install update screen sound usb mount disk network login "
         "password terminal package error python latex plot matrix graph server cache").split()


def title(rng: np.random.Generator, words: int = 3) -> str:
    return " ".join(rng.choice(WORDS, size=words))


# ---------------------------------------------------------------------------
# A hand-made data-eval folder, in USEB's layout and formats
# ---------------------------------------------------------------------------

def write_askubuntu(folder: Path, rng: np.random.Generator) -> None:
    """text_tokenized.txt (id TAB title TAB body), dev.txt / test.txt (id, similar, 20 candidates, BM25 scores)."""
    folder.mkdir(parents=True)
    ids = [str(1000 + i) for i in range(90)]
    titles = {i: title(rng, 2) for i in ids}  # 2 words of 25: many questions share a title
    titles["1003"] = ""  # a question without a title (the format allows an empty field)
    titles["1004"] = "  grub   boot  "  # surrounding spaces: stripped
    lines = [f"{i}\t{t}\tbody of {i} that nobody encodes" for i, t in titles.items()]
    (folder / "text_tokenized.txt").write_text("\n".join(lines) + "\n")
    for name, queries in [("dev", ids[:12]), ("test", ids[12:30])]:
        rows = []
        for n, qid in enumerate(queries):
            candidates = list(rng.choice([i for i in ids if i != qid], size=20, replace=False))
            candidates[:2] = ["1003", "1004"] if n % 3 == 0 else candidates[:2]
            candidates = list(dict.fromkeys(candidates))
            similar = [] if n == 1 else list(rng.choice(candidates, size=int(rng.integers(1, 4)), replace=False))
            bm25 = rng.integers(1, 6, size=len(candidates))  # unsorted, with ties: the stable BM25 order matters
            rows.append(f"{qid}\t{' '.join(similar)}\t{' '.join(candidates)}\t{' '.join(f'{b:.1f}' for b in bm25)}")
        (folder / f"{name}.txt").write_text("\n".join(rows) + "\n")


FORUMS = {"android": 130, "gis": 170, "tex": 240}  # titles per forum: every pool holds more than 100


def write_cqadupstack(folder: Path, rng: np.random.Generator) -> None:
    """corpus.json {forum: {id: title}} and retrieval_split.json {split: {forum: {query id: [duplicate ids]}}}."""
    folder.mkdir(parents=True)
    corpus, split = {}, {"valid": {}, "test": {}}
    for forum, size in FORUMS.items():
        ids = [f"{forum[0]}{i}" for i in range(size)]
        titles = {i: title(rng) for i in ids}
        titles[ids[5]] = titles[ids[6]] = titles[ids[7]] = "usb mount error"  # identical titles: exact ties
        titles[ids[8]] = ""  # an empty title
        titles[ids[9]] = "   sound driver   "
        corpus[forum] = titles
        order = list(rng.permutation(ids))
        for name, queries in [("valid", order[:7]), ("test", order[7:19])]:
            split[name][forum] = {}
            for n, qid in enumerate(queries):
                # duplicates: some other queries of the split (never in the pool), an id the corpus lacks
                duplicates = list(rng.choice(ids, size=int(rng.integers(1, 5)), replace=False))
                duplicates += [queries[n - 1]] if n % 4 == 0 else []
                duplicates += ["not-in-the-corpus"] if n % 5 == 0 else []
                split[name][forum][qid] = [d for d in duplicates if d != qid]
    (folder / "corpus.json").write_text(json.dumps(corpus))
    (folder / "retrieval_split.json").write_text(json.dumps(split))


def write_twitterpara(folder: Path, rng: np.random.Generator) -> None:
    """Twitter_URL_Corpus_test.txt (s1 TAB s2 TAB (n,6) TAB url), PIT-2015 test.data and test.label."""
    folder.mkdir(parents=True)
    url = [f"{title(rng, 2)}\t {title(rng, 2)} \t({int(rng.integers(0, 7))},6)\thttp://t.co/{i}" for i in range(80)]
    url[3] = "same words here\tsame words here\t(5,6)\thttp://t.co/x"
    (folder / "Twitter_URL_Corpus_test.txt").write_text("\n".join(url) + "\n")
    scores = rng.integers(0, 6, size=60)
    pit = [f"{i}\ttopic {i}\t{title(rng, 2)}\t{title(rng, 2)}\t{s}\tx\ty" for i, s in enumerate(scores)]
    (folder / "test.data").write_text("\n".join(pit) + "\n")
    labels = ["true" if s > 3 else "false" if s < 3 else "----" for s in scores]
    (folder / "test.label").write_text("\n".join(f"{label}\t0.{s}" for label, s in zip(labels, scores)) + "\n")


SUBSETS = ["cite", "cocite", "coread", "coview"]


def write_scidocs(folder: Path, rng: np.random.Generator) -> None:
    """data.json: {"corpus": {id: {"title", "abstract"}}, "valid"/"test": {subset: {query: {doc: relevance}}}}."""
    folder.mkdir(parents=True)
    ids = [str(i) for i in range(1, 120)]  # "9" and "10": trec_eval breaks ties by the id as a STRING
    corpus = {i: {"title": title(rng), "abstract": f"abstract {i}"} for i in ids}
    corpus["5"]["title"] = None  # JSON null: no title
    corpus["6"]["title"] = ""  # empty: no title either
    corpus["7"]["title"] = "   "  # blank but not empty: USEB keeps it, and encodes ""
    del corpus["8"]  # judged, but not in the corpus
    data = {"corpus": corpus}
    for name in SPLITS:
        data[name] = {}
        for subset in SUBSETS:
            qrel = {}
            for qid in rng.choice(ids[10:], size=8, replace=False):
                docs = [d for d in rng.choice(ids, size=12, replace=False) if d != qid]
                qrel[qid] = {d: int(k < 4) for k, d in enumerate(docs)}  # 4 relevant, the rest not
            qrel["5"] = {"11": 1, "12": 0}  # the query has no title: not scored, not counted
            qrel["8"] = {"11": 1, "12": 0}  # the query is not in the corpus: the same
            qrel["9"] = {"5": 1, "6": 0, "8": 1}  # no judged paper has a title: an empty run, AP 0
            qrel["20"] = {"9": 1, "10": 1, "7": 1, "6": 1, "30": 0, "31": 2}  # relevant but untitled 6 counts
            qrel["21"] = {"22": 0, "23": 0}  # nothing relevant: AP 0
            data[name][subset] = qrel
    (folder / "data.json").write_text(json.dumps(data))


@pytest.fixture(scope="module")
def useb_data(tmp_path_factory) -> Path:
    """A data folder holding useb/data-eval/ with all four data sets."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    eval_dir = root / "useb" / "data-eval"
    write_askubuntu(eval_dir / "askubuntu", rng)
    write_cqadupstack(eval_dir / "cqadupstack", rng)
    write_twitterpara(eval_dir / "twitterpara", rng)
    write_scidocs(eval_dir / "scidocs", rng)
    return root


def oracle(name: str, encoder, split: str, data_dir: Path) -> dict:
    """useb.run_on with the same embeddings (the package logs and draws progress bars)."""
    import useb

    return useb.run_on(name, lambda texts: encoder.encode(texts), split, str(data_dir / useb_files.USEB_EVAL))


def unrounded(name: str, encoder, split: str, data_dir: Path) -> dict:
    """The oracle's numbers before its round(100 x value, 2)."""
    import useb

    evaluator = useb.evaluator_map[name](lambda texts: encoder.encode(texts),
                                         str(data_dir / useb_files.USEB_EVAL / name))
    evaluator.show = False
    return evaluator._run(split)


# ---------------------------------------------------------------------------
# Each task against the oracle, both splits, both encoders
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("split", SPLITS)
def test_askubuntu_equals_useb(useb_data, split, kind):
    result = ev.evaluate(ENCODERS[kind](), ["useb-askubuntu"], useb_data, split=split)
    theirs = oracle("askubuntu", ENCODERS[kind](), split, useb_data)
    ours = result["details"]["useb-askubuntu"]
    assert result["useb-askubuntu"] == theirs["map_askubuntu_title"]
    assert {m: ours[m] for m in ["map", "p@1", "p@5", "mrr"]} == {m: theirs[f"{m}_askubuntu_title"]
                                                                  for m in ["map", "p@1", "p@5", "mrr"]}
    assert ours["queries"] == (11 if split == "valid" else 17)  # the query without a similar question is left out
    folder = useb_data / useb_files.USEB_EVAL / "askubuntu"
    name = "dev" if split == "valid" else "test"
    exact = ev.askubuntu_scores(ENCODERS[kind](), folder, [name], corpus="text_tokenized.txt")[name]
    assert exact["map"] == pytest.approx(100 * unrounded("askubuntu", ENCODERS[kind](), split, useb_data)[
        "map_askubuntu_title"], abs=1e-9)


@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("split", SPLITS)
def test_cqadupstack_equals_useb(useb_data, split, kind):
    result = ev.evaluate(ENCODERS[kind](), ["useb-cqadupstack"], useb_data, split=split)
    theirs = oracle("cqadupstack", ENCODERS[kind](), split, useb_data)
    assert result["useb-cqadupstack"] == theirs["map@100_cqadupstack_avg"]
    assert result["details"]["useb-cqadupstack"] == {f: theirs[f"map@100_cqadupstack_{f}"] for f in FORUMS}
    exact_avg, exact = ev.task_useb_cqadupstack(ENCODERS[kind](), useb_data, 64, False, split)  # before rounding
    before_rounding = unrounded("cqadupstack", ENCODERS[kind](), split, useb_data)
    for forum, value in [*exact.items(), ("avg", exact_avg)]:
        assert value == pytest.approx(100 * before_rounding[f"map@100_cqadupstack_{forum}"], abs=1e-10)


@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("split", SPLITS)
def test_twitterpara_equals_useb(useb_data, split, kind):
    result = ev.evaluate(ENCODERS[kind](), ["useb-twitterpara"], useb_data, split=split)
    theirs = oracle("twitterpara", ENCODERS[kind](), split, useb_data)  # "valid": USEB scores the test set
    details = result["details"]["useb-twitterpara"]
    assert result["useb-twitterpara"] == theirs["ap_twitter_avg"]
    assert (details["url_ap"], details["pit_ap"]) == (theirs["ap_twitter_twitterurl"], theirs["ap_twitter_pit"])
    assert details["url_pairs"] + details["pit_pairs"] < 140  # votes 3/6 and expert score 3 were dropped


@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("split", SPLITS)
def test_scidocs_equals_useb(useb_data, split, kind):
    result = ev.evaluate(ENCODERS[kind](), ["useb-scidocs"], useb_data, split=split)
    theirs = oracle("scidocs", ENCODERS[kind](), split, useb_data)
    assert result["useb-scidocs"] == theirs["map_scidocs_cosine_avg"]
    assert result["details"]["useb-scidocs"] == {s: theirs[f"map_scidocs_{s}_cosine"] for s in SUBSETS}
    _, exact = ev.task_useb_scidocs(ENCODERS[kind](), useb_data, 64, False, split)  # before rounding
    before_rounding = unrounded("scidocs", ENCODERS[kind](), split, useb_data)
    assert list(exact) == SUBSETS
    for subset in SUBSETS:
        assert exact[subset] == pytest.approx(100 * before_rounding[f"map_scidocs_{subset}_cosine"], abs=1e-10)


@pytest.mark.parametrize("split", SPLITS)
def test_the_useb_group_and_its_average_equal_useb_run(useb_data, split, tmp_path, monkeypatch):
    import useb

    monkeypatch.chdir(tmp_path)  # useb.run writes its results files into the working folder
    semb = GridEncoder()
    _, theirs = useb.run(*[lambda texts: semb.encode(texts)] * 4, eval_type=split,
                         data_eval_path=str(useb_data / useb_files.USEB_EVAL))
    result = ev.evaluate(GridEncoder(), "useb", useb_data, split=split)
    assert [result[t] for t in ev.USEB_TASKS] == [theirs[n] for n in ["askubuntu", "cqadupstack", "twitterpara",
                                                                        "scidocs"]]
    assert result["useb-avg"] == theirs["avg"]  # the mean of the rounded four, itself not rounded
    assert set(result["details"]) == set(ev.USEB_TASKS) and result["skipped"] == {}


# ---------------------------------------------------------------------------
# The test data really holds the ties the tie rules decide
# ---------------------------------------------------------------------------

def test_the_data_has_ties_at_the_100th_place_with_a_duplicate_among_them(useb_data):
    """With the grid vectors many titles tie at the 100th place, some kept and some not, a duplicate among them:
    WHICH tied titles torch.topk keeps changes that query's AP, so the oracle tests above check that our
    chunked top-100 keeps the same ones as USEB's single call on the whole matrix."""
    forums = useb_files.load_cqadupstack(useb_data / useb_files.USEB_EVAL / "cqadupstack", "test")
    deciding = 0
    for forum, (titles, queries) in forums.items():
        pool_ids = [i for i in titles if i not in queries]
        emb = ev.encode_unique(GridEncoder(), [titles[i].strip() for i in pool_ids + list(queries)])
        pool = emb[: len(pool_ids)]
        for qid, q in zip(queries, emb[len(pool_ids):]):
            scores = pool @ q  # (P,)
            cut = scores.topk(100).values[-1]
            tied = {pool_ids[n] for n in torch.nonzero(scores == cut).flatten().tolist()}
            straddles = int((scores > cut).sum()) < 100 < int((scores >= cut).sum())
            deciding += straddles and bool(tied & set(queries[qid]))
    assert deciding >= 3


def test_askubuntu_ties_keep_the_bm25_order(tmp_path):
    """A hand case: the five candidates all tie (one title), so the BM25 order decides; BM25 itself ties
    between 12 and 11 (scores 5 5), whose file order stands."""
    folder = tmp_path / "useb" / "data-eval" / "askubuntu"
    folder.mkdir(parents=True)
    (folder / "text_tokenized.txt").write_text("1\tq\tb\n" + "".join(f"{i}\tsame\tb\n" for i in range(11, 16)))
    (folder / "dev.txt").write_text("1\t11\t12 11 13 14 15\t5 5 9 1 0.5\n")
    (folder / "test.txt").write_text("1\t13\t12 11 13 14 15\t5 5 9 1 0.5\n")
    # BM25 order 13 12 11 14 15; all cosines tie: dev's similar 11 is 3rd (AP 1/3), test's 13 is 1st (AP 1)
    for split, expected in [("valid", 33.33), ("test", 100.0)]:
        assert ev.evaluate(GridEncoder(), ["useb-askubuntu"], tmp_path, split=split)["useb-askubuntu"] == expected
        assert oracle("askubuntu", GridEncoder(), split, tmp_path)["map_askubuntu_title"] == expected


def test_trec_eval_ap_by_hand_and_against_pytrec_eval():
    import pytrec_eval

    judged = {"9": 1, "10": 1, "a": 0, "b": 1, "c": 2, "d": -1, "never-retrieved": 1}
    run = {"9": 0.5, "10": 0.5, "a": 0.5, "b": 0.9, "c": 0.1, "d": 0.7}
    # ranked: b+ (0.9), d (0.7), then the 0.5 tie by id descending as strings: a, 9+, 10+, then c+ (0.1)
    # precisions at the relevant: 1/1, 2/4, 3/5, 4/6; 5 relevant judged (never-retrieved counts)
    assert useb_files.trec_eval_ap(judged, run) == pytest.approx((1 + 2 / 4 + 3 / 5 + 4 / 6) / 5, abs=1e-15)
    assert useb_files.trec_eval_ap({"x": 0}, {"x": 1.0}) == 0.0 and useb_files.trec_eval_ap({"x": 1}, {}) == 0.0
    rng = np.random.default_rng(0)
    for case in range(200):
        docs = [str(i) for i in rng.choice(40, size=15, replace=False)]
        judged = {d: int(rng.integers(-1, 3)) for d in docs}
        run = {d: float(rng.integers(0, 4)) / 4 for d in docs if rng.random() < 0.8}  # many ties
        expected = pytrec_eval.RelevanceEvaluator({"q": judged}, {"map"}).evaluate({"q": run})["q"]["map"]
        assert useb_files.trec_eval_ap(judged, run) == pytest.approx(expected, abs=1e-12), case


# ---------------------------------------------------------------------------
# Scale: CQADupStack in chunks of queries
# ---------------------------------------------------------------------------

def test_cqadupstack_chunks_bound_the_score_matrix_and_change_nothing(useb_data, monkeypatch):
    folder = useb_data / useb_files.USEB_EVAL / "cqadupstack"
    monkeypatch.setattr(useb_files, "CQADUPSTACK_CHUNK", 10 ** 9)  # one matrix per forum: the unchunked computation
    whole = ev.task_useb_cqadupstack(GridEncoder(), useb_data, 64, False, "test")

    shapes = []
    top_k = useb_files.top_k_by_cosine

    def recording(queries, pool, k):
        shapes.append((tuple(queries.shape), tuple(pool.shape), k))
        return top_k(queries, pool, k)

    monkeypatch.setattr(useb_files, "CQADUPSTACK_CHUNK", 5)
    monkeypatch.setattr(useb_files, "top_k_by_cosine", recording)
    assert ev.task_useb_cqadupstack(GridEncoder(), useb_data, 64, False, "test") == whole
    split = json.loads((folder / "retrieval_split.json").read_text())["test"]
    expected = []
    for forum, size in FORUMS.items():
        n = len(split[forum])  # 12 queries: chunks of 5, 5, 2, each against the whole pool of size - 12
        expected += [((min(5, n - start), 8), (size - n, 8), 100) for start in range(0, n, 5)]
    assert shapes == expected  # no scores matrix larger than (CHUNK, pool)


def test_a_pool_smaller_than_100_takes_the_whole_pool(tmp_path):
    folder = tmp_path / useb_files.USEB_EVAL / "cqadupstack"
    folder.mkdir(parents=True)
    (folder / "corpus.json").write_text(json.dumps({"f": {str(i): f"title {i}" for i in range(30)}}))
    (folder / "retrieval_split.json").write_text(json.dumps({"test": {"f": {"0": ["1", "2"], "3": ["29"]}}}))
    embed = functools.partial(ev.encode_unique, HashEncoder())
    ((forum, retrieved),) = useb_files.cqadupstack_retrieved(embed, folder, "test")
    labels = [labels for labels, _ in retrieved]
    assert forum == "f" and [len(x) for x in labels] == [28, 28]  # every title of the pool (30 less 2 queries)
    assert [sum(x) for x in labels] == [2, 1]  # so every duplicate is found
    score, details = ev.task_useb_cqadupstack(HashEncoder(), tmp_path, 64, False, "test")
    assert 0 < score == details["f"] <= 100


# ---------------------------------------------------------------------------
# What each split reads and encodes; missing and malformed files
# ---------------------------------------------------------------------------

def test_each_split_encodes_only_what_it_needs_and_texts_are_stripped(useb_data):
    folder = useb_data / useb_files.USEB_EVAL / "askubuntu"
    dev = [line.split("\t") for line in (folder / "dev.txt").read_text().splitlines()]
    dev_ids = {i for qid, similar, candidates, _ in dev if similar for i in [qid, *candidates.split()]}
    titles = load_askubuntu_titles(folder / "text_tokenized.txt")
    encoder = GridEncoder()
    ev.evaluate(encoder, ["useb-askubuntu"], useb_data, split="valid")  # the model-selection call
    assert sorted(encoder.encoded) == sorted({titles[i] for i in dev_ids})  # each dev title once, nothing else
    assert "grub   boot" in encoder.encoded and "" in encoder.encoded

    encoder = GridEncoder()
    ev.evaluate(encoder, ["useb-scidocs", "useb-cqadupstack"], useb_data, split="valid")
    assert not any("abstract" in text for text in encoder.encoded)  # titles only
    assert "" in encoder.encoded and all(text == text.strip() for text in encoder.encoded)


def test_missing_useb_data_names_the_file_and_the_fetch_command(tmp_path):
    with pytest.raises(ev.DataMissingError) as e:
        ev.evaluate(HashEncoder(), ["useb-scidocs"], tmp_path)
    message = str(e.value)
    assert "useb/data-eval/scidocs/data.json" in message and "UKPLab/useb" in message
    assert f"--fetch-data {tmp_path} --sets useb" in message and "\n" not in message
    assert missing_file("useb", tmp_path).startswith(f"missing data file {tmp_path}/useb/data-eval/askubuntu/")
    result = ev.evaluate(HashEncoder(), "all", tmp_path)  # `all` never runs (nor skips) the useb tasks
    assert not any(task.startswith("useb") for task in [*result, *result["skipped"]])
    with pytest.raises(ValueError, match="unknown split 'dev'; choose from test, valid"):
        ev.evaluate(HashEncoder(), ["useb-askubuntu"], tmp_path, split="dev")


def copy_of(useb_data: Path, tmp_path: Path, name: str) -> Path:
    import shutil

    shutil.copytree(useb_data / useb_files.USEB_EVAL / name, tmp_path / useb_files.USEB_EVAL / name)
    return tmp_path / useb_files.USEB_EVAL / name


@pytest.mark.parametrize("name, file, damage, message", [
    ("askubuntu", "dev.txt", lambda t: t.replace("\t", " ", 1), r"dev\.txt:1: want query id, .* got 3\)$"),
    ("askubuntu", "text_tokenized.txt", lambda t: t.replace("1005\t", "x\t"), r"no line for question 1005"),
    ("cqadupstack", "corpus.json", lambda t: t[:-1], r"corpus\.json:1: not valid JSON"),
    ("cqadupstack", "retrieval_split.json", lambda t: t.replace('"valid"', '"dev"'), r'want \{"valid": '),
    ("twitterpara", "test.data", lambda t: t.replace("\tx\ty\n", "\n").replace("\t", "|", 4),
     r"test\.data:1: want topic id"),
    ("scidocs", "data.json", lambda t: t.replace('"abstract 1"}', '"abstract 1", "title": 3}', 1),
     r"corpus/1/title: want a string or null"),
])
def test_a_malformed_file_is_one_line_naming_the_file(useb_data, tmp_path, name, file, damage, message):
    path = copy_of(useb_data, tmp_path, name) / file
    path.write_text(damage(path.read_text()))
    with pytest.raises(ev.DataFormatError, match=message) as e:
        ev.evaluate(HashEncoder(), [f"useb-{name}"], tmp_path, split="valid")
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_the_command_line_scores_useb_and_reports_a_bad_file_in_one_line(useb_data, tmp_path, tiny_model_dir,
                                                                          capsys):
    out = tmp_path / "scores.json"
    argv = ["--model", str(tiny_model_dir), "--data-dir", str(useb_data), "--device", "cpu"]
    assert ev.main([*argv, "--tasks", "useb-askubuntu,useb-twitterpara", "--split", "valid", "--json", str(out)]) == 0
    scores = json.loads(out.read_text())
    assert scores["split"] == "valid" and 0 < scores["useb-askubuntu"] <= 100
    assert scores["details"]["useb-askubuntu"]["queries"] == 11 and "useb-avg" not in scores
    assert "no dev set" in capsys.readouterr().err

    path = copy_of(useb_data, tmp_path / "bad", "askubuntu") / "test.txt"
    path.write_text(path.read_text().replace("\t", "", 1))
    message = cli_error([*argv, "--data-dir", str(tmp_path / "bad"), "--tasks", "useb-askubuntu"])
    assert message.startswith(f"error: {path}:1: want query id") and "Traceback" not in capsys.readouterr().err
    message = cli_error([*argv, "--data-dir", str(tmp_path / "bad"), "--tasks", "useb"])  # before loading a model
    assert "useb/data-eval/cqadupstack/corpus.json" in message


# ---------------------------------------------------------------------------
# examples/reproduce_tsdae.sh
# ---------------------------------------------------------------------------

def test_reproduce_script_dry_run_prints_commands_the_parsers_accept():
    from commands import tsdae_train

    out = subprocess.run(["bash", str(ROOT / "examples" / "reproduce_tsdae.sh"), "--dry-run"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    commands = [shlex.split(line[2:]) for line in out.splitlines() if line.startswith("+ ")]
    evaluations = [c[2:] for c in commands if c[:2] == ["python", "evaluate.py"]]
    trainings = [c[2:] for c in commands if c[:2] == ["python", "tsdae.py"]]
    assert len(evaluations) == 6 and len(trainings) == 4  # fetch, the SBERT check, then train + score x 4
    for args in evaluations:
        ev.make_parser().parse_args(args)
    scored = [ev.make_parser().parse_args(a) for a in evaluations if "--tasks" in a]
    assert scored[0].model == "sentence-transformers/bert-base-nli-mean-tokens" and scored[0].tasks == "useb"
    assert [a.tasks for a in scored[1:]] == [f"useb-{d}" for d in ["askubuntu", "cqadupstack", "twitterpara",
                                                                    "scidocs"]]
    assert all(a.split == "test" for a in scored)
    flags = set(tsdae_train.make_parser()._option_string_actions)
    for args in trainings:
        assert {a for a in args if a.startswith("--")} <= flags, args
        options = dict(zip(args[::2], args[1:][::2]))
        assert options["--model"] == "bert-base-uncased" and options["--corpus"].endswith("/unsupervised/train.txt")
        assert (options["--steps"], options["--batch-size"], options["--lr"], options["--pooling"]) == \
               ("100000", "8", "3e-5", "cls")
    assert "59.4" in out and "14.5" in out and "73.0" in out and "74.0" in out and "55.2" in out and "47.6" in out


@pytest.mark.parametrize("task", ["useb-askubuntu", "useb-cqadupstack", "useb-scidocs"])
def test_model_selection_scores_the_valid_split(useb_data, task):
    """dev_score (what --eval-task selects on) reads USEB's valid split, which the oracle tests above check against
    useb.run_on(..., "valid"); on this data the test split scores differently, so reading it would show."""
    valid, test = (ev.evaluate(GridEncoder(), [task], useb_data, split=split)[task] for split in SPLITS)
    assert valid != test
    assert experiment.dev_score(GridEncoder(), task, useb_data) == valid
