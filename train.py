"""The training loop TSDAE and ConSERT share.

  TrainSettings               every setting of one run
  make_optimizer, lr_factor   AdamW (no decay on biases and LayerNorm weights), warm-up and decay, or a
                              method's own (TrainSettings.optimizer_fn, lr_factor_fn)
  train                       the loop: forward, backward (in micro_batches), clip, step; then the machinery below
  RunState                    where a run stands (progress.json)
  epochs                      the loader's batches, epoch after epoch, from where a run stands
  DEV_TASKS, check_dev_task   the scores selection may read: a task's dev data, never its test data
  ModelSelection              evaluation during training, the best encoder, early stopping
  HeldOut, training_evaluation   the dev signals of the selection flags (--eval-task, --heldout, --log-alignment)
  RunFolder                   OUT: checkpoint/ (what --resume needs), model/, best/, log.jsonl
  StopOnSignal                Ctrl-C / SIGTERM: finish the step, save, stop
  Progress                    a bar on a terminal, one plain line every 30 s in a log file

Each method hands `train` an `objective`: a module whose forward(batch) returns the loss of the batch.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn as nn
from tqdm.auto import tqdm

import data
import evaluate
from lib import align_uniform, datafiles, distributed
from lib.card import ModelCard
from lib.errors import CorpusError, ModelLoadError, UsageError
from lib.weights import atomic_dir, write_atomically
from model import SentenceEncoder


class TrainingStopped(UsageError):
    """Training ended early (NaN loss, a failed write). One line for the user; the last good checkpoint is kept."""


@dataclass
class TrainSettings:
    out: Path
    steps: int  # optimiser steps in total
    lr: float
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    warmup_ratio: float = 0.0  # fraction of steps with a linear warm-up
    schedule: str = "constant"  # after warm-up: "constant" or "linear" decay to 0
    grad_clip: float | None = 1.0
    micro_batch: int = 0  # forward and backward each batch in parts of this many rows (micro_batches; 0: whole)
    # instead of PyTorch's AdamW: optimizer_fn(param_groups, lr=lr, eps=adam_eps) (make_optimizer's groups)
    optimizer_fn: Callable[..., torch.optim.Optimizer] | None = None
    # instead of lr_factor's warm-up and decay: lr_factor_fn(step, settings), the lr of a step over the peak
    lr_factor_fn: Callable[[int, TrainSettings], float] | None = None
    amp: str = "none"  # "bf16" / "fp16" autocast (fp16 with a GradScaler)
    save_every: int = 0  # also write a resumable checkpoint every N steps (0: only at the end)
    eval_fn: Callable[[SentenceEncoder], float] | None = None  # e.g. STS-benchmark dev Spearman
    log_fn: Callable[[SentenceEncoder], dict] | None = None  # more numbers for log.jsonl at each evaluation
    eval_every: int = 0  # evaluate every N steps of each epoch, and at each epoch's end (with eval_fn)
    higher_is_better: bool = True  # the direction of eval_fn's score (higher_is_better)
    keep_best: bool = False  # save the encoder with the best eval score to out/best
    patience: int = 0  # stop after this many evaluations without a better score (0: never)
    resume: bool = False
    card: Callable[[RunState], ModelCard] | None = None  # the model card of model/ and best/ (README.md)
    save_with_model: Callable[[Path], None] | None = None  # writes the method's own files beside model/ (into OUT)


def make_optimizer(objective: nn.Module, settings: TrainSettings, device: torch.device) -> torch.optim.Optimizer:
    """AdamW (or settings.optimizer_fn's optimiser); no weight decay on biases and LayerNorm weights (BERT's
    recipe). Tied weights appear once."""
    decay, no_decay = [], []
    for p in objective.parameters():  # parameters() lists a shared (tied) Parameter once
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if settings.optimizer_fn is not None:
        return settings.optimizer_fn(groups, lr=settings.lr, eps=settings.adam_eps)
    # fused=True: PyTorch's one-pass kernel for the same update, about 4x faster than the default on CPU too
    return torch.optim.AdamW(groups, lr=settings.lr, eps=settings.adam_eps, fused=device.type in ("cpu", "cuda"))


def lr_factor(step: int, settings: TrainSettings) -> float:
    """The learning rate of optimiser step `step` (0, 1, ...) over the peak: settings.lr_factor_fn's, else a
    linear warm-up over int(steps * warmup_ratio) steps that ends at (step + 1) / warmup = 1 (its first step
    already moves the weights), then constant or linear decay to 0."""
    if settings.lr_factor_fn is not None:
        return settings.lr_factor_fn(step, settings)
    warmup = int(settings.steps * settings.warmup_ratio)
    if step < warmup:
        return (step + 1) / warmup
    if settings.schedule == "linear":
        return max(0.0, (settings.steps - step) / max(1, settings.steps - warmup))
    return 1.0


# ----------------------------------------------------------------------------
# The loop


def train(encoder: SentenceEncoder, objective: nn.Module, loader: torch.utils.data.DataLoader,
          settings: TrainSettings, device: torch.device) -> RunState:
    """AdamW steps over `loader` (whose batch_sampler is a data.BatchSampler) until settings.steps, or
    until early stopping. Under torchrun only the main process shows progress, logs, evaluates and writes."""
    objective.to(device).train()
    optimizer = make_optimizer(objective, settings, device)
    wrapped = distributed.ddp(objective, device)  # the objective in DDP under torchrun; on one process: itself
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(settings.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=settings.amp == "fp16")
    with RunFolder(settings, encoder, objective, optimizer) as run, StopOnSignal() as stop:
        state = run.load_checkpoint() if settings.resume else RunState(steps=settings.steps)
        selection = ModelSelection(settings, encoder, run)
        trained_out = lambda: state.step >= settings.steps or selection.patience_ran_out(state)
        if state.done and trained_out():  # --resume of a finished run: nothing to do, nothing is written
            if run.writes:
                print(f"{run.out} finished at step {state.step} of {state.steps}: nothing to train (--resume with a "
                      "larger --steps goes on)")
            return state
        state.done, shown = False, Progress(state.step, settings.steps, run.writes)
        try:
            for batch, ends_epoch in () if trained_out() else epochs(loader, state):
                t0 = time.perf_counter()
                for group in optimizer.param_groups:
                    group["lr"] = settings.lr * lr_factor(state.step, settings)
                optimizer.zero_grad(set_to_none=True)
                loss = 0.0
                for part, weight in micro_batches(data.to_device(batch, device), settings.micro_batch, objective):
                    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                        part_loss = wrapped(part) * weight  # the batch's loss: the weighted sum of its parts'
                    check_finite(part_loss, state, run)
                    scaler.scale(part_loss).backward()
                    loss += part_loss.item()
                distributed.sum_gradients(wrapped)  # under torchrun, where DDP did not
                record = {"loss": loss, "lr": optimizer.param_groups[0]["lr"]}
                if settings.grad_clip:  # a gradient longer than grad_clip is rescaled to that length
                    scaler.unscale_(optimizer)
                    record["grad_norm"] = nn.utils.clip_grad_norm_(objective.parameters(), settings.grad_clip).item()
                scaler.step(optimizer)
                scaler.update()
                state.step, state.step_in_epoch = state.step + 1, state.step_in_epoch + 1
                record = {"step": state.step, **record, **selection.after_step(state, ends_epoch, objective)}
                run.after_step(state, record)  # log.jsonl, and a checkpoint every save_every steps
                shown.update(record, sentences=batch_size(batch), seconds=time.perf_counter() - t0)
                stop.check()  # after Ctrl-C / SIGTERM: KeyboardInterrupt, now that the step is whole
                if trained_out():
                    break
        except KeyboardInterrupt:
            shown.close()
            stop.ignore()  # saving takes a second: a further Ctrl-C must not break it off
            run.save_interrupted(state)
            raise SystemExit(130)
        except CorpusError as e:  # the corpus file changed under the run: its lines are no longer the ones counted
            shown.close()
            run.save_progress(state)
            reason = str(e).strip().splitlines()[-1].split("CorpusError: ")[-1]  # a DataLoader worker's, too
            raise TrainingStopped(f"{reason}; stopped after step {state.step}, saved in {run.checkpoint}") from None
        shown.close()
        run.save_finished(state)
    return state


def micro_batches(batch: dict[str, torch.Tensor], size: int, objective: nn.Module) -> Iterator[tuple[dict, float]]:
    """The batch in parts of `size` rows (size 0: the whole batch, weight 1), each with its weight in the batch's
    loss. A loss that is a mean over objective.count(batch) terms (TSDAE's label tokens) is the sum over the parts
    of their means times count(part) / count(batch): averaging the parts' means instead would weigh a part with
    few tokens as much as one with many. (ConSERT's NT-Xent is no mean over parts at all: speedups/gradcache.py.)"""
    rows = len(next(iter(batch.values())))
    if not size or size >= rows:
        yield batch, 1.0
        return
    total = float(objective.count(batch))
    for start in range(0, rows, size):
        part = {name: tensor[start : start + size] for name, tensor in batch.items()}
        yield part, float(objective.count(part)) / total


def check_finite(loss: torch.Tensor, state: RunState, run: RunFolder) -> None:
    if not torch.isfinite(loss):
        last = run.checkpoint if run.checkpoint.exists() else "(none yet)"
        raise TrainingStopped(f"loss became {loss.item()} at step {state.step + 1}; stopped. The last good "
                              f"checkpoint is in {last}; try a lower --lr or --amp none")


def batch_size(batch: dict[str, torch.Tensor]) -> int:
    """Sentences (or pairs) in the global batch: this process's share times the processes."""
    return distributed.world_size() * len(next(iter(batch.values())))


# ----------------------------------------------------------------------------
# Where a run stands, and the batches from there


@dataclass
class RunState:
    """What progress.json holds: enough to continue a run exactly where it stopped."""

    steps: int  # the run's total
    step: int = 0
    epoch: int = 0
    step_in_epoch: int = 0
    best: float | None = None  # the best evaluation score so far
    evals_since_best: int = 0
    done: bool = False  # trained to its end (an interrupted run has a checkpoint and a model too)


def epochs(loader: torch.utils.data.DataLoader, state: RunState) -> Iterator[tuple[dict, bool]]:
    """(batch, whether it ends its epoch), epoch after epoch, from where `state` stands: a resumed run skips the
    batches of its epoch that it has done. The loop counts the steps; this moves `state` to the next epoch."""
    sampler = loader.batch_sampler
    while True:
        sampler.set_epoch(state.epoch, skip=state.step_in_epoch)
        for i, batch in enumerate(loader, start=state.step_in_epoch + 1):
            yield batch, i == len(sampler)
        state.epoch, state.step_in_epoch = state.epoch + 1, 0


# ----------------------------------------------------------------------------
# Evaluation during training: which dev score (--eval-task), when, and what it keeps

def dev_score(encoder, task: str, data_dir: str | Path | None = None, batch_size: int = 64) -> float:
    """The training scripts' model-selection score (--eval-task, one of DEV_TASKS or a file of your own): `task` on
    its dev data (stsb-dev; USEB's valid split; your own rerank:PATH, sts:PATH or pairs:PATH, which ignore the
    split)."""
    check_dev_task(task, None)
    return evaluate.evaluate(encoder, [task], data_dir, batch_size, split="valid")[task]


# The tasks model selection may read (--eval-task): each has dev data of its own, and whether a higher score is
# better. Any other task would select on its test data (stsb, sickr, sts12-16, askubuntu, align-uniform: no dev
# split here; USEB's TwitterPara: its "valid" split is its test set). rerank:PATH, sts:PATH and pairs:PATH are the
# user's own files (evaluate.py), taken as dev data, higher (MAP, Spearman, AP) better. The held-out signals need no
# data folder: lines of the corpus (--heldout N).
DEV_TASKS = {"stsb-dev": "higher", "useb-askubuntu": "higher", "useb-cqadupstack": "higher", "useb-scidocs": "higher",
             "heldout-loss": "lower", "heldout-uniformity": "lower"}


HELDOUT_TASKS = ("heldout-loss", "heldout-uniformity")


def higher_is_better(task: str) -> bool:
    """The direction of a dev task's score (DEV_TASKS; rerank:PATH, sts:PATH, pairs:PATH: higher)."""
    return DEV_TASKS.get(task, "higher") == "higher"


def check_dev_task(task: str | None, data_dir: str | Path | None) -> None:
    """The training scripts' check of --eval-task before anything is loaded: a one-line UsageError when `task` has
    no dev data (DEV_TASKS, or a file of yours: rerank:PATH, sts:PATH, pairs:PATH), or, with data_dir (the run will
    evaluate) or a file of yours, when its dev files are not there, or when the file of sts:PATH or pairs:PATH is malformed (it is read
    once here, so it fails now rather than at the first evaluation). None: no task."""
    if task is None or task in HELDOUT_TASKS:
        return
    if task not in DEV_TASKS and evaluate.own_file(task) is None:
        why = ("USEB has no dev split for TwitterPara: its valid split is its test set" if task == "useb-twitterpara"
               else "USEB's average includes TwitterPara, whose valid split is its test set" if task == "useb"
               else "it has no dev data here, so selection would read its test data" if task in evaluate.TASKS or task == "all"
               else f"unknown task {task!r}")
        raise UsageError(f"--eval-task {task}: {why}; choose one with dev data: {', '.join(DEV_TASKS)}, or a file of "
                         "your own: rerank:PATH, sts:PATH, pairs:PATH")
    if data_dir is None and evaluate.own_file(task) is None:  # nothing to check before the run evaluates
        return
    try:
        names = evaluate.parse_tasks([task])
    except ValueError as err:  # sts: with no file named
        raise UsageError(f"--eval-task {task}: {err}") from None
    problem = next(filter(None, (evaluate.missing_file(t, Path(data_dir or ".")) for t in names)), None)
    if problem:
        raise UsageError(f"--eval-task {task}: {problem}")
    try:
        evaluate.check_own_file(task)
    except CorpusError as err:
        raise CorpusError(f"--eval-task {task}: {err}") from None



class ModelSelection:
    """With an eval_fn: evaluate every eval_every steps of each epoch and at each epoch's end, keep the best
    encoder in OUT/best (keep_best), and stop when `patience` evaluations in a row brought no better score.
    This is the schedule of sentence-transformers' fit, which the official ConSERT code runs: its step counter
    starts again each epoch, and when an epoch's last step is also an eval_every step it evaluates twice, the
    second time without improvement (it counts for patience; here the score is computed once and counted twice).
    Only the main process evaluates."""

    def __init__(self, settings: TrainSettings, encoder: SentenceEncoder, run: RunFolder):
        self.settings, self.encoder, self.run = settings, encoder, run
        self.active = settings.eval_fn is not None and run.writes

    def after_step(self, state: RunState, ends_epoch: bool, objective: nn.Module) -> dict:
        """{"eval": score} when an evaluation was due at this step, else {}."""
        every = self.settings.eval_every
        evaluations = int(bool(every) and state.step_in_epoch % every == 0) + int(ends_epoch)
        if not self.active or not evaluations:
            return {}
        score = self.settings.eval_fn(self.encoder)
        logged = self.settings.log_fn(self.encoder) if self.settings.log_fn else {}
        objective.train()  # evaluation switched the encoder to eval mode
        for _ in range(evaluations):
            if state.best is None or (score > state.best if self.settings.higher_is_better else score < state.best):
                state.best, state.evals_since_best = score, 0
                if self.settings.keep_best:
                    self.run.save_model("best", state)
            else:
                state.evals_since_best += 1
        return {"eval": score, **logged}

    def patience_ran_out(self, state: RunState) -> bool:
        return self.settings.patience > 0 and state.evals_since_best >= self.settings.patience


# ---------------------------------------------------------------------------
# A dev signal without labels: sentences kept out of training
# ---------------------------------------------------------------------------
# TSDAE assumes no labelled data in the target domain (app. B), so no score says when training works or when to
# stop. A corpus alone gives this much: keep some of its lines out of training (lib.corpus.hold_out, --heldout N) and,
# at each evaluation, compute on them
#   heldout-loss        the method's own training loss (TSDAE: -log P(original | vector) per token, §3.1;
#                       ConSERT: cl_weight x NT-Xent, §3.2) with every random draw fixed: the same noise, views and
#                       dropout masks at every evaluation, so two evaluations differ only by the weights;
#   heldout-uniformity  the uniformity of their vectors (lib/align_uniform.py): spreading out, or collapsing.
# Lower is better for both. Whether either tracks a labelled score is measured in docs/evaluation.md.


class HeldOut:
    """The held-out signals of one run: `objective`, the module train() trains as this process alone would compute
    it (lib.distributed.this_process_only: only the main process evaluates), its fixed `batches` of the held-out
    lines (data.fixed_batches) and their `sentences`."""

    def __init__(self, objective: torch.nn.Module, batches: list[dict], sentences: list[str], seed: int = 0):
        self.objective, self.batches, self.sentences, self.seed = objective, batches, sentences, seed

    def loss(self, encoder=None) -> float:
        """The mean of the objective's loss over the held-out batches, in training mode (the mode whose loss it
        is), with the random generator seeded by `seed` for the while: the same draws at every evaluation, and
        the run's own random state as it was. Autograd stays on (the adversarial view differentiates inside the
        loss); nothing calls backward."""
        was_training = self.objective.training
        self.objective.train()
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(self.seed)
            losses = [self.objective(batch).item() for batch in self.batches]
        self.objective.train(was_training)
        return sum(losses) / len(losses)

    def uniformity(self, encoder) -> float:
        """The uniformity of the held-out sentences' vectors (lower: more spread out)."""
        return align_uniform.uniformity(evaluate.encode_unique(encoder, self.sentences))

    def signals(self) -> dict:
        """{task: encoder -> score}: the --eval-task names of the held-out signals."""
        return {"heldout-loss": self.loss, "heldout-uniformity": self.uniformity}


def training_evaluation(args: argparse.Namespace, heldout: HeldOut | None) -> tuple[Callable | None, Callable | None]:
    """(eval_fn, log_fn) for TrainSettings from the selection flags (cli.add_selection_arguments): the score of
    --eval-task (None when nothing is evaluated), and {name: value} of what else each evaluation logs: the other
    held-out signal (with --heldout), alignment and uniformity on STS-b dev (--log-alignment)."""
    signals = heldout.signals() if heldout else {}
    if args.eval_task in signals:
        eval_fn = signals.pop(args.eval_task)
    elif args.eval_task and (args.eval_data or evaluate.own_file(args.eval_task)):  # your own file needs no folder
        eval_fn = lambda encoder: dev_score(encoder, args.eval_task, args.eval_data)
    else:
        eval_fn = None
    logged = [lambda encoder: {name: signal(encoder) for name, signal in signals.items()}] if signals else []
    if args.log_alignment and args.eval_data:
        pairs = datafiles.load_stsb(Path(args.eval_data) / "stsbenchmark" / "sts-dev.csv")
        logged.append(lambda encoder: evaluate.alignment_uniformity(encoder, pairs))
    log_fn = (lambda encoder: {k: v for log in logged for k, v in log(encoder).items()}) if logged else None
    return eval_fn, log_fn


# ----------------------------------------------------------------------------
# The run folder


class RunFolder:
    """OUT holds model/ (the trained encoder, a Hugging Face folder), checkpoint/ (what --resume needs: the
    encoder, the objective, the optimiser, the random state, progress.json), log.jsonl (every step) and, with an
    evaluation, best/. Every folder is written atomically. Under torchrun only the main process writes."""

    def __init__(self, settings: TrainSettings, encoder: SentenceEncoder, objective: nn.Module, optimizer):
        self.settings, self.encoder, self.objective, self.optimizer = settings, encoder, objective, optimizer
        self.out = Path(settings.out)
        self.checkpoint = self.out / "checkpoint"
        self.writes = distributed.rank() == 0

    def __enter__(self) -> RunFolder:
        self.log_file = None
        if self.writes:  # a fresh run starts a fresh log; --resume continues the old one
            with self.writing(self.out / "log.jsonl"):
                self.out.mkdir(parents=True, exist_ok=True)
                if self.settings.resume:
                    self.drop_logged_steps_after_the_checkpoint()
                self.log_file = open(self.out / "log.jsonl", "a" if self.settings.resume else "w", encoding="utf-8")
        return self

    def drop_logged_steps_after_the_checkpoint(self) -> None:
        """A run killed after its last checkpoint logged steps that the resume trains again: drop those lines (and a
        half-written last one), so that every step is logged once."""
        state, log = read_progress(self.checkpoint), self.out / "log.jsonl"
        if state is None or not log.exists():
            return
        kept = []
        for line in log.read_text(encoding="utf-8").splitlines(keepends=True):
            try:
                if line.endswith("\n") and json.loads(line)["step"] <= state.step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                pass
        with self.writing(log):
            write_atomically(log, "".join(kept))

    def after_step(self, state: RunState, record: dict) -> None:
        if self.log_file:
            with self.writing(self.out / "log.jsonl"):
                self.log_file.write(json.dumps(record) + "\n")
                self.log_file.flush()
        if self.settings.save_every and state.step % self.settings.save_every == 0:
            self.save_checkpoint(state)

    def save_model(self, name: str, state: RunState) -> None:
        """model/ or best/, with its model card; with model/, the method's own files (save_with_model)."""
        if not self.writes:
            return
        with self.writing(self.out / name):
            self.encoder.save_pretrained(self.out / name, card=self.settings.card(state) if self.settings.card else None)
            if name == "model" and self.settings.save_with_model:
                self.settings.save_with_model(self.out)

    @staticmethod
    @contextlib.contextmanager
    def writing(folder: Path) -> Iterator[None]:
        """A failed write (a full disk, a lost mount) ends the run in one line; the folder written before is kept
        whole (weights.atomic_dir)."""
        try:
            yield
        except OSError as e:
            raise TrainingStopped(f"could not write {folder} ({e.strerror or e}); stopped. What was written before "
                                  f"is kept as it was") from None

    def save_checkpoint(self, state: RunState) -> None:
        if not self.writes:
            return
        with self.writing(self.checkpoint), atomic_dir(self.checkpoint) as tmp:
            self.encoder.save_pretrained(tmp / "encoder")  # the encoder so far, loadable like any model folder
            torch.save({
                "objective": self.objective.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            }, tmp / "training_state.pt")
            (tmp / "progress.json").write_text(json.dumps(asdict(state)) + "\n", encoding="utf-8")

    def load_checkpoint(self) -> RunState:
        """The state to continue from, after loading the objective, the optimiser and the random state."""
        path = self.checkpoint / "training_state.pt"
        if not path.exists():
            raise ModelLoadError(f"--resume: no checkpoint at {self.checkpoint}")
        saved = torch.load(path, map_location="cpu", weights_only=True)  # tensors and numbers, never code
        try:
            self.objective.load_state_dict(saved["objective"])
            self.optimizer.load_state_dict(saved["optimizer"])
        except (RuntimeError, ValueError) as e:  # another --model, --untie, view, --plain or code version
            reason = str(e).strip().splitlines()[0]
            raise ModelLoadError(f"--resume: the checkpoint at {self.checkpoint} does not fit this run's settings "
                                 f"({reason})") from None
        torch.set_rng_state(saved["rng"])
        if saved["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(saved["cuda_rng"])
        state = read_progress(self.checkpoint)
        state.steps = self.settings.steps  # the run may go on to a larger --steps
        return state

    def save_progress(self, state: RunState) -> None:
        """checkpoint/ and model/ as the run stands: the last whole step."""
        self.save_checkpoint(state)
        self.save_model("model", state)

    def save_interrupted(self, state: RunState) -> None:
        if self.writes:
            self.save_progress(state)
            print(f"\ninterrupted at step {state.step} of {state.steps}: the encoder so far is in "
                  f"{self.out / 'model'}; continue with --resume", file=sys.stderr)

    def save_finished(self, state: RunState) -> None:
        """checkpoint/ and model/, then progress.json marked done: a run (a stage of a two-stage run) counts as
        finished only once its model is written; one whose last write failed resumes into that write."""
        self.save_progress(state)
        state.done = True
        if self.writes:
            with self.writing(self.checkpoint):
                write_atomically(self.checkpoint / "progress.json", json.dumps(asdict(state)) + "\n")
        if self.writes and state.step < state.steps:
            print(f"stopped early at step {state.step}: no better dev score in {self.settings.patience} evaluations")

    def __exit__(self, *exc) -> None:
        if self.log_file:
            self.log_file.close()


def read_progress(checkpoint: Path) -> RunState | None:
    """The RunState saved in a checkpoint folder's progress.json, or None."""
    try:
        return RunState(**json.loads((checkpoint / "progress.json").read_text(encoding="utf-8")))
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


def finished(out: Path) -> bool:
    """Whether the run in `out` trained to its end."""
    state = read_progress(out / "checkpoint")
    return state is not None and state.done


# ----------------------------------------------------------------------------
# Ctrl-C and SIGTERM


class StopOnSignal:
    """Ctrl-C (SIGINT), and the SIGTERM of `kill`, `timeout` and batch schedulers: the loop finishes its step,
    then check() raises KeyboardInterrupt and the loop saves and stops. A second signal stops at once (still
    saving: mid-step, the weights are those of the last whole step)."""

    def __enter__(self) -> StopOnSignal:
        self.requested = False
        self.previous = {sig: signal.signal(sig, self.request) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def request(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    def ignore(self) -> None:
        for sig in self.previous:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------
# What a person sees while it trains


class Progress:
    """On a terminal: a bar with the smoothed loss, sentences/s and an ETA. Anywhere else (a log file,
    a CI job): one plain line every `every` steps or 30 seconds, whichever comes first. The ETA ignores the
    first steps, which are slow (memory being allocated for the first time)."""

    SKIP = 3  # steps left out of the speed estimate
    SMOOTHING = 0.05  # weight of the newest step in the running averages

    def __init__(self, step: int, total: int, enabled: bool, every: int = 100, seconds: float = 30.0):
        self.step, self.total, self.enabled, self.every, self.seconds = step, total, enabled, every, seconds
        self.loss = self.rate = self.step_time = self.score = None  # running averages, the last dev score
        self.seen = 0  # steps of this process so far
        self.last_line = time.monotonic()
        self.bar = None
        if enabled and sys.stdout.isatty() and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=step, desc="train", dynamic_ncols=True, mininterval=0.5,
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    def update(self, record: dict, sentences: int, seconds: float) -> None:
        self.step, self.seen = self.step + 1, self.seen + 1
        self.score = record.get("eval", self.score)
        self.loss = self.smooth(self.loss, record["loss"])
        if self.seen > self.SKIP:
            self.step_time = self.smooth(self.step_time, seconds)
            self.rate = sentences / self.step_time
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(self.summary(), refresh=False)
            self.bar.update(1)
        elif (self.step % self.every == 0 or self.step == self.total
              or time.monotonic() - self.last_line >= self.seconds):
            print(f"step {self.step}/{self.total}  {self.summary()}", flush=True)
            self.last_line = time.monotonic()

    def smooth(self, average: float | None, value: float) -> float:
        return value if average is None else (1 - self.SMOOTHING) * average + self.SMOOTHING * value

    def summary(self) -> str:
        parts = [f"loss {self.loss:.4f}"]
        if self.rate is not None:
            eta = round(self.step_time * (self.total - self.step))
            parts += [f"{self.rate:.1f} sent/s", f"eta {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}"]
        if self.score is not None:
            parts.append(f"dev {self.score:.2f}")
        return ", ".join(parts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
