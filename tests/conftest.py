"""Shared test fixtures: the real MiniLM folder, the evaluation data, small real sentences."""
import csv
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkpoint import default_model_path  # noqa: E402

DATA_DIR = Path(os.environ.get("EVAL_DATA_DIR", ROOT / "data")).resolve()  # as evaluate.default_data_dir


@pytest.fixture(autouse=True)
def _fast_and_repeatable():
    torch.manual_seed(0)
    torch.set_num_threads(2)


@pytest.fixture(scope="session")
def minilm_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "stsbenchmark").is_dir():
        pytest.fail(f"evaluation data not found at {DATA_DIR}; set EVAL_DATA_DIR, or run python evaluate.py --fetch-data data")
    return DATA_DIR


@pytest.fixture(scope="session")
def sts_sentences(data_dir) -> list[str]:
    """64 real STS-benchmark sentences of varied length (so padding is exercised)."""
    with open(data_dir / "stsbenchmark" / "sts-dev.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    picked = rows[::45][:32]  # spread over the genres: captions, news, forums
    sentences = [r[5] for r in picked] + [r[6] for r in picked]
    lengths = {len(s.split()) for s in sentences}
    assert len(lengths) > 10, "want sentences of many lengths"
    return sentences


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, minilm_path) -> Path:
    """A 2-layer, 32-wide random BERT with MiniLM's vocabulary: training tests run in seconds on it."""
    import checkpoint
    from model import Bert, BertConfig, SentenceEncoder

    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    SentenceEncoder(Bert(cfg), checkpoint.load_tokenizer(Path(minilm_path)), "cls", 64, source=Path(minilm_path)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """16 short distinct sentences."""
    lines = [
        "the cat sat on the mat", "a dog barked at the mailman", "stocks fell sharply on monday",
        "the orchestra played a quiet waltz", "rain is expected over the weekend", "she planted tomatoes in may",
        "the bridge was closed for repairs", "he solved the puzzle in minutes", "our train arrived two hours late",
        "bees carry pollen between flowers", "the recipe needs three eggs", "voters queued outside the school",
        "a comet passed close to earth", "the striker scored twice", "ice melts faster in salt water",
        "the library opens at nine",
    ]
    path = tmp_path_factory.mktemp("corpus") / "small.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(params=["plain", "fast"])
def on_path(request):
    """Runs a test on both paths: on_path(encoder) is the encoder itself (plain) or a copy that shares its
    weights and runs fast.PackedBert (fast). on_path.name says which."""
    import fast

    def convert(encoder):
        return encoder if request.param == "plain" else fast.speed_up_encoder(encoder, torch.device("cpu"))

    convert.name = request.param
    return convert
