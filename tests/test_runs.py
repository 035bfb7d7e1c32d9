"""Runs you can trust: held-out lines never train, a finished run stays finished, a failed or killed write loses
nothing, a corpus edited under a run stops it in one line; and the behaviours of the schedule and of the selection
flags that no other test pins down."""
import json
import os
import shutil
import signal
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

import train
from commands import consert_train, experiment, tsdae_train
from lib.run import RunFolder, RunState, StopOnSignal, finished, read_progress
from lib import datafiles
from lib.corpus import hold_out, open_corpus
from lib.errors import TrainingStopped, UsageError
from model import SentenceEncoder


def logged_steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- held out means held out


def test_held_out_text_never_trains_on_a_corpus_with_repeated_lines(tmp_path):
    """Every copy of a held-out sentence leaves training, whitespace aside, in a list, in a lazily read corpus, and
    for NLI pairs by their premises and hypotheses."""
    rng = np.random.default_rng(0)
    distinct = [f"sentence number {i}" for i in range(40)]
    lines = [distinct[i] + ("  " if k % 2 else "") for k, i in enumerate(rng.integers(0, 40, size=300))]
    trained, held = hold_out(lines, 20)
    unseen = {" ".join(s.split()) for s in held}
    assert len(held) == 20 and not unseen & {" ".join(s.split()) for s in trained}
    assert len(trained) < 300 - 20  # copies left training too
    assert len(trained) + len(held) + sum(" ".join(s.split()) in unseen for s in lines) - 20 == 300
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    lazy_trained, lazy_held = hold_out(open_corpus(path), 20)
    assert list(lazy_trained) == [" ".join(s.split()) for s in trained] \
        and lazy_held == [" ".join(s.split()) for s in held]
    pairs = [(f"premise {i % 7}", f"hypothesis {i}", i % 3) for i in range(50)]  # each premise in about 7 pairs
    trained, held = hold_out(pairs, 3)
    seen = {s for p, h, _ in trained for s in (p, h)}
    assert not seen & {s for p, h, _ in held for s in (p, h)} and len(trained) < 47
    with pytest.raises(UsageError, match="repeats a held-out sentence"):
        hold_out(["same"] * 10, 2)


# ---------------------------------------------------------------- a finished run stays finished


