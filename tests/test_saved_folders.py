"""A saved folder loses nothing of its base: the whole sentence-transformers module stack (modules.json: Normalize,
Dense, in order, with their folders), the pooler's weights; transformers loads every family's saved folder without a
missing or unexpected weight, and sentence-transformers gives our vectors, norms included."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from commands import tsdae_train
from lib import weights
from lib.weights import ModelLoadError
from model import SentenceEncoder
from test_architectures import KINDS, SENTENCES, write_checkpoint


def st_model(folder: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def loading_report(folder: Path) -> dict:
    from transformers import AutoModel

    _, info = AutoModel.from_pretrained(folder, output_loading_info=True)
    return {k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys")}


NOTHING_WRONG = {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}


@pytest.mark.quick
def test_minilm_saved_untouched_keeps_its_normalize_and_its_vectors(minilm_path, tmp_path):
    """all-MiniLM-L6-v2 ends in Normalize: saved untouched, sentence-transformers loads the same three modules and
    gives the same unit vectors as the original (so the dot product ranks as the cosine does), and so do we."""
    ours = SentenceEncoder.from_pretrained(minilm_path)
    ours.save_pretrained(tmp_path / "saved")
    original, saved = st_model(Path(minilm_path)), st_model(tmp_path / "saved")
    assert [type(m).__name__ for m in saved] == [type(m).__name__ for m in original] == ["Transformer", "Pooling",
                                                                                          "Normalize"]
    theirs = saved.encode(SENTENCES, convert_to_tensor=True)
    assert (theirs - original.encode(SENTENCES, convert_to_tensor=True)).abs().max() < 1e-6
    mine = ours.encode(SENTENCES)
    assert (mine - theirs).abs().max() < 1e-5
    torch.testing.assert_close(mine.norm(dim=-1), torch.ones(len(SENTENCES)))
    assert loading_report(tmp_path / "saved") == NOTHING_WRONG  # MiniLM's pooler is kept


@pytest.fixture(scope="module")
def dense_base(tmp_path_factory, minilm_path) -> Path:
    """A tiny random BERT with CLS pooling, a Dense (32 -> 16, tanh) and a Normalize after it: a folder that
    sentence-transformers itself writes."""
    from sentence_transformers import SentenceTransformer, models

    root = tmp_path_factory.mktemp("dense")
    write_checkpoint("bert", root / "bert", minilm_path)
    transformer = models.Transformer(str(root / "bert"), max_seq_length=48)
    pooling = models.Pooling(32, pooling_mode="cls")
    torch.manual_seed(3)
    dense = models.Dense(32, 16, activation_function=torch.nn.Tanh())
    SentenceTransformer(modules=[transformer, pooling, dense, models.Normalize()], device="cpu").save(str(root / "st"))
    return root / "st"


def test_dense_and_normalize_apply_when_encoding_and_travel_with_a_trained_folder(dense_base, tmp_path):
    """Our encode applies the Dense and the Normalize as sentence-transformers does; a TSDAE run from the folder saves
    model/ and best/ with the same four modules, the Dense's folder as it was, and sentence-transformers' vectors
    equal ours."""
    base = SentenceEncoder.from_pretrained(dense_base)
    assert base.pooling == "cls" and [m["kind"] for m in base.post_pooling] == ["Dense", "Normalize"]
    mine = base.encode(SENTENCES)
    assert mine.shape == (len(SENTENCES), 16)
    assert (mine - st_model(dense_base).encode(SENTENCES, convert_to_tensor=True)).abs().max() < 1e-5

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n", encoding="utf-8")
    tsdae_train.main(["--corpus", str(corpus), "--model", str(dense_base), "--steps", "2", "--batch-size", "4",
                      "--heldout", "2", "--eval-every", "1", "--save-every", "0", "--device", "cpu", "--lr", "1e-3",
                      "--out", str(tmp_path / "run")])
    for name in ("model", "best"):
        saved = tmp_path / "run" / name
        modules = json.loads((saved / "modules.json").read_text())
        assert [weights.module_kind(m) for m in modules] == ["Transformer", "Pooling", "Dense", "Normalize"]
        dense = modules[2]["path"]
        for file in (dense_base / dense).iterdir():
            assert (saved / dense / file.name).read_bytes() == file.read_bytes()
        ours = SentenceEncoder.from_pretrained(saved).encode(SENTENCES)
        assert (ours - st_model(saved).encode(SENTENCES, convert_to_tensor=True)).abs().max() < 1e-5
        torch.testing.assert_close(ours.norm(dim=-1), torch.ones(len(SENTENCES)))
        assert loading_report(saved) == NOTHING_WRONG


@pytest.fixture(scope="module")
def families(tmp_path_factory, minilm_path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    folders = {}
    for kind in KINDS:
        for head in (False, True):  # a *Model checkpoint (BERT's and RoBERTa's have a pooler) and a *ForMaskedLM one
            name = f"{kind}-mlm" if head else kind
            write_checkpoint(kind, root / name, minilm_path, with_head=head)
            folders[name] = root / name
    return folders


@pytest.mark.parametrize("name", [f"{kind}{head}" for kind in KINDS for head in ("", "-mlm")])
def test_every_familys_saved_folder_loads_whole_in_transformers_and_sentence_transformers(name, families, tmp_path):
    """No weight missing (the pooler: the base's, or for a masked-LM base drawn as transformers would, once and for
    all), none unexpected; sentence-transformers' vectors equal ours."""
    ours = SentenceEncoder.from_pretrained(families[name])
    ours.save_pretrained(tmp_path / "saved")
    assert loading_report(tmp_path / "saved") == NOTHING_WRONG
    base = weights.read_safetensors(families[name] / "model.safetensors")
    saved = weights.read_safetensors(tmp_path / "saved" / "model.safetensors")
    for pooler in [n for n in base if n.startswith("pooler.")]:
        assert torch.equal(saved[pooler], base[pooler])  # kept as it was
    theirs = st_model(tmp_path / "saved").encode(SENTENCES, convert_to_tensor=True)
    assert (ours.encode(SENTENCES) - theirs).abs().max() < 1e-5


