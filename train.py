"""The training loop TSDAE and ConSERT share, and the command-line pieces of both scripts.

  TrainSettings               every setting of one run
  make_optimizer, lr_factor   AdamW (no decay on biases and LayerNorm weights), warm-up and decay
  train                       the loop: steps, progress, evaluation, checkpoints, resume, NaN, Ctrl-C/SIGTERM
  Progress                    a bar on a terminal, one plain line every 30 s in a log file
  several processes           init_distributed, global_mean, gather_with_local_grad (torchrun)
  command line                add_run_arguments, check_arguments, check_out_folder, HelpFormatter, run_cli

Each method hands `train` an `objective`: a module whose forward(batch) returns the loss of the batch.
A run folder OUT holds model/ (the trained encoder, a Hugging Face folder), checkpoint/ (what --resume
needs: the encoder, the objective, the optimiser, the random state, progress.json), log.jsonl (every
step) and, with an evaluation, best/.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from tqdm.auto import tqdm

import data
from model import ModelLoadError, SentenceEncoder, atomic_dir, pick_device


class TrainingStopped(Exception):
    """Training ended early on purpose (NaN loss). One line for the user; the last good checkpoint is kept."""


class UsageError(Exception):
    """A command line that cannot run (an unavailable device, a run folder in use). One line for the user."""


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
    amp: str = "none"  # "bf16" / "fp16" autocast (fp16 with a GradScaler)
    save_every: int = 0  # also write a resumable checkpoint every N steps (0: only at the end)
    eval_every: int = 0
    eval_fn: Callable[[SentenceEncoder], float] | None = None  # e.g. STS-benchmark dev Spearman
    keep_best: bool = False  # save the encoder with the best eval score to out/best
    patience: int = 0  # stop after this many evaluations without a better score (0: never)
    resume: bool = False


def make_optimizer(objective: nn.Module, s: TrainSettings, device: torch.device) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and LayerNorm weights (BERT's recipe). Tied weights appear once."""
    decay, no_decay = [], []
    for p in objective.parameters():  # parameters() lists a shared (tied) Parameter once
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused=True: PyTorch's one-pass kernel for the same update, about 4x faster than the default on CPU too
    return torch.optim.AdamW(groups, lr=s.lr, eps=s.adam_eps, fused=device.type in ("cpu", "cuda"))


def lr_factor(step: int, s: TrainSettings) -> float:
    warmup = int(s.steps * s.warmup_ratio)
    if step < warmup:
        return (step + 1) / warmup
    if s.schedule == "linear":
        return max(0.0, (s.steps - step) / max(1, s.steps - warmup))
    return 1.0


# ----------------------------------------------------------------------------
# Checkpoints: OUT/checkpoint holds everything --resume needs, written atomically


def save_training_state(folder: Path, encoder: SentenceEncoder, objective: nn.Module, optimizer, progress: dict) -> None:
    with atomic_dir(folder) as tmp:
        encoder.save_pretrained(tmp / "encoder")  # the encoder so far, loadable like any model folder
        torch.save({
            "objective": objective.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        }, tmp / "training_state.pt")
        (tmp / "progress.json").write_text(json.dumps(progress) + "\n", encoding="utf-8")