def test_resume_of_a_finished_tsdae_run_trains_nothing_and_a_larger_steps_goes_on(tiny_model_dir, small_corpus,
                                                                                   tmp_path, capsys):
    common = ["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--batch-size", "4", "--lr", "1e-3"]
    tsdae_train.main(common + ["--out", str(tmp_path / "a"), "--steps", "5"])
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--steps", "3"])
    before = folder_bytes(tmp_path / "b")
    capsys.readouterr()
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--steps", "3", "--resume"])
    assert folder_bytes(tmp_path / "b") == before  # no byte of model/, checkpoint/, decoder/ or the log
    assert "finished at step 3 of 3: nothing to train" in capsys.readouterr().out
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--steps", "5", "--resume"])
    assert logged_steps(tmp_path / "b") == [1, 2, 3, 4, 5]
    a = [json.loads(line)["loss"] for line in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    assert a[3:] == [json.loads(line)["loss"] for line in (tmp_path / "b" / "log.jsonl").read_text().splitlines()][3:]


def test_resume_of_a_finished_two_stage_consert_run_changes_nothing(tiny_model_dir, small_corpus, data_dir, tmp_path,
                                                                    capsys):
    common = ["--strategy", "joint-unsup", "--nli", str(data_dir / "sick" / "SICK_trial.txt"), "--corpus",
              str(small_corpus), "--nli-steps", "2", "--steps", "2", "--model", str(tiny_model_dir), "--out",
              str(tmp_path), "--batch-size", "8", "--save-every", "0"]
    consert_train.main(common)
    before = folder_bytes(tmp_path)
    capsys.readouterr()
    consert_train.main(common + ["--resume"])
    assert folder_bytes(tmp_path) == before
    out = capsys.readouterr().out
    assert "stage 1 (joint) already finished" in out and "finished at step 2 of 2: nothing to train" in out


def test_a_failed_write_of_the_model_at_the_end_resumes_to_the_same_result(tiny_model_dir, small_corpus, tmp_path,
                                                                           monkeypatch):
    """The run is marked done only once model/ is written: a full disk there leaves it unfinished, and --resume
    writes model/ without training a step."""
    common = ["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--batch-size", "4", "--lr", "1e-3",
              "--steps", "3"]
    tsdae_train.main(common + ["--out", str(tmp_path / "straight")])
    real_save = SentenceEncoder.save_pretrained

    def full_disk(self, out_dir, *args, **kwargs):
        if Path(out_dir).name == "model":
            raise OSError(28, "No space left on device")
        return real_save(self, out_dir, *args, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "save_pretrained", full_disk)
    with pytest.raises(TrainingStopped, match="could not write .*model"):
        tsdae_train.main(common + ["--out", str(tmp_path / "b")])
    assert not finished(tmp_path / "b") and read_progress(tmp_path / "b" / "checkpoint").step == 3
    monkeypatch.setattr(SentenceEncoder, "save_pretrained", real_save)
    tsdae_train.main(common + ["--out", str(tmp_path / "b"), "--resume"])
    assert finished(tmp_path / "b") and logged_steps(tmp_path / "b") == [1, 2, 3]
    straight = folder_bytes(tmp_path / "straight" / "model")
    resumed = folder_bytes(tmp_path / "b" / "model")
    assert resumed["model.safetensors"] == straight["model.safetensors"]


def test_a_kill_between_the_two_renames_of_a_save_leaves_a_resumable_run(tiny_model_dir, small_corpus, tmp_path):
    """Killed after checkpoint/ became .checkpoint.old-PID and before the new folder took its place: --resume puts
    the old one back and the run goes on as if it had not been killed."""
    common = ["--corpus", str(small_corpus), "--model", str(tiny_model_dir), "--batch-size", "4", "--lr", "1e-3",
              "--save-every", "2"]
    tsdae_train.main(common + ["--out", str(tmp_path / "straight"), "--steps", "6"])
    run = tmp_path / "b"
    tsdae_train.main(common + ["--out", str(run), "--steps", "4"])
    os.replace(run / "checkpoint", run / ".checkpoint.old-4242")  # the first rename, and no second
    shutil.copytree(run / ".checkpoint.old-4242", run / ".checkpoint.tmp-abcd")  # the new folder, never renamed
    tsdae_train.main(common + ["--out", str(run), "--steps", "6", "--resume"])
    assert logged_steps(run) == [1, 2, 3, 4, 5, 6] and not list(run.glob(".checkpoint*"))
    assert folder_bytes(run / "model")["model.safetensors"] \
        == folder_bytes(tmp_path / "straight" / "model")["model.safetensors"]


@pytest.fixture(scope="module")
def wide_tiny_model(tmp_path_factory, minilm_path) -> Path:
    """One 128-wide layer with dropout: wide enough that a batch's cross-attention rows (N x 128 numbers) pass the
    32768 above which PyTorch parallelises a CPU kernel, small enough to train in seconds."""
    import torch

    from lib import weights
    from model import Bert, BertConfig

    cfg = BertConfig(hidden_size=128, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("wide") / "model"
    SentenceEncoder(Bert(cfg), weights.load_tokenizer(Path(minilm_path)), "cls", 32, source=Path(minilm_path)
                    ).save_pretrained(folder)
    return folder


def test_the_fast_tsdae_loss_adds_no_rows_of_its_gradient_atomically(wide_tiny_model, small_corpus):
    """The cause of issue 56's drift: indexing a (B, h, d) tensor by each row's sentence (N rows, a sentence many
    times) has a backward (IndexBackward0: index_put_ with accumulate) that adds on 2+ CPU threads with atomic adds
    in whatever order the threads meet, so the same step gave gradients 1 ulp apart from run to run, and a resumed
    run drifted from an uninterrupted one. No such node in the loss TSDAE trains (a boolean mask's x[keep] picks
    each position once: nothing to add in an order)."""
    import torch

    args = tsdae_train.parse_args(["--corpus", str(small_corpus), "--model", str(wide_tiny_model), "--batch-size", "8"])
    objective = tsdae_train.build_objective(args)
    pairs = tsdae_train.denoising_pairs(open_corpus(small_corpus), objective.encoder, args)
    loader = tsdae_train.pair_loader(pairs, objective.encoder, args, torch.device("cpu"))
    loss = objective.train()(next(iter(loader)))
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo += [child for child, _ in node.next_functions]
    assert "IndexSelectBackward0" in {type(node).__name__ for node in seen}  # the rows are gathered, by index_select
    assert "IndexBackward0" not in {type(node).__name__ for node in seen}


def test_many_kill_9s_at_random_moments_resume_to_the_bits_of_an_uninterrupted_run(wide_tiny_model, small_corpus,
                                                                                    tmp_path):
    """python tsdae.py killed (SIGKILL: nothing saved on the way out) at random moments, 10 times, each time
    continued with --resume, on 2 threads: the same losses, weights and decoder as a run never killed."""
    import random
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    command = [sys.executable, str(root / "tsdae.py"), "--corpus", str(small_corpus), "--model", str(wide_tiny_model),
               "--batch-size", "16", "--lr", "1e-3", "--steps", "40", "--save-every", "3"]
    subprocess.run(command + ["--out", str(tmp_path / "straight")], env=env, check=True, capture_output=True)
    out, rng, kills = tmp_path / "killed", random.Random(0), 0
    lines = lambda log: log.read_text(encoding="utf-8").count("\n") if log.exists() else 0
    while True:
        again = ["--resume"] if (out / "checkpoint").exists() else ["--overwrite"]
        run = subprocess.Popen(command + ["--out", str(out), *again], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        if kills < 10:  # once it trains past where the last one was killed, at a random moment of the next steps
            logged = lines(out / "log.jsonl")
            while run.poll() is None and lines(out / "log.jsonl") <= logged:
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.3))
            if run.poll() is None:
                run.send_signal(signal.SIGKILL)
                kills += 1
        _, err = run.communicate()
        if run.returncode == 0:
            break
        assert run.returncode == -signal.SIGKILL, err
    assert kills == 10 and logged_steps(out) == list(range(1, 41))
    losses = lambda folder: [json.loads(line)["loss"] for line in (folder / "log.jsonl").read_text().splitlines()]
    assert losses(out) == losses(tmp_path / "straight")
    for folder in ("model", "decoder"):
        ours, theirs = folder_bytes(out / folder), folder_bytes(tmp_path / "straight" / folder)
        assert {n: b for n, b in ours.items() if n.endswith(".safetensors")} == \
               {n: b for n, b in theirs.items() if n.endswith(".safetensors")}, folder


# ---------------------------------------------------------------- a corpus edited under a run


def test_a_second_ctrl_c_breaks_the_step_off_and_saves_nothing_of_it(tmp_path, capsys):
    """The first signal waits for the step's end (then the run is saved); a second one, mid-step, stops at once
    and writes nothing: a half-done step saved as done would be repeated, or lost, by --resume."""
    run = RunFolder(Namespace(out=tmp_path, resume=False), encoder=None, objective=None, optimizer=None)
    with StopOnSignal() as stop:
        stop.request(signal.SIGINT, None)  # the first: only noted, the step goes on
        with pytest.raises(SystemExit) as exit_, run.saved_when_stopped(RunState(steps=10, step=4), stop):
            stop.request(signal.SIGINT, None)
    assert exit_.value.code == 130 and not (tmp_path / "checkpoint").exists()
    assert "stopped at once, during step 5: nothing saved" in capsys.readouterr().err


def test_a_corpus_rewritten_between_two_steps_ends_the_run_in_one_line_with_a_checkpoint(tiny_model_dir, small_corpus,
                                                                                       tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    shutil.copy(small_corpus, corpus)
    real_after_step = RunFolder.after_step

    def edit_after_step_2(self, state, record):
        real_after_step(self, state, record)
        if state.step == 2:  # someone saves the file in an editor
            corpus.write_text(corpus.read_text(encoding="utf-8").replace("the", "THE"), encoding="utf-8")

    monkeypatch.setattr(RunFolder, "after_step", edit_after_step_2)
    with pytest.raises(TrainingStopped) as stopped:
        tsdae_train.main(["--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(tmp_path / "o"),
                          "--batch-size", "4", "--steps", "8", "--save-every", "0"])
    message = str(stopped.value)
    assert "\n" not in message and "changed after it was read" in message and "stopped after step 2" in message
    assert read_progress(tmp_path / "o" / "checkpoint").step == 2 and (tmp_path / "o" / "model").is_dir()


# ---------------------------------------------------------------- the schedule and the selection flags


def test_the_linear_decay_runs_over_the_steps_after_the_warm_up():
    settings = train.TrainSettings(out=Path("."), steps=100, lr=1.0, warmup_ratio=0.1, schedule="linear")
    assert [train.lr_factor(s, settings) for s in (0, 9)] == [0.1, 1.0]  # warm-up: (step + 1) / 10
    assert train.lr_factor(10, settings) == 1.0 and train.lr_factor(55, settings) == pytest.approx(0.5)
    assert train.lr_factor(99, settings) == pytest.approx(1 / 90)  # decays to 0 over the 90 steps after it


def test_log_alignment_reads_sts_b_dev_never_test(monkeypatch, data_dir):
    read = []
    real_load = datafiles.load_stsb
    monkeypatch.setattr(datafiles, "load_stsb", lambda path: read.append(Path(path).name) or real_load(path))
    args = Namespace(eval_task=None, eval_data=str(data_dir), log_alignment=True)
    experiment.training_evaluation(args, None)
    assert read == ["sts-dev.csv"]


def test_the_held_out_uniformity_of_an_nli_stage_reads_premises_and_hypotheses(tiny_model_dir, small_corpus, tmp_path):
    args = consert_train.parse_args(["--strategy", "joint", "--nli", "x", "--heldout", "2", "--batch-size", "2"])
    (stage,) = consert_train.stages(args)
    encoder = consert_train.build_encoder(stage, tiny_model_dir, args)
    objective = consert_train.build_objective(stage, encoder, args, 1)
    pairs = [("a premise", "its hypothesis", 1), ("another premise", "another hypothesis", 0)]
    heldout = consert_train.held_out_signals(stage, pairs, objective, args, encoder.device)
    assert heldout.sentences == ["a premise", "its hypothesis", "another premise", "another hypothesis"]