def test_a_module_this_encoder_cannot_apply_is_refused_in_one_line(dense_base, tmp_path):
    folder = tmp_path / "odd"
    shutil.copytree(dense_base, folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules[2]["type"] = "sentence_transformers.models.LayerNorm"
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelLoadError, match=r"module 2 \(sentence_transformers.models.LayerNorm\) is not one this "
                                             r"encoder applies after pooling \(Normalize, Dense\)"):
        SentenceEncoder.from_pretrained(folder)


@pytest.mark.quick
def test_a_pooling_config_of_sentence_transformers_5_is_read(minilm_path, tmp_path):
    """Version 5 writes {"pooling_mode": "cls"} where earlier ones wrote pooling_mode_cls_token: true."""
    folder = tmp_path / "new"
    shutil.copytree(minilm_path, folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 384, "pooling_mode": "cls"}))
    assert SentenceEncoder.from_pretrained(folder).pooling == "cls"


def with_null_pad_id(source: Path, folder: Path) -> Path:
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad_token_id": None}))
    return folder


def test_a_config_whose_pad_token_id_is_null_runs_as_in_transformers(tiny_model_dir, small_corpus, minilm_path,
                                                                     tmp_path):
    """transformers runs such a config (no padding row; its tokenizer pads with [PAD]): we pad with the tokenizer's
    [PAD] too, to sentence-transformers' vectors, train on it, and a saved folder keeps the null. RoBERTa counts its
    positions from the pad id and transformers fails on a null one: one line."""
    folder = with_null_pad_id(tiny_model_dir, tmp_path / "null")
    ours = SentenceEncoder.from_pretrained(folder)
    assert ours.bert.cfg.pad_token_id == 0  # the tokenizer's [PAD]
    theirs = st_model(folder).encode(SENTENCES, convert_to_tensor=True)
    assert (ours.encode(SENTENCES) - theirs).abs().max() < 1e-5
    tsdae_train.main(["--corpus", str(small_corpus), "--model", str(folder), "--out", str(tmp_path / "run"),
                      "--batch-size", "4", "--steps", "1", "--save-every", "0"])
    assert json.loads((tmp_path / "run" / "model" / "config.json").read_text())["pad_token_id"] is None
    write_checkpoint("roberta", tmp_path / "roberta", minilm_path)
    with pytest.raises(ModelLoadError, match=r"^\S+config.json: pad_token_id is null, but roberta's positions count "
                                             r"from it \(transformers fails on it too\); set it"):
        SentenceEncoder.from_pretrained(with_null_pad_id(tmp_path / "roberta", tmp_path / "roberta-null"))