def load_training_state(folder: Path, objective: nn.Module, optimizer) -> dict:
    path = folder / "training_state.pt"
    if not path.exists():
        raise ModelLoadError(f"--resume: no checkpoint at {folder}")
    # weights_only: a checkpoint from someone else can hold tensors and numbers, never code to run
    state = torch.load(path, map_location="cpu", weights_only=True)
    try:
        objective.load_state_dict(state["objective"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError) as e:  # another --model, --untie, view, --plain or code version
        reason = str(e).strip().splitlines()[0]
        raise ModelLoadError(f"--resume: the checkpoint at {folder} does not fit this run's settings ({reason})") from None
    torch.set_rng_state(state["rng"])
    if state["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return read_progress(folder)


def read_progress(checkpoint: Path) -> dict | None:
    """The progress.json of a checkpoint folder: step, steps, epoch, step_in_epoch, best, evals_since_best."""
    try:
        return json.loads((checkpoint / "progress.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def finished(out: Path) -> bool:
    """Whether the run in `out` trained to its end (an interrupted run has a checkpoint and a model too)."""
    progress = read_progress(out / "checkpoint")
    return progress is not None and progress.get("done", False)


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# ----------------------------------------------------------------------------
# Several processes (torchrun): each holds part of every batch. Objectives return the loss of the
# WHOLE global batch, differentiable in this process's part; DDP then sums the parts' gradients.


def init_distributed() -> tuple[int, int]:
    """(rank, world_size). Under torchrun (RANK/WORLD_SIZE set) joins the process group: NCCL on CUDA, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count over the global batch, from this process's `total` and `count` (on one process: total / count).
    The other processes' sums enter as constants: each process differentiates its own part."""
    if world_size() == 1:
        return total / count
    others = torch.stack([total.detach().float(), count.float()])
    dist.all_reduce(others)  # (global sum, global count)
    return (total + (others[0] - total.detach())) / others[1]


def gather_with_local_grad(x: torch.Tensor) -> torch.Tensor:
    """Every process's rows of `x` (N_r, ...), concatenated in rank order (on one process: x). Only this
    process's rows carry gradient; each differentiates its own part (see global_mean). Shares may differ by one."""
    if world_size() == 1:
        return x
    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(world_size())]
    dist.all_gather(sizes, torch.tensor([len(x)], device=x.device))
    longest = int(max(sizes))
    parts = [torch.empty(longest, *x.shape[1:], dtype=x.dtype, device=x.device) for _ in sizes]
    padded = torch.cat([x.detach(), x.new_zeros(longest - len(x), *x.shape[1:])])  # all_gather needs equal shapes
    dist.all_gather(parts, padded)
    parts = [part[: int(n)] for part, n in zip(parts, sizes)]
    parts[dist.get_rank()] = x
    return torch.cat(parts)


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
        self.loss = self.rate = self.step_time = None
        self.seen = 0  # steps of this process so far
        self.score = None
        self.last_line = time.monotonic()
        self.bar = None
        if enabled and sys.stdout.isatty() and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=step, desc="train", dynamic_ncols=True, mininterval=0.5,
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    def update(self, loss: float, sentences: int, seconds: float, score: float | None = None) -> None:
        self.step += 1
        self.seen += 1
        self.score = score if score is not None else self.score
        self.loss = loss if self.loss is None else (1 - self.SMOOTHING) * self.loss + self.SMOOTHING * loss
        if self.seen > self.SKIP:
            self.step_time = seconds if self.step_time is None else (
                (1 - self.SMOOTHING) * self.step_time + self.SMOOTHING * seconds)
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


# ----------------------------------------------------------------------------
# The loop


def train(encoder: SentenceEncoder, objective: nn.Module, loader: torch.utils.data.DataLoader, s: TrainSettings,
          device: torch.device) -> dict:
    """AdamW steps over `loader` (whose batch_sampler is a data.BucketBatchSampler) until s.steps, with
    progress, evaluation, periodic checkpoints, resume, NaN and Ctrl-C/SIGTERM handling. Returns the progress
    dict. Under torchrun only rank 0 shows progress, logs, evaluates and writes files."""
    objective.to(device).train()
    optimizer = make_optimizer(objective, s, device)
    progress = {"step": 0, "steps": s.steps, "epoch": 0, "step_in_epoch": 0, "best": None, "evals_since_best": 0,
                "done": False}
    ckpt = s.out / "checkpoint"
    if s.resume:
        progress.update(load_training_state(ckpt, objective, optimizer), steps=s.steps, done=False)
    world = world_size()
    main_process = world_rank() == 0
    step_fn = objective
    if world > 1:  # one gradient all-reduce per parameter; a tied weight is one parameter
        step_fn = nn.parallel.DistributedDataParallel(objective, device_ids=[device] if device.type == "cuda" else None)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(s.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=s.amp == "fp16")
    s.out.mkdir(parents=True, exist_ok=True)
    # a fresh run starts a fresh log; --resume continues the old one
    log = open(s.out / "log.jsonl", "a" if s.resume else "w", encoding="utf-8") if main_process else None
    sampler = loader.batch_sampler
    shown = Progress(progress["step"], s.steps, enabled=main_process)

    def save_checkpoint() -> None:
        if main_process:
            save_training_state(ckpt, encoder, objective, optimizer, progress)

    # Ctrl-C (SIGINT), and the SIGTERM of `kill`, `timeout` and batch schedulers: finish the step, save, stop.
    # A second signal stops at once (still saving: mid-step, the weights are those of the last whole step).
    stop_requested = []

    def request_stop(signum, frame):
        if stop_requested:
            raise KeyboardInterrupt
        stop_requested.append(signum)

    previous_handlers = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while progress["step"] < s.steps and not progress["done"]:
            sampler.set_epoch(progress["epoch"], skip=progress["step_in_epoch"])
            for batch in loader:
                t0 = time.perf_counter()
                for group in optimizer.param_groups:
                    group["lr"] = s.lr * lr_factor(progress["step"], s)
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    loss = step_fn(to_device(batch, device))
                if not torch.isfinite(loss):
                    raise TrainingStopped(
                        f"loss became {loss.item()} at step {progress['step'] + 1}; stopped. The last good checkpoint "
                        f"is in {ckpt if ckpt.exists() else '(none yet)'}; try a lower --lr or --amp none"
                    )
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss * world).backward()  # DDP averages gradients over processes: undo the 1/world
                if s.grad_clip:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(objective.parameters(), s.grad_clip)
                scaler.step(optimizer)
                scaler.update()
                progress["step"] += 1
                progress["step_in_epoch"] += 1
                record = {"step": progress["step"], "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"]}
                if main_process and s.eval_fn and s.eval_every and progress["step"] % s.eval_every == 0:
                    record["eval"] = evaluate_and_keep_best(encoder, s, progress)
                    objective.train()
                sentences = world * len(next(iter(batch.values())))
                shown.update(record["loss"], sentences, time.perf_counter() - t0, record.get("eval"))
                if log:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                if s.save_every and progress["step"] % s.save_every == 0:
                    save_checkpoint()
                if stop_requested:
                    raise KeyboardInterrupt
                if progress["step"] >= s.steps or stop_early(s, progress):
                    break
            else:  # the epoch ran out
                progress["epoch"] += 1
                progress["step_in_epoch"] = 0
            progress["done"] = progress["step"] >= s.steps or stop_early(s, progress)
    except KeyboardInterrupt:
        shown.close()
        for sig in previous_handlers:  # saving takes a second: a further Ctrl-C must not break it off
            signal.signal(sig, signal.SIG_IGN)
        if main_process:
            save_checkpoint()
            encoder.save_pretrained(s.out / "model")
            print(f"\ninterrupted at step {progress['step']} of {s.steps}: the encoder so far is in {s.out / 'model'}; "
                  f"continue with --resume", file=sys.stderr)
        raise SystemExit(130)
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        shown.close()
        if log:
            log.close()
    if main_process:
        save_checkpoint()  # progress.json now says "done": a finished stage of a two-stage run is not redone
        encoder.save_pretrained(s.out / "model")
    if progress["step"] < s.steps and main_process:
        print(f"stopped early at step {progress['step']}: no better dev score in {s.patience} evaluations")
    return progress


def evaluate_and_keep_best(encoder: SentenceEncoder, s: TrainSettings, progress: dict) -> float:
    score = s.eval_fn(encoder)
    if progress["best"] is None or score > progress["best"]:
        progress["best"], progress["evals_since_best"] = score, 0
        if s.keep_best:
            encoder.save_pretrained(s.out / "best")
    else:
        progress["evals_since_best"] += 1
    return score


def stop_early(s: TrainSettings, progress: dict) -> bool:
    return s.patience > 0 and progress["evals_since_best"] >= s.patience


# ----------------------------------------------------------------------------
# The command-line pieces both training scripts share


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error: "tsdae.py: error: ... (see --help)" instead of the usage block first."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help with each default shown once: added as "(default: X)" unless the help text already says it,
    and left out for flags, required arguments and defaults of None."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, argparse.SUPPRESS) or action.required
                or isinstance(action, argparse._HelpAction)):
            return text
        return f"{text} (default: {default})"


