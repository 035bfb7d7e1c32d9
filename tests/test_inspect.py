"""Seeing what training does: alignment and uniformity (evaluate.py's align-uniform task), the similarity plot
(examples/plot_similarities.py), and the model card a trained folder carries (lib/card.py)."""
import argparse
import hashlib
import json
import math
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch

from lib import align_uniform, cli
import evaluate
from lib.run import RunState
from commands import tsdae_train
from lib.card import PAPERS, ModelCard, corpus_fingerprint, model_card_text, write_model_card, yaml_string
from lib.datafiles import load_stsb
from model import SentenceEncoder

ROOT = Path(__file__).resolve().parent.parent
PLOT = ROOT / "examples" / "plot_similarities.py"


class FakeEncoder:
    """encode() gives each sentence the vector `vectors[sentence]` (not unit length: the measures normalise)."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors

    def encode(self, sentences, batch_size=64, show_progress=False):
        return torch.tensor([self.vectors[s] for s in sentences], dtype=torch.float32)


class HashEncoder:
    """A deterministic vector per sentence, for running the task on the real files without a model."""

    def encode(self, sentences, batch_size=64, show_progress=False):
        seed = lambda s: int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little")
        rows = [torch.randn(64, generator=torch.Generator().manual_seed(seed(s))) for s in sentences]
        return torch.stack(rows)


def naive_alignment_uniformity(vectors: dict[str, list[float]], pairs, above: float = 4.0) -> tuple[float, float]:
    """The two formulas as SimCSE applies them, in float64 loops: no matrices, no logsumexp, no chunks. p_data is
    every sentence of every pair: a sentence in two pairs is two rows (Wang & Isola's pdist counts both)."""
    f = {s: np.asarray(v, dtype=np.float64) / np.linalg.norm(np.asarray(v, dtype=np.float64))
         for s, v in vectors.items()}
    positives = [(a, b) for a, b, score in pairs if score > above]
    align = sum(float(np.sum((f[a] - f[b]) ** 2)) for a, b in positives) / len(positives)
    rows = [s for p in pairs for s in p[:2]]
    terms = [math.exp(-2 * float(np.sum((f[x] - f[y]) ** 2))) for x, y in combinations(rows, 2)]  # row i != row j
    return align, math.log(sum(terms) / len(terms))


# ---------------------------------------------------------------- alignment and uniformity

def test_alignment_and_uniformity_equal_the_formulas_computed_naively():
    rng = np.random.default_rng(0)
    names = [f"s{i}" for i in range(13)]
    vectors = {s: (rng.normal(size=5) * rng.uniform(0.5, 3)).tolist() for s in names}  # lengths vary
    vectors["s12"] = [2 * v for v in vectors["s11"]]  # the same direction: distance 0, still a distinct sentence
    pairs = [("s0", "s1", 4.0), ("s2", "s3", 5.0), ("s4", "s5", 3.9), ("s6", "s0", 4.6), ("s7", "s8", 0.0),
             ("s9", "s10", 2.0), ("s11", "s12", 4.2), ("s1", "s2", 1.0)]  # s0, s1, s2 in two pairs each
    result = evaluate.alignment_uniformity(FakeEncoder(vectors), pairs)
    align, uniform = naive_alignment_uniformity(vectors, pairs)
    assert result["positive_pairs"] == 3 and result["sentences"] == 16  # above 4: 4.0 itself is not; repeats count
    assert result["alignment"] == pytest.approx(align, rel=1e-6)
    assert result["uniformity"] == pytest.approx(uniform, rel=1e-6)
    distinct = dict.fromkeys(s for p in pairs for s in p[:2])
    terms = [math.exp(-2 * float(np.sum((np.asarray(vectors[x]) / np.linalg.norm(vectors[x])
                                         - np.asarray(vectors[y]) / np.linalg.norm(vectors[y])) ** 2)))
             for x, y in combinations(distinct, 2)]
    assert abs(result["uniformity"] - math.log(sum(terms) / len(terms))) > 1e-3  # the repeats change it
    looser = evaluate.alignment_uniformity(FakeEncoder(vectors), pairs, above=3.8)
    assert looser["positive_pairs"] == 5
    assert looser["alignment"] == pytest.approx(naive_alignment_uniformity(vectors, pairs, 3.8)[0], rel=1e-6)


def test_uniformity_is_the_same_whatever_the_chunk():
    emb = torch.randn(301, 16)
    whole = align_uniform.uniformity(emb, chunk=301)
    for chunk in (1, 7, 100, 256, 1000):
        assert align_uniform.uniformity(emb, chunk=chunk) == pytest.approx(whole, abs=1e-12)
    f = torch.nn.functional.normalize(emb.double(), dim=-1)
    pdist_formula = torch.pdist(f, p=2).pow(2).mul(-2).exp().mean().log()  # Wang & Isola's one-liner
    assert whole == pytest.approx(float(pdist_formula), abs=1e-10)


def test_the_two_ends_collapsed_and_orthogonal():
    same = torch.ones(50, 8)  # one vector for everything
    assert align_uniform.uniformity(same) == pytest.approx(0.0, abs=1e-12)  # the worst: log E exp(0)
    assert align_uniform.alignment(same[:10], same[10:20]) == 0.0  # the best, which is why it is not the main score
    basis = torch.eye(32) * 3  # all pairs at right angles: ||f(x) - f(y)||^2 = 2
    assert align_uniform.uniformity(basis) == pytest.approx(-4.0, abs=1e-12)
    assert align_uniform.alignment(basis[:16], basis[16:]) == pytest.approx(2.0)


def test_bad_input_is_one_line():
    with pytest.raises(ValueError, match="no pair has a gold score above 4.0"):
        evaluate.alignment_uniformity(FakeEncoder({"a": [1.0], "b": [2.0]}), [("a", "b", 3.0)])
    with pytest.raises(ValueError, match="at least 2 sentences"):
        align_uniform.uniformity(torch.ones(1, 4))
    with pytest.raises(ValueError, match="same shape"):
        align_uniform.alignment(torch.ones(2, 4), torch.ones(3, 4))


def test_the_task_scores_the_whole_sts_b_as_simcse(data_dir):
    result = evaluate.evaluate(HashEncoder(), "align-uniform", data_dir)
    details = result["details"]["align-uniform"]
    assert result["align-uniform"] == details["uniformity"]  # the main score
    # SimCSE: all STS-B sentences (train + dev + test: 5,749 + 1,500 + 1,379 pairs) and the pairs scored above 4
    assert (details["positive_pairs"], details["sentences"]) == (1491, 2 * (5749 + 1500 + 1379))
    pairs = [p for split in ("train", "dev", "test") for p in load_stsb(data_dir / "stsbenchmark" / f"sts-{split}.csv")]
    direct = evaluate.alignment_uniformity(HashEncoder(), pairs)
    assert details["alignment"] == direct["alignment"] and details["uniformity"] == direct["uniformity"]
    # random 64-d vectors: cosines ~ N(0, 1/64), log E exp(4 cos - 4) = -4 + 8/64, a little higher with the
    # repeated sentences (distance 0); squared distances ~ 2
    assert -3.95 < details["uniformity"] < -3.7 and 1.7 < details["alignment"] < 2.3
    table = evaluate.format_table(result)
    assert re.search(r"^align-uniform\s+-3\.\d\d$", table, re.M) \
        and re.search(r"^  positive_pairs\s+1491$", table, re.M)
    assert "align-uniform" not in evaluate.ALL_TASKS  # a diagnostic, not a column of the papers' tables


def test_the_task_names_a_missing_file(tmp_path):
    with pytest.raises(evaluate.DataMissingError,
                       match=r"stsbenchmark/sts-train\.csv: it belongs to the STS benchmark"):
        evaluate.evaluate(HashEncoder(), ["align-uniform"], tmp_path)


def test_minilm_numbers_are_plausible_and_a_random_bert_is_collapsed(minilm_path, tiny_model_dir, data_dir):
    pairs = load_stsb(data_dir / "stsbenchmark" / "sts-test.csv")[:400]  # 61 pairs of gold above 4
    minilm = evaluate.alignment_uniformity(SentenceEncoder.from_pretrained(minilm_path), pairs)
    assert minilm["positive_pairs"] == 61
    # Paraphrases at cosine ~0.83 (||f(x) - f(y)||^2 = 2 - 2 cos ~ 0.33); random pairs near right angles (-> -4).
    assert 0.15 < minilm["alignment"] < 0.6, minilm
    assert -4.0 < minilm["uniformity"] < -3.3, minilm
    tiny = evaluate.alignment_uniformity(SentenceEncoder.from_pretrained(tiny_model_dir), pairs)
    assert tiny["uniformity"] > -0.1 and tiny["alignment"] < 0.01, tiny  # untrained: every sentence one vector


# ---------------------------------------------------------------- examples/plot_similarities.py

@pytest.fixture
def small_sts(tmp_path, data_dir) -> Path:
    """A data folder with the first 60 pairs of STS-b train, dev and test (55 of them gold above 4)."""
    folder = tmp_path / "data" / "stsbenchmark"
    folder.mkdir(parents=True)
    for name in ("sts-train.csv", "sts-test.csv", "sts-dev.csv"):
        lines = (data_dir / "stsbenchmark" / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (folder / name).write_text("".join(lines[:60]), encoding="utf-8")
    return folder.parent


def test_plot_similarities_writes_a_png_and_a_summary(tmp_path, small_sts, tiny_model_dir, minilm_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sims.png"
    result = subprocess.run([sys.executable, str(PLOT), "--model", f"{tiny_model_dir}:random tiny", minilm_path,
                             "--data-dir", str(small_sts), "--pairs", "50", "--out", str(out), "--json",
                             str(tmp_path / "sims.json")],
                            capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header, *rows, wrote = result.stdout.strip().splitlines()
    assert header.split() == ["model", "random", "cos", "paraphrase", "cos", "alignment", "uniformity"]
    assert wrote == f"wrote {out} (2 models, 50 random pairs)"
    parsed = {row.rsplit(None, 4)[0].strip(): [float(v) for v in row.split()[-4:]] for row in rows}
    assert list(parsed) == ["random tiny", "model"]  # the label given; else the folder's name (MiniLM's: model)
    random_cos, paraphrase_cos, align, uniform = parsed["random tiny"]
    assert random_cos > 0.99 and paraphrase_cos > 0.99  # a random BERT: the cone closed to a point
    random_cos, paraphrase_cos, align, uniform = parsed["model"]
    assert random_cos < 0.3 < 0.7 < paraphrase_cos
    pairs = [p for split in ("train", "dev", "test")
             for p in load_stsb(small_sts / "stsbenchmark" / f"sts-{split}.csv")]
    expected = evaluate.alignment_uniformity(SentenceEncoder.from_pretrained(minilm_path), pairs)
    assert (align, uniform) == (round(expected["alignment"], 3), round(expected["uniformity"], 3))  # the task's numbers
    numbers = json.loads((tmp_path / "sims.json").read_text())
    paraphrases = sum(p[2] > 4 for p in pairs)
    assert [(sum(r["histogram"]["random"]), sum(r["histogram"]["paraphrase"])) for r in numbers.values()] == \
        [(50, paraphrases)] * 2
    script = runpy.run_path(str(PLOT))
    script["draw"](numbers, tmp_path / "redrawn.png")  # the figure again, from the JSON alone
    assert (tmp_path / "redrawn.png").read_bytes() == out.read_bytes()


def test_plot_similarities_without_matplotlib_says_how_to_get_it(tmp_path, small_sts):
    code = ("import sys, runpy; sys.modules['matplotlib'] = None; sys.argv = ['plot_similarities.py'] + sys.argv[1:]; "
            f"runpy.run_path({str(PLOT)!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code, "--data-dir", str(small_sts)], capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == "error: plotting needs matplotlib, which is not installed (pip install matplotlib)"


def test_plot_similarities_labels_and_pairs():
    script = runpy.run_path(str(PLOT))
    assert script["model_and_label"]("runs/x/model:ConSERT") == ("runs/x/model", "ConSERT")
    assert script["model_and_label"]("runs/x/model") == ("runs/x/model", "model")
    assert script["model_and_label"]("bert-base-uncased") == ("bert-base-uncased", "bert-base-uncased")
    pairs = script["random_pairs"](5, 200, seed=3)
    assert len(pairs) == 200 and all(i != j for i, j in pairs) and pairs == script["random_pairs"](5, 200, seed=3)


# ---------------------------------------------------------------- the model card (lib/card.py)

HOSTILE = ['he said "no": then # left\n---\nlicense: mit', "back\\slash\t\r\n", "é – 😀 \u2028 \x85 \x00 end",
           "- [a, b]"]


def make_card(**changes) -> ModelCard:
    values = dict(method="TSDAE", base_model="bert-base-uncased", pooling="cls", corpus="examples/topics.txt",
                  corpus_lines=248, corpus_sha256="ab" * 32, steps=310, batch_size=8, lr=3e-5,
                  non_default_settings={"--epochs": 10, "--pooling": "cls", "--out": "runs/tsdae-topics"},
                  dev_metric="STS-b dev Spearman x 100", dev_score=79.123,
                  command="python tsdae.py --corpus examples/topics.txt --epochs 10 --out runs/tsdae-topics")
    return ModelCard(**{**values, **changes})


def front_matter_of(text: str) -> dict:
    yaml = pytest.importorskip("yaml")  # PyYAML comes with huggingface_hub
    assert text.startswith("---\n")
    header = text[4:text.index("\n---\n", 4)]
    return yaml.safe_load(header)


def test_the_front_matter_is_what_the_hub_reads(tmp_path):
    from huggingface_hub import metadata_load  # the Hub's own reader of README.md front matter

    write_model_card(tmp_path, make_card(method="ConSERT", datasets=["sentence-transformers/stsb"]))
    meta = metadata_load(tmp_path / "README.md")
    assert meta == {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
                    "base_model": "bert-base-uncased",
                    "tags": ["sentence-transformers", "sentence-similarity", "feature-extraction", "consert"],
                    "datasets": ["sentence-transformers/stsb"], "code_license": "mit"}  # no license: none was given


def test_a_trained_card_carries_the_base_models_licence_and_the_codes(tmp_path, minilm_path, small_corpus):
    """The shipped MiniLM's own card says apache-2.0: a model trained from it says so, and that the code is MIT; a
    base folder without a card leaves the weights' licence out and says to check it."""
    args = tsdae_train.parse_args(["--corpus", str(small_corpus)])
    meta = front_matter_of(model_card_text(cli.model_card("TSDAE", tsdae_train.make_parser(), args, [], ["a"],
                                                          pooling="cls", lr=1e-5)(RunState(steps=1))))
    assert meta["license"] == "apache-2.0" and meta["code_license"] == "mit"
    bare = tmp_path / "bare"
    shutil.copytree(minilm_path, bare, ignore=shutil.ignore_patterns("README.md"))
    args = tsdae_train.parse_args(["--corpus", str(small_corpus), "--model", str(bare)])
    text = model_card_text(cli.model_card("TSDAE", tsdae_train.make_parser(), args, [], ["a"], pooling="cls",
                                          lr=1e-5)(RunState(steps=1)))
    assert "license" not in front_matter_of(text) and "its licence was not found" in text


def test_no_value_can_break_the_yaml():
    card = make_card(tags=HOSTILE, datasets=HOSTILE[:2], license=HOSTILE[0], base_model_id=HOSTILE[2])
    meta = front_matter_of(model_card_text(card))
    assert meta["tags"][4:] == HOSTILE and meta["datasets"] == HOSTILE[:2]
    assert meta["license"] == HOSTILE[0] and meta["base_model"] == HOSTILE[2]
    assert set(meta) == {"library_name", "pipeline_tag", "base_model", "tags", "datasets", "license", "code_license"}
    for value in HOSTILE:
        assert yaml_string(value).isascii()


def test_base_model_in_the_front_matter_only_when_it_is_a_hub_id(tmp_path, minilm_path):
    assert "base_model" not in front_matter_of(model_card_text(make_card(base_model=str(tmp_path))))
    assert "base_model" not in front_matter_of(model_card_text(make_card(base_model="./runs/x/model")))
    shipped = front_matter_of(model_card_text(make_card(base_model=minilm_path)))
    assert shipped["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"


def test_the_text_has_the_settings_the_command_and_the_paper():
    card = make_card(command="python consert.py --corpus 'my file.txt' --note 'a ```fenced``` | b'",
                     non_default_settings={"--lr": 2e-5, "--note": "a | b\nc"})
    text = model_card_text(card)
    assert "https://arxiv.org/abs/2104.06979" in text and PAPERS["TSDAE"][1] in text
    assert "\n````bash\n" + card.command + "\n````\n" in text  # a fence longer than the command's backticks
    for row in ("| steps | 310 |", "| batch size | 8 |", "| learning rate | 3e-05 |", "| pooling | cls |",
                "| base model | bert-base-uncased |", "| dev score | STS-b dev Spearman x 100: 79.12 |",
                "| training corpus | examples/topics.txt: 248 lines, SHA-256 " + "ab" * 32 + " |",
                "| --lr | 2e-05 |", "| --note | a \\| b c |"):
        assert row + "\n" in text, row
    assert "from model import SentenceEncoder" in text and "SentenceTransformer(" in text
    assert "AutoModel.from_pretrained(" in text and "hidden[:, 0]" in text  # the pooling it needs


def test_no_dev_score_no_row_and_bad_cards_are_one_line(tmp_path, tiny_model_dir):
    assert "dev score" not in model_card_text(make_card(dev_score=None))
    with pytest.raises(ValueError, match="unknown method 'SimCSE': give paper_id and paper_title"):
        model_card_text(make_card(method="SimCSE"))
    assert "arxiv.org/abs/2104.08821" in model_card_text(
        make_card(method="SimCSE", paper_id="2104.08821", paper_title="SimCSE"))
    with pytest.raises(ValueError, match="cannot be written"):
        model_card_text(make_card(pooling="last2-mean"))
    with pytest.raises(ValueError, match="the card says pooling mean but .*1_Pooling says cls"):
        write_model_card(tiny_model_dir, make_card(pooling="mean"))
    assert not (tiny_model_dir / "README.md").exists()


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_a_folder_with_its_card_loads_everywhere_with_the_same_vectors(tmp_path, tiny_model_dir, sts_sentences,
                                                                       pooling):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling=pooling)
    folder = tmp_path / "model"
    encoder.save_pretrained(folder)
    write_model_card(folder, make_card(pooling=pooling, load_path=str(folder)))
    text = (folder / "README.md").read_text(encoding="utf-8")
    assert "| maximum length | 64 tokens |" in text and "one 32-dimensional vector" in text  # read from the folder
    sentences = sts_sentences[:6]
    ours = SentenceEncoder.from_pretrained(folder).encode(sentences)  # (6, 32)
    theirs = torch.as_tensor(sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(sentences))
    assert torch.nn.functional.cosine_similarity(ours, theirs, dim=-1).min() >= 0.99999
    # The card's transformers example, run as written (its sentences swapped for ours).
    snippet = text.split("pooling by hand")[1].split("```python\n")[1].split("\n```")[0]
    scope = {}
    exec(snippet.replace('["A sentence.", "Another one."]', repr(sentences)), scope)
    assert torch.nn.functional.cosine_similarity(ours, scope["embeddings"], dim=-1).min() >= 0.99999


def test_the_card_is_written_inside_the_atomic_save(tmp_path, tiny_model_dir, monkeypatch):
    """save_pretrained writes the card in the same temporary folder as the weights: a card that fails to write
    (a full disk) leaves the folder saved before, its weights and its card, as they were."""
    import model

    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooling="cls")
    folder = tmp_path / "model"
    encoder.save_pretrained(folder, card=make_card(steps=1))
    before = {path.name: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    with torch.no_grad():
        encoder.bert.embeddings.word.weight.add_(1.0)

    def full_disk(folder, card):
        (folder / "README.md").write_text("half a card", encoding="utf-8")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model, "write_model_card", full_disk)
    with pytest.raises(OSError, match="No space left"):
        encoder.save_pretrained(folder, card=make_card(steps=2))
    assert {path.name: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folder left behind
    monkeypatch.undo()
    encoder.save_pretrained(folder, card=make_card(steps=2))
    assert "| steps | 2 |" in (folder / "README.md").read_text(encoding="utf-8")
    assert (folder / "model.safetensors").read_bytes() != before["model.safetensors"]


def test_non_default_settings_lists_exactly_what_was_changed():
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("--lr", type=float, default="3e-5")  # a string default, converted by argparse
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--plain", action="store_true")
    group = parser.add_argument_group("more")
    group.add_argument("--out", "-o", type=Path, default=Path("runs/x"))
    group.add_argument("--pooling", default="cls")
    args = parser.parse_args(["c.txt", "--lr", "3e-5", "--plain", "-o", "runs/y", "--pooling", "cls"])
    assert cli.non_default_settings(parser, args) == {"corpus": "c.txt", "--plain": True, "--out": "runs/y"}
    assert cli.non_default_settings(parser, parser.parse_args(["c.txt"])) == {"corpus": "c.txt"}


def test_corpus_fingerprint_and_command_line(tmp_path):
    lines = ["first line", "zweite Zeile: ä", "third"]
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    count, digest = corpus_fingerprint(lines)
    assert count == 3 and digest == hashlib.sha256((tmp_path / "c.txt").read_bytes()).hexdigest()
    argv = ["--corpus", "my file.txt", "--note", "it's"]
    assert shlex.split(cli.command_line(argv))[2:] == argv
