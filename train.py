"""The training loop every experiment shares: TSDAE, ConSERT, supervised fine-tuning and the MLM baseline each
hand `train` an `objective`, a module whose forward(batch) returns the loss of the batch.

  TrainSettings               every setting of one run
  make_optimizer, lr_factor   AdamW (no decay where sentence-transformers' fit has none), warm-up and decay, or a
                              method's own (TrainSettings.optimizer_fn, lr_factor_fn: linear_schedule_with_warmup,
                              transformers' schedule)
  train                       the loop: forward, backward (in micro_batches), clip, optimiser step

Around the loop, in lib/: the run folder, checkpoints, Ctrl-C and the progress line (lib/run.py), model selection
and the held-out dev signals (lib/selection.py).

Nothing to run here: `python tsdae.py --corpus FILE` (or consert.py, finetune.py, baselines/mlm.py) builds an
objective and calls `train`; a breakpoint in its loop stops every one of them.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn as nn

import data
from lib import distributed
from lib.card import ModelCard
from lib.errors import TrainingStopped
from lib.run import Progress, RunFolder, RunState, StopOnSignal, epochs
from lib.selection import ModelSelection
from lib.weights import hf_name
from model import Bert, SentenceEncoder


@dataclass
class TrainSettings:
    out: Path
    steps: int  # optimiser steps in total
    lr: float
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    warmup_ratio: float = 0.0  # fraction of steps with a linear warm-up
    decay_steps: int | None = None  # linear_schedule_with_warmup reaches 0 here (None: at `steps`; fit's epochs)
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
    higher_is_better: bool = True  # the direction of eval_fn's score (lib.selection.higher_is_better)
    keep_best: bool = False  # save the encoder with the best eval score to out/best
    patience: int = 0  # stop after this many evaluations without a better score (0: never)
    resume: bool = False
    card: Callable[[RunState], ModelCard] | None = None  # the model card of model/ and best/ (README.md)
    save_with_model: Callable[[Path], None] | None = None  # writes the method's own files beside model/ (into OUT)


# sentence-transformers' fit (6.2's, as 0.3's that the official ConSERT code ran): no weight decay on a parameter whose
# name contains any of these, as transformers names it. So MPNet's relative_attention_bias is not decayed (a "bias"),
# and ModernBERT's and DistilBERT's norm weights are (attn_norm, sa_layer_norm: no "LayerNorm" in the name).
NO_DECAY = ("bias", "LayerNorm.bias", "LayerNorm.weight")


def fit_names(objective: nn.Module) -> dict[nn.Parameter, str]:
    """Each parameter (a tied one once) under the name fit's rule reads: inside an encoder (a model.Bert) the
    family's transformers name (weights.hf_name); elsewhere ours, a LayerNorm's as `LayerNorm` (TSDAE's
    cross-attention norm: transformers' BERT decoders name it crossattention.output.LayerNorm)."""
    names: dict[nn.Parameter, str] = {}
    for bert in (m for m in objective.modules() if isinstance(m, Bert)):
        for name, p in bert.named_parameters():
            names.setdefault(p, hf_name(name, bert.cfg.model_type))
    for module_name, module in objective.named_modules():
        if isinstance(module, nn.LayerNorm):
            for name, p in module.named_parameters(recurse=False):
                names.setdefault(p, f"{module_name}.LayerNorm.{name}")
    for name, p in objective.named_parameters():
        names.setdefault(p, name)
    return {p: names[p] for p in objective.parameters()}  # parameters() lists a shared (tied) Parameter once


def make_optimizer(objective: nn.Module, settings: TrainSettings, device: torch.device) -> torch.optim.Optimizer:
    """AdamW (or settings.optimizer_fn's optimiser); no weight decay where sentence-transformers' fit has none
    (NO_DECAY). Tied weights appear once."""
    decay, no_decay = [], []
    for p, name in fit_names(objective).items():
        (no_decay if any(part in name for part in NO_DECAY) else decay).append(p)
    groups = [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if settings.optimizer_fn is not None:
        return settings.optimizer_fn(groups, lr=settings.lr, eps=settings.adam_eps)
    # fused=True: PyTorch's one-pass kernel for the same update, about 4x faster than the default on CPU too
    return torch.optim.AdamW(groups, lr=settings.lr, eps=settings.adam_eps, fused=device.type in ("cpu", "cuda"))


def linear_schedule_with_warmup(step: int, settings: TrainSettings) -> float:
    """transformers' get_linear_schedule_with_warmup, which sentence-transformers' fit and the official ConSERT code
    run (a TrainSettings.lr_factor_fn): a linear warm-up over ceil(steps * warmup_ratio) steps that starts at
    step / warmup = 0, so its first step changes nothing, then linear decay to 0 (settings.schedule is not read) at
    settings.decay_steps, else at the last step. lr_factor's own warm-up ends at (step + 1) / warmup = 1 instead."""
    warmup = math.ceil(settings.steps * settings.warmup_ratio)
    if step < warmup:
        return step / warmup
    total = settings.decay_steps or settings.steps
    return max(0.0, (total - step) / max(1, total - warmup))


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
    scaler = torch.amp.GradScaler(device.type, enabled=settings.amp == "fp16")  # fp16: losses scaled, no underflow
    with RunFolder(settings, encoder, objective, optimizer) as run, StopOnSignal() as stop:
        state = run.load_checkpoint() if settings.resume else RunState(steps=settings.steps)
        selection = ModelSelection(settings, encoder, run)
        trained_out = lambda: state.step >= settings.steps or selection.patience_ran_out(state)
        if state.done and trained_out():  # --resume of a finished run
            run.say_nothing_to_train(state)
            return state
        state.done = False
        with run.saved_when_stopped(state, stop), Progress(state.step, settings.steps, run.writes) as progress:
            for batch, ends_epoch in () if trained_out() else epochs(loader, state):
                t0 = time.perf_counter()
                lr = settings.lr * lr_factor(state.step, settings)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                optimizer.zero_grad(set_to_none=True)
                loss = 0.0
                for part, weight in micro_batches(data.to_device(batch, device), settings.micro_batch, objective):
                    with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                        part_loss = wrapped(part) * weight  # forward: the batch's loss, the weighted sum of its parts'
                    check_finite(part_loss, state, run)
                    scaler.scale(part_loss).backward()  # backward
                    loss += part_loss.item()
                distributed.sum_gradients(wrapped)  # under torchrun, where DDP did not
                record = {"loss": loss, "lr": lr}
                if settings.grad_clip:  # clip: a gradient longer than grad_clip is rescaled to that length
                    scaler.unscale_(optimizer)
                    record["grad_norm"] = nn.utils.clip_grad_norm_(objective.parameters(), settings.grad_clip).item()
                scaler.step(optimizer)  # the optimiser step
                scaler.update()
                state.step, state.step_in_epoch = state.step + 1, state.step_in_epoch + 1
                record = {"step": state.step, **record, **selection.after_step(state, ends_epoch, objective)}
                run.after_step(state, record)  # log.jsonl, and a checkpoint every save_every steps
                progress.update(record, sentences=batch_size(batch), seconds=time.perf_counter() - t0)
                stop.check()  # after Ctrl-C / SIGTERM: KeyboardInterrupt, now that the step is whole
                if trained_out():
                    break
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
    total = float(objective.count(batch)) or 1.0  # no term at all (masked-LM: no chosen position): every loss 0
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