def add_run_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, out: str) -> None:
    """Flags for how `train` runs, on a parser or argument group."""
    p.add_argument("--out", default=out, help="run folder: model/ (the trained encoder), checkpoint/ (to resume), "
                                              "log.jsonl (every step)")
    p.add_argument("--resume", action="store_true", help="continue the run in OUT from its checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in OUT")
    p.add_argument("--seed", type=int, default=0, help="seed of the batch order, the noise or views, and dropout")
    p.add_argument("--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda, cuda:1, ...")
    p.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"],
                   help="autocast precision (for CUDA; fp16 adds a gradient scaler)")
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader worker processes (default: 2 on CUDA, 0 on CPU, where they compete for the cores)")
    p.add_argument("--save-every", type=int, default=1000, help="write a resumable checkpoint every N steps (0: at the end)")
    p.add_argument("--plain", action="store_true",
                   help="run the plain reading path (model.py, the method's file) instead of fast.py's equal, faster pieces")


def check_arguments(p: argparse.ArgumentParser, args: argparse.Namespace, positive: tuple[str, ...] = (),
                    at_least_one: tuple[str, ...] = (), ratios: tuple[str, ...] = ()) -> None:
    """One line per mistake (argparse's own exit code 2): `positive` flags must be > 0, `at_least_one`
    >= 1 (None = not given), `ratios` in [0, 1)."""
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    for name in positive:
        if not getattr(args, name) > 0:
            p.error(f"{flag(name)} must be > 0 (got {getattr(args, name)})")
    for name in at_least_one:
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"{flag(name)} must be at least 1 (got {value})")
    for name in ratios:
        if getattr(args, name) is not None and not 0.0 <= getattr(args, name) < 1.0:
            p.error(f"{flag(name)} must be in [0, 1) (got {getattr(args, name)})")
    if args.workers is not None and args.workers < 0:
        p.error(f"--workers must be 0 or more (got {args.workers})")
    if args.save_every < 0:
        p.error(f"--save-every must be 0 or more (got {args.save_every})")


