"""Model selection during training, and the dev signals without labels (train.py's loop calls ModelSelection).

  ModelSelection   evaluation during training, the best encoder, early stopping
  HeldOut          the dev signals of --heldout N: no labels needed
Which score selection reads (--eval-task, its dev data): commands/experiment.py, which hands it to train.py as eval_fn.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn as nn

from lib import align_uniform, distributed
from lib.embed import encode_unique
from lib.run import Encoder, RunFolder, RunState


class SelectionSettings(Protocol):
    """What model selection reads of the loop's settings (train.TrainSettings has these fields)."""

    eval_fn: Callable[[Encoder], float] | None
    log_fn: Callable[[Encoder], dict] | None
    eval_every: int
    higher_is_better: bool
    keep_best: bool
    patience: int


# ----------------------------------------------------------------------------
# Evaluation during training: when, and what it keeps


class ModelSelection:
    """With an eval_fn: evaluate every eval_every steps of each epoch and at each epoch's end, keep the best
    encoder in OUT/best (keep_best), and stop when `patience` evaluations in a row brought no better score.
    This is the schedule of sentence-transformers' fit, which the official ConSERT code runs: its step counter
    starts again each epoch, and when an epoch's last step is also an eval_every step it evaluates twice, the
    second time without improvement (it counts for patience; here the score is computed once and counted twice).
    Only the main process evaluates."""

    def __init__(self, settings: SelectionSettings, encoder: Encoder, run: RunFolder):
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
        """Under torchrun every process asks, and every one gets the main process's answer: all stop together."""
        return self.settings.patience > 0 and distributed.main_process_says(
            state.evals_since_best >= self.settings.patience)


# ---------------------------------------------------------------------------
# A dev signal without labels: sentences kept out of training
# ---------------------------------------------------------------------------
# TSDAE assumes no labelled data in the target domain (app. B), so no score says when training works or when to
# stop. A corpus alone gives this much: keep some of its lines out of training (lib.corpus.hold_out, --heldout N) and,
# at each evaluation, compute on them
#   heldout-loss        the method's own training loss (TSDAE: -log P(original | vector) per token, §3.1;
#                       ConSERT: cl_weight x NT-Xent, §3.1) with every random draw fixed: the same noise, views and
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
        return align_uniform.uniformity(encode_unique(encoder, self.sentences))

    def signals(self) -> dict:
        """{task: encoder -> score}: the --eval-task names of the held-out signals."""
        return {"heldout-loss": self.loss, "heldout-uniformity": self.uniformity}
