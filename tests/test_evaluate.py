"""evaluate.py: metrics against hand-worked cases and scikit-learn, loaders against the data README's counts,
the AskUbuntu loader on a hand-made release, and STSb against sentence-transformers on the real MiniLM."""
import json
import math
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from sklearn.metrics import average_precision_score

from lib import cli
import evaluate as ev
from lib.errors import UsageError
from lib import datafiles, taskfiles

ASKUBUNTU_TINY = Path(__file__).resolve().parent / "data" / "askubuntu_tiny"


def cli_error(argv: list[str]) -> str:
    """`python evaluate.py ARGV` as its __main__ runs it (cli.run): the one line it exits with (exit code 1)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.run(lambda: ev.main(argv))
    assert isinstance(exit_info.value.code, str) and "\n" not in exit_info.value.code  # a str: printed, status 1
    return exit_info.value.code


class HashEncoder:
    """A fake encoder: a fixed pseudo-random 8-d vector per sentence (continuous cosines, no ties)."""

    def __init__(self):
        self.encoded: list[str] = []

    def encode(self, sentences, batch_size=64, show_progress=False):
        self.encoded.extend(sentences)
        rows = [np.random.default_rng(zlib.crc32(s.encode())).standard_normal(8) for s in sentences]
        return torch.tensor(np.array(rows), dtype=torch.float32)


class CosineEncoder:
    """A fake encoder with known geometry: `queries` map to (1, 0), any other text t to (c, sqrt(1 - c^2))
    with c = cosines[t], so its cosine with every query is exactly c. Unknown text -> KeyError."""

    def __init__(self, queries: set[str], cosines: dict[str, float]):
        self.queries, self.cosines, self.encoded = queries, cosines, []

    def encode(self, sentences, batch_size=64, show_progress=False):
        self.encoded.extend(sentences)
        cs = [1.0 if s in self.queries else self.cosines[s] for s in sentences]
        return torch.tensor([[c, math.sqrt(1 - c * c)] for c in cs], dtype=torch.float32)


# ---------------------------------------------------------------------------
# Average precision (TwitterPara) and ranking metrics (AskUbuntu, rerank)
# ---------------------------------------------------------------------------

def test_average_precision_hand_cases():
    # ranked: +, -, +, -  -> precisions at the positives 1/1 and 2/3
    assert ev.average_precision([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.6]) == pytest.approx((1 + 2 / 3) / 2, abs=1e-12)
    # ranked: -, +, -, +  -> 1/2 and 2/4
    assert ev.average_precision([0, 1, 0, 1], [0.9, 0.8, 0.7, 0.6]) == pytest.approx(0.5, abs=1e-12)
    # a tie: scores 0.9 | 0.5, 0.5 | 0.1 with labels - | +, - | +. The tied pair is one cut-off:
    # after it 1 of 3 is positive (recall 1/2), after the last 2 of 4 (recall 1/2 more): 0.5/3 + 0.5*0.5 = 5/12
    assert ev.average_precision([0, 1, 0, 1], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(5 / 12, abs=1e-12)
    assert ev.average_precision([0, 1, 0, 1], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(
        average_precision_score([0, 1, 0, 1], [0.9, 0.5, 0.5, 0.1]), abs=1e-12)
    # all tied: AP = the share of positives
    assert ev.average_precision([1, 0, 0, 1, 0], [0.3] * 5) == pytest.approx(0.4, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_average_precision_matches_sklearn(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=500)
    scores = rng.random(500)  # continuous: no ties
    assert abs(ev.average_precision(labels, scores) - average_precision_score(labels, scores)) < 1e-6
    tied = np.round(scores, 1)  # many ties: still scikit-learn's value, ties are grouped the same way
    assert abs(ev.average_precision(labels, tied) - average_precision_score(labels, tied)) < 1e-6


def test_average_precision_is_the_mean_precision_at_the_positives():
    """Held back (assignments.HELD_BACK). Without ties, AP is the mean precision at the positives' ranks: by hand
    (one positive at rank 7), and equal to query_metrics' AP of the same ranking on random cases. With tie groups
    that mix labels: (1/2 + 2/4 + 3/5) / 3, as scikit-learn."""
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
    assert ev.average_precision([0, 0, 0, 0, 0, 0, 1], scores) == pytest.approx(1 / 7, abs=1e-12)
    assert ev.query_metrics([False] * 6 + [True]) == pytest.approx({"map": 1 / 7, "p@1": 0.0, "p@5": 0.0, "mrr": 1 / 7})
    rng = np.random.default_rng(7)
    for _ in range(20):
        labels, scores = rng.integers(0, 2, size=30), rng.random(30)
        labels[rng.integers(30)] = 1  # at least one positive
        ranked = [bool(label) for label in labels[np.argsort(-scores)]]
        assert ev.average_precision(labels, scores) == pytest.approx(ev.query_metrics(ranked)["map"], abs=1e-12)
    labels, tied = [1, 1, 0, 0, 1], [0.9, 0.3, 0.9, 0.3, 0.1]
    assert ev.average_precision(labels, tied) == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 3, abs=1e-12)
    assert ev.average_precision(labels, tied) == pytest.approx(average_precision_score(labels, tied), abs=1e-12)


def test_query_metrics_and_stable_rerank():
    # ranked: -, +, -, -, +, +  -> AP = (1/2 + 2/5 + 3/6) / 3, P@1 = 0, P@5 = 2/5, RR = 1/2
    m = ev.query_metrics([False, True, False, False, True, True])
    assert m == pytest.approx({"map": (1 / 2 + 2 / 5 + 3 / 6) / 3, "p@1": 0.0, "p@5": 0.4, "mrr": 0.5})
    assert ev.rerank(["a", "b", "c", "d"], [0.1, 0.5, 0.1, 0.5]) == ["b", "d", "a", "c"]  # ties keep input order


# ---------------------------------------------------------------------------
# Loaders on the real data (counts from ../shared/data/README.md)
# ---------------------------------------------------------------------------

def test_sts_loaders_counts(data_dir):
    folder = data_dir / "stsbenchmark"
    sizes = [len(ev.load_stsb(folder / f)) for f in ("sts-train.csv", "sts-dev.csv", "sts-test.csv")]
    assert sizes == [5749, 1500, 1379]  # default csv quoting would give 5711/1470/1119
    assert len(ev.load_stsb(folder / "senteval" / "sts-test.csv")) == 1379
    assert len(ev.load_sick(data_dir / "sick" / "SICK_test_annotated.txt")) == 4927
    scored = {year: sum(len(p) for p in ev.load_sts_year(data_dir / year, subsets).values())
              for year, subsets in ev.STS_SUBSETS.items()}
    assert scored == {"sts12": 3108, "sts13": 1500, "sts14": 3750, "sts15": 3000, "sts16": 1186}
    assert len(ev.load_sts_year(data_dir / "sts16", ["answer-answer"])["answer-answer"]) == 254  # blank gold skipped


def test_twitterpara_label_rules(data_dir):
    url = ev.load_twitter_url(data_dir / "twitterpara" / "Twitter_URL_Corpus_test.txt")
    assert len(url) == 9334  # 10120 pairs less the 786 with 3 of 6 votes
    assert sum(p[2] for p in url) == 583 + 602 + 636  # 4, 5 or 6 votes
    pit = ev.load_pit2015(data_dir / "twitterpara" / "test.data")
    assert len(pit) == 838 and sum(p[2] for p in pit) == 175  # 972 less 134 debatable (expert score 3)
    # the expert-score rule gives the official test.label split: true -> 1, false -> 0, ---- -> dropped
    official = [line.split("\t")[0] for line in datafiles.read_lines(data_dir / "twitterpara" / "test.label")]
    assert [p[2] for p in pit] == [int(x == "true") for x in official if x != "----"]


# ---------------------------------------------------------------------------
# Tasks with a fake encoder
# ---------------------------------------------------------------------------

def test_twitterpara_ap_equals_direct_computation(data_dir):
    encoder = HashEncoder()
    result = ev.evaluate(encoder, ["twitterpara"], data_dir)
    assert len(encoder.encoded) == len(set(encoder.encoded))  # each distinct sentence encoded once
    details = result["details"]["twitterpara"]
    for name, pairs in [("url", ev.load_twitter_url(data_dir / "twitterpara" / "Twitter_URL_Corpus_test.txt")),
                        ("pit", ev.load_pit2015(data_dir / "twitterpara" / "test.data"))]:
        e1, e2 = encoder.encode([p[0] for p in pairs]).double(), encoder.encode([p[1] for p in pairs]).double()
        cosines = torch.nn.functional.cosine_similarity(e1, e2).numpy()
        assert np.allclose(cosines, ev.pair_cosines(HashEncoder(), pairs), atol=1e-6)
        expected = 100 * average_precision_score([p[2] for p in pairs], ev.pair_cosines(HashEncoder(), pairs))
        assert abs(details[f"{name}_ap"] - expected) < 1e-4  # = 1e-6 on the 0-1 scale
    assert details["url_pairs"] == 9334 and details["pit_pairs"] == 838
    assert result["twitterpara"] == pytest.approx((details["url_ap"] + details["pit_ap"]) / 2)


def test_sts_year_is_spearman_over_concatenated_subsets(data_dir):
    result = ev.evaluate(HashEncoder(), "sts16", data_dir)
    groups = ev.load_sts_year(data_dir / "sts16", ev.STS_SUBSETS["sts16"])
    pairs = [p for g in groups.values() for p in g]
    cosines = ev.pair_cosines(HashEncoder(), pairs)
    assert result["sts16"] == pytest.approx(100 * spearmanr([p[2] for p in pairs], cosines).correlation, abs=1e-9)
    details = result["details"]["sts16"]
    assert set(details) == set(ev.STS_SUBSETS["sts16"]) | {"pairs"} and details["pairs"] == 1186
    sub = groups["headlines"]
    expected = ev.spearman100([p[2] for p in sub], ev.pair_cosines(HashEncoder(), sub))
    assert details["headlines"] == pytest.approx(expected)


ASKUBUNTU_QUERY_TITLES = {"how do i connect to wifi ?", "how to upgrade to 14.04 ?", "what does sudo do ?",
                          "mount a usb drive"}
ASKUBUNTU_COSINES = {  # cosine of each candidate title with its query title
    "wifi driver for broadcom card": 0.9, "can not connect to wireless network": 0.5,
    "screen brightness resets after reboot": 0.5, "wifi icon missing from panel": 0.7,
    "wireless keeps disconnecting": 0.5, "install java on ubuntu": 0.1,
    "upgrade from 12.04 fails": 0.3, "upgrade firefox": 0.3, "do-release-upgrade to trusty": 0.6,
    "upgrade grub menu": 0.6, "what is new in 14.04 ?": 0.9,
    "run a program as root": 0.2, "sudo vs su": 0.4, "forgot my sudo password": 0.6, "change desktop wallpaper": 0.0,
    "usb drive not detected": 0.5, "format a usb stick": 0.5, "how to mount usb": 0.5,
}
# Worked out by hand (tests/data/askubuntu_tiny, titles only; + = a similar question):
# test 100: BM25 order 101..106, cosines .9 .5+ .5 .7 .5+ .1 -> ranked 101 104 102+ 103 105+ 106
#           (the .5 ties keep BM25 order) -> AP = (1/3 + 2/5)/2 = 11/30, P@1 = 0, P@5 = 2/5, RR = 1/3
# test 200: BM25 scores 10 12 8 8 5 -> BM25 order 202 201 203 204 205; cosines 202 .3, 201 .3+, 203 .6+,
#           204 .6, 205 .9 -> ranked 205 203+ 204 202 201+ -> AP = (1/2 + 2/5)/2 = 9/20, P@1 = 0, P@5 = 2/5, RR = 1/2
# test 300: 302 has the query's own title (cosine 1), 303 and 304 share a title (tie at .4; 304 is +);
#           cosines .2 1+ .4 .4+ .6 0 -> ranked 302+ 305 303 304+ 301 306 -> AP = (1 + 2/4)/2 = 3/4, P@1 = 1,
#           P@5 = 2/5, RR = 1
# test 400: no similar question -> not counted
# test means: MAP = (11/30 + 9/20 + 3/4)/3 = 47/90, P@1 = 1/3, P@5 = 2/5, MRR = (1/3 + 1/2 + 1)/3 = 11/18
# dev 500:  all three candidates tie at .5 and keep BM25 order (scores 3 3 2), the + one is last:
#           AP = 1/3, P@1 = 0, P@5 = 1/5, RR = 1/3
ASKUBUNTU_TEST = {"map": 100 * 47 / 90, "p@1": 100 / 3, "p@5": 40.0, "mrr": 100 * 11 / 18, "queries": 3}
ASKUBUNTU_DEV = {"map": 100 / 3, "p@1": 0.0, "p@5": 20.0, "mrr": 100 / 3, "queries": 1}


def test_askubuntu_tiny_release_by_hand():
    encoder = CosineEncoder(ASKUBUNTU_QUERY_TITLES, ASKUBUNTU_COSINES)  # bodies would raise KeyError
    results = ev.askubuntu_scores(encoder, ASKUBUNTU_TINY)
    assert results["test"] == pytest.approx(ASKUBUNTU_TEST, abs=1e-9)
    assert results["dev"] == pytest.approx(ASKUBUNTU_DEV, abs=1e-9)
    assert sorted(encoder.encoded) == sorted(set(encoder.encoded)) and len(encoder.encoded) == 22  # 24 ids, 22 titles


def test_askubuntu_task_through_evaluate(tmp_path):
    shutil.copytree(ASKUBUNTU_TINY, tmp_path / "askubuntu")
    result = ev.evaluate(CosineEncoder(ASKUBUNTU_QUERY_TITLES, ASKUBUNTU_COSINES), ["askubuntu"], tmp_path)
    assert result["askubuntu"] == pytest.approx(100 * 47 / 90)
    assert result["details"]["askubuntu"]["dev/map"] == pytest.approx(100 / 3)


def test_rerank_jsonl_by_hand(tmp_path):
    path = tmp_path / "mine.jsonl"
    lines = [{"query": "q1", "positive": ["p1", "p2"], "negative": ["n1", "n2", "n3"]},
             {"query": "q-without-positives", "positive": [], "negative": ["n1"]},
             {"query": "q2", "positive": ["p3"], "negative": []}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    encoder = CosineEncoder({"q1", "q2"}, {"p1": 0.8, "p2": 0.4, "p3": 0.5, "n1": 0.9, "n2": 0.4, "n3": 0.1})
    result = ev.evaluate(encoder, [f"rerank:{path}"], tmp_path)
    # q1 ranked n1 p1+ n2 p2+ n3 (the .4 tie puts the negative first) -> AP 1/2, P@1 0, P@5 2/5, RR 1/2
    # q2 ranked p3+ -> AP 1, P@1 1, P@5 1/5, RR 1
    assert result[f"rerank:{path}"] == pytest.approx(75.0)
    expected = {"map": 75.0, "p@1": 50.0, "p@5": 30.0, "mrr": 75.0, "queries": 2}
    assert result["details"][f"rerank:{path}"] == pytest.approx(expected)


# ---------------------------------------------------------------------------
# Missing data, "all", the CLI
# ---------------------------------------------------------------------------

def test_the_tables_name_the_same_tasks():
    assert list(ev.TASKS) == ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "stsb-dev", "sickr", "twitterpara",
                              "askubuntu", "useb-askubuntu", "useb-cqadupstack", "useb-twitterpara", "useb-scidocs",
                              "align-uniform"]  # the order --help and the errors list them in
    assert set(taskfiles.TASK_FILES) == set(ev.TASKS)  # every task's files, no more
    assert {rel.split("/")[0] for files in taskfiles.TASK_FILES.values() for rel in files} == set(taskfiles.SOURCES)
    assert [t for t in taskfiles.TASK_FILES if t.startswith("useb-")] == ev.USEB_TASKS  # missing_file's group useb
    assert set(ev.OWN_FILE_TASKS) == set(taskfiles.OWN_FILE_KINDS)
    assert set(ev.ALL_TASKS) | set(ev.USEB_TASKS) < set(ev.TASKS) and ev.AVG7_TASKS == ev.ALL_TASKS[:7]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ev.DataMissingError, match=r"SICK_test_annotated\.txt.*SICK \(Marelli"):
        ev.evaluate(HashEncoder(), ["sickr"], tmp_path)
    (tmp_path / "askubuntu").mkdir()
    with pytest.raises(ev.DataMissingError, match=r"text_tokenized\.txt\.gz.*AskUbuntu"):
        ev.evaluate(HashEncoder(), ["askubuntu"], tmp_path)
    with pytest.raises(ValueError, match="unknown task"):
        ev.evaluate(HashEncoder(), ["sts17"], tmp_path)


def test_all_runs_only_tasks_with_data(tmp_path, data_dir):
    shutil.copytree(data_dir / "sts13", tmp_path / "sts13")
    shutil.copytree(ASKUBUNTU_TINY, tmp_path / "askubuntu")
    result = ev.evaluate(HashEncoder(), "all", tmp_path)
    assert set(result["details"]) == {"sts13", "askubuntu"} and "avg7" not in result
    assert set(result["skipped"]) == set(ev.ALL_TASKS) - {"sts13", "askubuntu"}
    assert "SICK_test_annotated.txt" in result["skipped"]["sickr"]


def test_cli_missing_data_is_one_line_before_loading_a_model(tmp_path):
    argv = ["--model", str(tmp_path / "no-model"), "--tasks", "stsb", "--data-dir", str(tmp_path)]
    with pytest.raises(UsageError, match="sts-test.csv"):  # DataMissingError, not the model's ModelLoadError
        ev.main(argv)
    message = cli_error(argv)
    assert message.startswith(f"error: missing data file {tmp_path}/stsbenchmark/") and "sts-test.csv" in message
    with pytest.raises(SystemExit) as exit_info:  # argparse's own one line
        ev.main(["--tasks", "stsb,sts17"])
    assert exit_info.value.code == 2


def test_stsb_dev_and_avg7(data_dir):
    encoder = HashEncoder()
    dev = ev.evaluate(encoder, ["stsb-dev"], data_dir)["stsb-dev"]
    pairs = ev.load_stsb(data_dir / "stsbenchmark" / "sts-dev.csv")
    assert dev == pytest.approx(ev.spearman100([p[2] for p in pairs], ev.pair_cosines(HashEncoder(), pairs)))
    table = ev.format_table({**{t: float(i) for i, t in enumerate(ev.AVG7_TASKS)}, "avg7": 3.0,
                             "details": {"sts12": {"MSRpar": 1.5, "pairs": 3108}}, "skipped": {}})
    assert "avg7" in table and "MSRpar" in table and "3108" in table


# ---------------------------------------------------------------------------
# The real MiniLM: our STSb test score against sentence-transformers' evaluator
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm_encoder(minilm_path):
    from model import SentenceEncoder
    return SentenceEncoder.from_pretrained(minilm_path)


def test_stsb_test_matches_sentence_transformers(minilm_encoder, minilm_path, data_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    pairs = ev.load_stsb(data_dir / "stsbenchmark" / "sts-test.csv")
    ours, _ = ev.sts_group_scores(minilm_encoder, {"test": pairs}, batch_size=64, show_progress=False)
    evaluator = EmbeddingSimilarityEvaluator([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs],
                                             batch_size=64, main_similarity="cosine", name="sts-test")
    theirs = 100 * evaluator(SentenceTransformer(minilm_path, device="cpu"))["sts-test_spearman_cosine"]
    assert abs(ours["test"] - theirs) < 0.05, (ours["test"], theirs)
    assert 80 < ours["test"] < 85  # all-MiniLM-L6-v2's published STSb test score is 82.03


def test_last2_mean_pooling_from_the_command_line(tiny_model_dir, data_dir, tmp_path, sts_sentences):
    """evaluate.py --pooling last2-mean (ConSERT's official evaluation) scores the average of the mean-pooled last
    two layers; the same pooling cannot be saved as a sentence-transformers folder."""
    from model import SentenceEncoder

    out = tmp_path / "scores.json"
    assert ev.main(["--model", str(tiny_model_dir), "--pooling", "last2-mean", "--tasks", "stsb-dev",
                    "--data-dir", str(data_dir), "--json", str(out), "--device", "cpu"]) == 0
    scores = json.loads(out.read_text())
    assert scores["pooling"] == "last2-mean"
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="last2-mean")
    assert scores["stsb-dev"] == pytest.approx(ev.evaluate(encoder, ["stsb-dev"], data_dir)["stsb-dev"], abs=1e-9)
    mean = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="mean")
    assert scores["stsb-dev"] != pytest.approx(ev.evaluate(mean, ["stsb-dev"], data_dir)["stsb-dev"], abs=1e-3)
    with pytest.raises(ValueError, match="cannot express last2-mean"):
        encoder.save_pretrained(tmp_path / "m")
