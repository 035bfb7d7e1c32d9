"""The command-line toolkit of the scripts: commands/ (the runs that `python tsdae.py`, `python consert.py` and
`python finetune.py` hand over to, and their shared steps), baselines/mlm.py, evaluate.py, examples/ and bench/.
train.py, model.py, data.py, the methods' classes and the rest of lib/ read no command line (a method file's
`__main__` only hands over to its commands/*_train.py).

  ArgumentParser, HelpFormatter   argparse with one-line errors, and --help with each default shown once
  add_run_arguments               the flags every training run has (--out, --resume, --device, --amp, ...)
  add_length_arguments, add_selection_arguments   --epochs and --steps; evaluation during training
  parse_args, check_arguments     argparse, then numbers in range, one line per mistake
  check_out_folder                a run folder is never silently reused
  model_card                      what a run's saved models say of how they were made (README.md, card.py)
  non_default_settings, command_line   the run's arguments as the card lists them
  device                          --device as a torch.device, with one-line errors
  UsageError                      a run that cannot go on as asked (lib/errors.py, for every layer)
  run                             a script's entry point: a user's mistake ends in one line, not a traceback
"""
from __future__ import annotations

import argparse
import functools
import os
import shlex
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Callable, Sequence

import torch

from lib import card
from lib import weights
from lib import distributed
from lib import taskfiles
from lib.weights import ModelLoadError
from lib.errors import CorpusError, UsageError, one_line


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error: "tsdae.py: error: ... (see --help)" instead of the usage block first, and
    --help as HelpFormatter writes it."""

    def __init__(self, *args, formatter_class: type[argparse.HelpFormatter] | None = None, **kwargs):
        super().__init__(*args, formatter_class=formatter_class or HelpFormatter, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help with each default shown once: added as "(default: X)" unless the help text already says it,
    and left out for flags, required arguments and defaults of None. The description keeps its paragraphs (a lab's
    docstring), each filled to the terminal's width, and indented lines (a diagram) as they are."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = text.strip("\n").split("\n\n")
        return "\n\n".join(textwrap.indent(paragraph, indent) if paragraph.startswith(" ") else
                           textwrap.fill(" ".join(paragraph.split()), width, initial_indent=indent,
                                         subsequent_indent=indent) for paragraph in paragraphs)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default is None or default is False or default == argparse.SUPPRESS or action.required
                or isinstance(action, argparse._HelpAction)):
            return text
        return f"{text} (default: {default})"


def add_run_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, out: str, inputs: str,
                      fast_path: bool = True) -> None:
    """Flags for how a training run goes, on a parser or argument group; --bad-lines says what it does with the
    lines of its text `inputs` that are not UTF-8. --plain only where the run has a `fast_path` to leave."""
    p.add_argument("--bad-lines", default="error", choices=["error", "skip", "replace"],
                   help=f"what to do with {inputs} that are not UTF-8")
    p.add_argument("--out", default=out, help="run folder: model/ (the trained encoder), checkpoint/ (to resume), "
                                              "log.jsonl (every step)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in OUT from its checkpoint, with the same flags; --steps may grow. A "
                        "finished run trains nothing")
    p.add_argument("--overwrite", action="store_true", help="replace the run already in OUT")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the batch order, dropout, and what a method draws (TSDAE's noise, ConSERT's views, "
                        "finetune's --sample)")
    p.add_argument("--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda, cuda:1, ...")
    p.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"],
                   help="autocast precision (for CUDA; fp16 adds a gradient scaler)")
    p.add_argument("--workers", type=int, default=None,
                   help="DataLoader worker processes (default: 2 on CUDA, 0 on CPU, "
                        "where they compete for the cores)")
    p.add_argument("--save-every", type=int, default=1000,
                   help="write a resumable checkpoint every N steps (0: at the end)")
    if fast_path:
        p.add_argument("--plain", action="store_true", help="run the plain reading path (model.py, the method's "
                                                            "file) instead of fast.py's faster pieces "
                                                            "(equal with dropout off; "
                                                            "with it, other draws of its masks)")


def checkpoint_families() -> str:
    """The families --model takes (lib/weights.py's ARCHITECTURES), for its help: "BERT, RoBERTa, ... or ModernBERT"."""
    *others, last = weights.FAMILY_NAMES.values()
    return f"{', '.join(others)} or {last}"


def add_length_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, passes_over: str,
                         paper: str = "") -> None:
    """--epochs and --steps: how long a run trains (`paper`: the paper's own number of steps, said in --help)."""
    p.add_argument("--epochs", type=int, default=1, help=f"passes over {passes_over} (ignored when --steps is given)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"optimiser steps in total "
                        f"(default: the epochs' batches{f'; the paper: {paper}' if paper else ''})")


