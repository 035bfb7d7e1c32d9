"""The run folder and what goes on around the training loop (train.py): where a run stands, what it writes,
Ctrl-C, and the progress a person sees.

  RunState      where a run stands (progress.json)
  epochs        the loader's batches, epoch after epoch, from where a run stands
  RunFolder     OUT: checkpoint/ (what --resume needs), model/, best/, log.jsonl
  read_progress, finished   where the run in a folder stands, and whether it trained to its end
  StopOnSignal  Ctrl-C / SIGTERM: finish the step, save, stop
  Progress      a bar on a terminal, one plain line every 100 steps or 30 s in a log file
"""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from lib import distributed
from lib.card import ModelCard
from lib.errors import CorpusError, ModelLoadError, TrainingStopped
from lib.weights import atomic_dir, write_atomically



# ----------------------------------------------------------------------------
# What the run folder needs of the encoder and of the loop's settings (model.SentenceEncoder and train.TrainSettings
# have these; the floors above are not imported here)


class Encoder(Protocol):
    """An encoder that saves itself as a model folder (model.SentenceEncoder)."""

    def save_pretrained(self, out_dir: str | Path, card: ModelCard | None = None) -> None: ...


class RunSettings(Protocol):
    """What the run folder reads of the loop's settings (train.TrainSettings has these fields)."""

    out: Path
    steps: int
    resume: bool
    save_every: int
    patience: int
    card: Callable[[RunState], ModelCard] | None
    save_with_model: Callable[[Path], None] | None


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
# The run folder


class RunFolder:
    """OUT holds model/ (the trained encoder, a Hugging Face folder), checkpoint/ (what --resume needs: the
    encoder, the objective, the optimiser, the random state, progress.json), log.jsonl (every step) and, with an
    evaluation, best/. Every folder is written atomically. Under torchrun only the main process writes."""

    def __init__(self, settings: RunSettings, encoder: Encoder, objective: nn.Module, optimizer):
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
            self.encoder.save_pretrained(self.out / name,
                                         card=self.settings.card(state) if self.settings.card else None)
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
            try:
                torch.save({
                    "objective": self.objective.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                }, tmp / "training_state.pt")
            except RuntimeError as e:  # torch's file writer reports a failed write (a full disk) so, not as OSError
                raise OSError(f"training_state.pt: the write failed, is the disk full? ({str(e).splitlines()[0]})") \
                    from None
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

    @contextlib.contextmanager
    def saved_when_stopped(self, state: RunState, stop: StopOnSignal) -> Iterator[None]:
        """The steps inside, stopped before their end: after Ctrl-C or SIGTERM (StopOnSignal's KeyboardInterrupt,
        between two steps) the run is saved as it stands and the script exits (130), after a second one (StopNow,
        mid-step) it exits saving nothing; when the corpus file changed
        under the run (CorpusError: its lines are no longer the ones counted) it is saved and stops in one line."""
        try:
            yield
        except StopNow:
            if self.writes:
                print(f"\nstopped at once, during step {state.step + 1}: nothing saved; --resume continues from the "
                      f"last checkpoint ({self.checkpoint})", file=sys.stderr)
            raise SystemExit(130)
        except KeyboardInterrupt:
            stop.ignore()  # saving takes a second: a further Ctrl-C must not break it off
            if self.writes:
                self.save_progress(state)
                print(f"\ninterrupted at step {state.step} of {state.steps}: the encoder so far is in "
                      f"{self.out / 'model'}; continue with --resume", file=sys.stderr)
            raise SystemExit(130)
        except CorpusError as e:
            self.save_progress(state)
            reason = str(e).strip().splitlines()[-1].split("CorpusError: ")[-1]  # a DataLoader worker's, too
            raise TrainingStopped(f"{reason}; stopped after step {state.step}, saved in {self.checkpoint}") from None

    def say_nothing_to_train(self, state: RunState) -> None:
        """--resume of a run that has trained to its end: nothing is trained, nothing is written."""
        if self.writes:
            print(f"{self.out} finished at step {state.step} of {state.steps}: nothing to train (--resume with a "
                  "larger --steps goes on)")

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


class StopNow(KeyboardInterrupt):
    """A second Ctrl-C or SIGTERM: the step under way is broken off, so nothing of it is saved."""


class StopOnSignal:
    """Ctrl-C (SIGINT), and the SIGTERM of `kill`, `timeout` and batch schedulers: the loop finishes its step,
    then check() raises KeyboardInterrupt and the loop saves and stops. A second signal stops at once (StopNow),
    saving nothing: a step broken off may have moved some weights and not others, and --resume continues from the
    last checkpoint."""

    def __enter__(self) -> StopOnSignal:
        self.requested = False
        self.previous = {sig: signal.signal(sig, self.request) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def request(self, signum, frame) -> None:
        if self.requested:
            raise StopNow
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
    a CI job): one plain line every EVERY steps or SECONDS seconds, whichever comes first. The ETA ignores the
    first steps, which are slow (memory being allocated for the first time). A context manager: it closes its bar."""

    EVERY, SECONDS = 100, 30.0  # the plain lines: every 100 steps, or after 30 s without one
    SKIP = 3  # steps left out of the speed estimate
    SMOOTHING = 0.05  # weight of the newest step in the running averages

    def __init__(self, step: int, total: int, enabled: bool):
        self.step, self.total, self.enabled = step, total, enabled
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
        elif (self.step % self.EVERY == 0 or self.step == self.total
              or time.monotonic() - self.last_line >= self.SECONDS):
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

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