RUN_FILES = ("model", "checkpoint", "best", "stage1", "log.jsonl")  # what a run leaves in OUT


def check_out_folder(out: Path, resume: bool, overwrite: bool) -> None:
    """A new run never silently replaces an old one: OUT must be free, or --resume / --overwrite given.
    --overwrite removes the old run's files; --resume needs a checkpoint to continue from."""
    old = [name for name in RUN_FILES if (out / name).exists()]
    if resume:
        if not (out / "checkpoint").exists() and not (out / "stage1" / "checkpoint").exists():
            raise UsageError(f"--resume: {out} holds no checkpoint to continue from")
    elif old and not overwrite:
        raise UsageError(f"{out} already holds a run ({', '.join(old)}); pass --resume to continue it, "
                         f"--overwrite to replace it, or another --out")
    elif old and world_rank() == 0:
        for name in old:
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def world_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def device_for(name: str) -> torch.device:
    """--device as a torch.device, with a one-line error for a device this machine does not have."""
    try:
        device = pick_device(name)
    except RuntimeError as e:  # torch's own parse error, e.g. "--device gpu"
        raise UsageError(f"--device {name}: {str(e).splitlines()[0]}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("CUDA is not available on this machine; use --device cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: only cpu and cuda are supported")
    return device


def run_cli(main: Callable[[], int]) -> None:
    """A script's entry point: a user's mistake (bad corpus, bad model folder, NaN loss) ends in one line."""
    try:
        sys.exit(main())
    except (data.CorpusError, ModelLoadError, TrainingStopped, UsageError) as e:
        sys.exit(f"error: {e}")