def add_selection_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, eval_every: int, what: str) -> None:
    """Flags for evaluation during training: which score the log, best/ and early stopping use."""
    p.add_argument("--eval-data", default=None, help=f"evaluation data folder: evaluate --eval-task during training, "
                                                     f"keep the best encoder in OUT/best ({what})")
    p.add_argument("--eval-task", default=None,
                   help="the dev score, a task with dev data of its own: stsb-dev; useb-askubuntu, useb-cqadupstack, "
                        "useb-scidocs on USEB's valid split (the TSDAE paper's point, §4); "
                        "your own dev file: rerank:PATH, "
                        "sts:PATH (scored pairs), pairs:PATH (0/1 pairs), see evaluate.py; "
                        "heldout-loss, heldout-uniformity: no labels needed. Test-only tasks (stsb, sickr, "
                        "useb-twitterpara, ...) are refused (default: stsb-dev with --eval-data, else heldout-loss "
                        "with --heldout)")
    p.add_argument("--heldout", type=int, default=0, metavar="N",
                   help="keep N random lines of the data out of training; each evaluation logs the training loss on "
                        "them (noise, views and dropout fixed) and their uniformity, lower is better: a dev signal "
                        "without labels (docs/evaluation.md measures how well it tracks STS-b)")
    p.add_argument("--eval-every", type=int, default=eval_every,
                   help="steps of each epoch between evaluations, and one at each epoch's end")
    p.add_argument("--log-alignment", action="store_true",
                   help="with --eval-data: also log alignment and uniformity on STS-b dev at each evaluation "
                        "(Wang & Isola 2020; evaluate.py --tasks align-uniform)")


def model_card(method: str, parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None,
               sentences: Sequence[str], pooling: str, lr: float, corpus: str | None = None) -> Callable:
    """The model card of a run's saved models, as a function of where the run stands (steps, best dev score)."""
    base = args.model or weights.default_model_path()
    fixed = dict(method=method, base_model=str(base), pooling=pooling, corpus=str(corpus or args.corpus),
                 batch_size=args.batch_size, lr=lr, command=command_line(argv),
                 non_default_settings=non_default_settings(parser, args),
                 dev_metric=args.eval_task if evaluates(args) else None)

    @functools.cache
    def read_at_the_first_save() -> dict:  # not before the first step: a corpus of 10M lines takes about 20 s
        try:
            lines, sha256 = card.corpus_fingerprint(sentences)
        except CorpusError:  # the file changed under the run (which stops): the card gives no fingerprint
            lines = sha256 = None
        return dict(corpus_lines=lines, corpus_sha256=sha256, license=card.base_license(weights.resolve_model(base)))

    return lambda state: card.ModelCard(**fixed, **read_at_the_first_save(), steps=state.step, dev_score=state.best)


def non_default_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, object]:
    """{flag: value} for each argument of an argparse parser whose value in `args` differs from its default,
    in the parser's order (a positional argument by its name). Paths become strings."""
    settings = {}
    for action in parser._actions:  # argparse keeps every argument here, groups included
        if not action.dest or not hasattr(args, action.dest) or action.dest == "help":
            continue
        value, default = getattr(args, action.dest), parser.get_default(action.dest)
        if isinstance(default, str) and action.type is not None and not isinstance(value, str):
            try:  # argparse passes a string default through `type`, as if it were typed
                default = action.type(default)
            except (TypeError, ValueError):
                pass
        if value != default:
            name = max(action.option_strings, key=len) if action.option_strings else action.dest
            settings[name] = str(value) if isinstance(value, Path) else value
    return settings


def command_line(argv: list[str] | None = None) -> str:
    """`python SCRIPT ARGS` as a shell would take it back: sys.argv, or the script's name and `argv` when a
    main(argv) was called from Python."""
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", sys.argv[0], *map(str, args)])


def parse_args(p: argparse.ArgumentParser, argv: list[str] | None, **ranges: tuple[str, ...]) -> argparse.Namespace:
    """p.parse_args(argv), then each number in its range (check_arguments' positive=, at_least_one=, ratios=,
    not_negative=)."""
    args = p.parse_args(argv)
    check_arguments(p, args, **ranges)
    return args


def check_arguments(p: argparse.ArgumentParser, args: argparse.Namespace, positive: tuple[str, ...] = (),
                    at_least_one: tuple[str, ...] = (), ratios: tuple[str, ...] = (),
                    not_negative: tuple[str, ...] = ()) -> None:
    """One line per mistake (argparse's own exit code 2): `positive` flags must be > 0, `at_least_one`
    >= 1, `not_negative` >= 0, `ratios` in [0, 1). A flag that is None was not given and is not checked."""
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    given = lambda name: getattr(args, name, None) is not None
    for name in filter(given, positive):
        if not getattr(args, name) > 0:
            p.error(f"{flag(name)} must be > 0 (got {getattr(args, name)})")
    for name in filter(given, at_least_one):
        if getattr(args, name) < 1:
            p.error(f"{flag(name)} must be at least 1 (got {getattr(args, name)})")
    for name in filter(given, (*not_negative, "workers", "save_every")):
        if getattr(args, name) < 0:
            p.error(f"{flag(name)} must be 0 or more (got {getattr(args, name)})")
    for name in filter(given, ratios):
        if not 0.0 <= getattr(args, name) < 1.0:
            p.error(f"{flag(name)} must be in [0, 1) (got {getattr(args, name)})")


