"""Shared test fixtures: the real MiniLM folder, the evaluation data, small real sentences."""
import csv
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model import default_model_path  # noqa: E402

DATA_DIR = Path(os.environ.get("EVAL_DATA_DIR", ROOT.parent / "shared" / "data"))


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
        pytest.fail(f"evaluation data not found at {DATA_DIR}; set EVAL_DATA_DIR")
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
