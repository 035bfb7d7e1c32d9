"""Model selection during training, and the dev signals it may read (train.py's loop calls ModelSelection).

  DEV_TASKS, check_dev_task   the scores selection may read: a task's dev data, never its test data
  dev_score, higher_is_better  --eval-task's score of an encoder, and its direction
  ModelSelection              evaluation during training, the best encoder, early stopping
  HeldOut                     the dev signals of --heldout N: no labels needed
  training_evaluation         what the selection flags (lib/cli.add_selection_arguments) ask each evaluation for
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
import torch.nn as nn

import evaluate
from lib import align_uniform, datafiles, taskfiles
from lib.errors import CorpusError, UsageError
from lib.run import RunFolder, RunState

if TYPE_CHECKING:  # names for the annotations, not imported when the program runs (train.py imports this file)
    from model import SentenceEncoder
    from train import TrainSettings


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
    if task not in DEV_TASKS and taskfiles.own_file(task) is None:
        why = ("USEB has no dev split for TwitterPara: its valid split is its test set" if task == "useb-twitterpara"
               else "USEB's average includes TwitterPara, whose valid split is its test set" if task == "useb"
               else "it has no dev data here, so selection would read its test data" if task in evaluate.TASKS or task == "all"
               else f"unknown task {task!r}")
        raise UsageError(f"--eval-task {task}: {why}; choose one with dev data: {', '.join(DEV_TASKS)}, or a file of "
                         "your own: rerank:PATH, sts:PATH, pairs:PATH")
    if data_dir is None and taskfiles.own_file(task) is None:  # nothing to check before the run evaluates
        return
    try:
        names = evaluate.parse_tasks([task])
    except ValueError as err:  # sts: with no file named
        raise UsageError(f"--eval-task {task}: {err}") from None
    problem = next(filter(None, (taskfiles.missing_file(t, Path(data_dir or ".")) for t in names)), None)
    if problem:
        raise UsageError(f"--eval-task {task}: {problem}")
    try:
        taskfiles.check_own_file(task)
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

    SEED = 0  # of every random draw of the held-out loss

    def __init__(self, objective: torch.nn.Module, batches: list[dict], sentences: list[str]):
        self.objective, self.batches, self.sentences = objective, batches, sentences

    def loss(self, encoder=None) -> float:
        """The mean of the objective's loss over the held-out batches, in training mode (the mode whose loss it
        is), with the random generator seeded by SEED for the while: the same draws at every evaluation, and
        the run's own random state as it was. Autograd stays on (the adversarial view differentiates inside the
        loss); nothing calls backward."""
        was_training = self.objective.training
        self.objective.train()
        with torch.random.fork_rng(devices=range(torch.cuda.device_count())):
            torch.manual_seed(self.SEED)
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
    elif args.eval_task and (args.eval_data or taskfiles.own_file(args.eval_task)):  # your own file needs no folder
        eval_fn = lambda encoder: dev_score(encoder, args.eval_task, args.eval_data)
    else:
        eval_fn = None
    logged = [lambda encoder: {name: signal(encoder) for name, signal in signals.items()}] if signals else []
    if args.log_alignment and args.eval_data:
        pairs = datafiles.load_stsb(Path(args.eval_data) / "stsbenchmark" / "sts-dev.csv")
        logged.append(lambda encoder: evaluate.alignment_uniformity(encoder, pairs))
    log_fn = (lambda encoder: {k: v for log in logged for k, v in log(encoder).items()}) if logged else None
    return eval_fn, log_fn