def evaluates(args: argparse.Namespace) -> bool:
    """Whether the run evaluates --eval-task during training: a held-out task, a file of your own (rerank:PATH,
    sts:PATH, pairs:PATH), or any task with --eval-data."""
    return bool(args.eval_task) and (bool(args.eval_data) or args.eval_task.startswith("heldout-")
                                     or taskfiles.own_file(args.eval_task) is not None)


def check_selection(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--eval-task's default (stsb-dev with --eval-data, else heldout-loss with --heldout, else nothing is
    evaluated), and the held-out tasks' need for --heldout. Which tasks have dev data: experiment.check_dev_task."""
    if args.heldout < 0:
        p.error(f"--heldout must be 0 or more (got {args.heldout})")
    if args.eval_task is None:
        args.eval_task = "stsb-dev" if args.eval_data else "heldout-loss" if args.heldout else None
    if (args.eval_task or "").startswith("heldout-") and not args.heldout:
        p.error(f"--eval-task {args.eval_task} needs --heldout N, the corpus lines to keep out of training (e.g. 1000)")
    if args.eval_task is None and args.eval_every != p.get_default("eval_every"):
        p.error("--eval-every would change nothing: nothing is evaluated (no --eval-data, --heldout or --eval-task)")
    if args.log_alignment and not args.eval_data:
        p.error("--log-alignment logs on STS-b dev in --eval-data: give --eval-data too")


RUN_FILES = ("model", "checkpoint", "best", "stage1", "decoder", "log.jsonl")  # what a run leaves in OUT


def check_out_folder(out: Path, resume: bool, overwrite: bool) -> None:
    """A new run never silently replaces an old one: OUT must be free, or --resume / --overwrite given.
    --overwrite removes the old run's files; --resume needs a checkpoint to continue from."""
    if resume:  # a write killed between its two renames: its folder back in place (weights.recover)
        for folder in (out, out / "stage1"):
            for name in ("checkpoint", "model", "best", "decoder"):
                weights.recover(folder / name)
    old = [name for name in RUN_FILES if (out / name).exists()]
    if resume:
        if not (out / "checkpoint").exists() and not (out / "stage1" / "checkpoint").exists():
            raise UsageError(f"--resume: {out} holds no checkpoint to continue from")
    elif old and not overwrite:
        raise UsageError(f"{out} already holds a run ({', '.join(old)}); pass --resume to continue it, "
                         f"--overwrite to replace it, or another --out")
    elif old and distributed.rank() == 0:
        for name in old:
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def device(name: str = "auto") -> torch.device:
    """--device as a torch.device: auto = CUDA when available (under torchrun this process's own GPU), else CPU.
    A device this machine does not have is a one-line UsageError."""
    if name == "auto":
        name = f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu"
    try:
        chosen = torch.device(name)
    except RuntimeError as e:  # torch's own parse error, e.g. "--device gpu"
        raise UsageError(f"--device {name}: {str(e).splitlines()[0]}") from None
    if chosen.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: only cpu and cuda are supported")
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("CUDA is not available on this machine; use --device cpu")
    if chosen.type == "cuda" and (chosen.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return chosen


def cpu_has_bf16_units(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU multiplies bf16 matrices in hardware (the avx512_bf16 or AMX flags of /proc/cpuinfo);
    None where that cannot be read (not Linux). Without them bf16 matmuls are emulated, slower than fp32."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    flags = {flag for line in cpuinfo.splitlines() if line.startswith("flags")
             for flag in line.split(":", 1)[1].split()}
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def say_if_amp_is_slow(device: torch.device, amp: str, cpuinfo: str | None = None) -> None:
    """--amp bf16 on a CPU without bf16 units trains slower than fp32: say so in one line (the run goes on)."""
    if device.type == "cpu" and amp == "bf16" and cpu_has_bf16_units(cpuinfo) is False:
        print("note: this CPU has no bf16 matrix units (neither avx512_bf16 nor AMX), so --amp bf16 emulates them "
              "and trains slower than fp32 (bench/bench.py's matmul peak rows measure both)", file=sys.stderr)


def run(main: Callable[[], int]) -> None:
    """A script's entry point: a user's mistake (bad corpus, bad model folder, NaN loss) ends in one line."""
    try:
        sys.exit(main())
    except (ModelLoadError, UsageError) as e:  # a UsageError: CorpusError and TrainingStopped too
        sys.exit(f"error: {one_line(str(e))}")  # an echoed 4 KB header cut to its start and its end
    except NotImplementedError as e:  # a student copy's blanked exercise (assignments.py) on the training path
        if not str(e).startswith("Exercise "):  # torch's own (an operation it lacks): a bug, shown whole
            raise
        sys.exit(f"error: not written yet: {e}")
    except BrokenPipeError:  # the output piped into a reader that stopped early (`| head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
