"""torchrun + DDP on CPU (gloo, 2 processes, tiny model): N processes must train exactly like one."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import data
from lib.run import read_progress
from lib.weights import read_safetensors

ROOT = Path(__file__).resolve().parent.parent


def launch(script: str, nproc: int, *args, timeout: int = 600) -> None:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd = (launcher if nproc > 1 else [sys.executable]) + [str(ROOT / script), *map(str, args)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                            env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]


def losses(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]


def assert_same_run(a: Path, b: Path) -> None:
    assert losses(a) == pytest.approx(losses(b), abs=1e-5)
    wa, wb = read_safetensors(a / "model" / "model.safetensors"), read_safetensors(b / "model" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for k in wa:
        assert (wa[k] - wb[k]).abs().max() < 1e-5, k


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, sts_sentences) -> Path:
    path = tmp_path_factory.mktemp("ddp") / "corpus.txt"
    path.write_text("\n".join(sts_sentences[:37]) + "\n", encoding="utf-8")  # 37: the last batch is partial
    return path


def test_sampler_shards_cover_the_corpus_exactly_once():
    lengths = [len(str(i)) + i % 7 for i in range(103)]
    for world in (1, 2, 3):
        for epoch in (0, 1):
            seen = []
            for rank in range(world):
                s = data.BatchSampler(lengths, 8, seed=5, bucketing=True, rank=rank, world_size=world)
                s.set_epoch(epoch)
                shares = list(s)
                assert len(shares) == len(s) and all(shares)  # every process gets a non-empty share every step
                seen += [i for share in shares for _, i in share]
            assert sorted(seen) == list(range(103))
    assert [len(b)
            for b in data.BatchSampler(lengths, 8, world_size=2).iter_batches(0)][-2:] == [8, 7]  # 103 = 12 x 8 + 7
    assert [len(b)
            for b in data.BatchSampler(lengths[:97], 8, world_size=2).iter_batches(0)][-2:] == [8, 9]  # 1 < 2 shares


def evaluations(out: Path) -> list[float]:
    return [r["eval"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "eval" in r]


def test_two_processes_train_like_one_tsdae(tiny_model_dir, corpus, tmp_path):
    # with a held-out dev signal, which the main process alone evaluates (the objective without the collectives)
    common = ["--corpus", corpus, "--model", tiny_model_dir, "--batch-size", 8, "--steps", 6, "--lr", 1e-3,
              "--device", "cpu", "--heldout", 5, "--eval-every", 2]
    launch("tsdae.py", 1, *common, "--out", tmp_path / "one")
    launch("tsdae.py", 2, *common, "--out", tmp_path / "two")
    assert_same_run(tmp_path / "one", tmp_path / "two")
    assert len(evaluations(tmp_path / "one")) == 3
    assert evaluations(tmp_path / "one") == pytest.approx(evaluations(tmp_path / "two"), abs=1e-5)


def test_early_stopping_stops_every_process_at_the_main_process_step(tiny_model_dir, corpus, tmp_path):
    """The main process alone evaluates, so it alone sees the patience run out: every process must stop with it
    (a process left behind would wait forever in the next step's all-reduce: the timeout)."""
    common = ["--corpus", corpus, "--model", tiny_model_dir, "--batch-size", 10, "--steps", 40, "--lr", 1e-3,
              "--device", "cpu", "--view1", "none", "--view2", "none", "--encoder-dropout", "off",
              "--heldout", 5, "--eval-every", 1, "--patience", 1]
    launch("consert.py", 1, *common, "--out", tmp_path / "one", timeout=180)
    launch("consert.py", 2, *common, "--out", tmp_path / "two", timeout=180)
    assert len(losses(tmp_path / "one")) < 40  # it did stop early
    assert_same_run(tmp_path / "one", tmp_path / "two")


def test_checkpoint_written_once_and_resumable_on_any_number_of_processes(tiny_model_dir, corpus, tmp_path):
    common = ["--corpus", corpus, "--model", tiny_model_dir, "--batch-size", 8, "--lr", 1e-3, "--device", "cpu",
              "--save-every", 3]
    launch("tsdae.py", 1, *common, "--steps", 8, "--out", tmp_path / "straight")
    launch("tsdae.py", 2, *common, "--steps", 3, "--out", tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["checkpoint", "decoder", "log.jsonl", "model"]
    assert read_progress(tmp_path / "a" / "checkpoint").step == 3
    # continue on 1 process, then on 2 again
    launch("tsdae.py", 1, *common, "--steps", 6, "--resume", "--out", tmp_path / "a")
    launch("tsdae.py", 2, *common, "--steps", 8, "--resume", "--out", tmp_path / "a")
    assert_same_run(tmp_path / "straight", tmp_path / "a")


def test_two_processes_train_like_one_consert_with_gathered_negatives(tiny_model_dir, corpus, tmp_path):
    # the views draw their randomness per process, so equality needs deterministic views: with dropout off
    # and no augmentation the two views coincide, and the test isolates the gathered negatives
    common = ["--corpus", corpus, "--model", tiny_model_dir, "--batch-size", 10, "--steps", 5, "--lr", 1e-3,
              "--device", "cpu", "--view1", "none", "--view2", "none", "--encoder-dropout", "off"]
    launch("consert.py", 1, *common, "--out", tmp_path / "one")
    launch("consert.py", 2, *common, "--out", tmp_path / "two")
    assert_same_run(tmp_path / "one", tmp_path / "two")
    # the cached gradient in chunks of 3 (speedups/gradcache.py), its gradients summed over the processes without DDP
    launch("consert.py", 2, *common, "--micro-batch", 3, "--out", tmp_path / "chunks")
    assert_same_run(tmp_path / "one", tmp_path / "chunks")
    launch("consert.py", 2, *common, "--local-negatives", "--out", tmp_path / "local")
    assert losses(tmp_path / "local")[0] < losses(tmp_path / "one")[0]  # fewer negatives: an easier task


@pytest.mark.parametrize("kind", ["triplets", "scored"])
def test_two_processes_fine_tune_like_one_over_the_global_batch(tiny_model_dir, sts_sentences, tmp_path, kind):
    """finetune.py under torchrun: the in-batch negatives (and CoSENT's pairs of pairs) of the global batch, so two
    processes give one process's losses and gradients (the tiny model has no dropout); also with --micro-batch."""
    s = sts_sentences
    rows = [f"{s[i]}\t{s[i + 1]}\t" + (s[(i + 7) % 37] if kind == "triplets" else str(i % 5)) for i in range(37)]
    header = "anchor\tpositive\tnegative" if kind == "triplets" else "sentence1\tsentence2\tscore"
    (tmp_path / "rows.tsv").write_text("\n".join([header] + rows) + "\n", encoding="utf-8")
    common = ["--pairs", tmp_path / "rows.tsv", "--model", tiny_model_dir, "--batch-size", 10, "--steps", 5,
              "--lr", 1e-3, "--device", "cpu"]
    launch("finetune.py", 1, *common, "--out", tmp_path / "one")
    for name, extra in (("two", []), ("chunks", ["--micro-batch", 3])):
        launch("finetune.py", 2, *common, *extra, "--out", tmp_path / name)
        assert losses(tmp_path / name) == pytest.approx(losses(tmp_path / "one"), abs=1e-5)
        # the summed gradient: averaged, it would be half as long. (The weights are not compared to 1e-5: the tiny
        # model's vectors are nearly parallel, so rounding decides the sign of some near-zero gradient entries,
        # which Adam turns into steps of the full lr.)
        assert grad_norms(tmp_path / name) == pytest.approx(grad_norms(tmp_path / "one"), rel=1e-3)


def grad_norms(out: Path) -> list[float]:
    return [json.loads(line)["grad_norm"] for line in (out / "log.jsonl").read_text().splitlines()]
