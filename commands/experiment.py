"""What every experiment does, written once: above train.py and the methods, below the scripts. The `main` of
tsdae_train.py, consert_train.py, finetune_train.py (beside it) and baselines/mlm.py reads its inputs, then calls these
steps in about this order, each the ones it needs (the masked-LM baseline keeps nothing out and selects nothing), then
train.train itself:

  check_run         before anything is loaded: --eval-task has dev data, --device exists, OUT is free
  hold_out          --heldout N: the items kept out of training, said in one line
  load_encoder      --model (default: the shipped all-MiniLM-L6-v2) as a SentenceEncoder
  loader            the training batches (data.make_loader) from the common flags
  held_out_signals  the kept-out items in fixed batches: the dev signals of lib.selection.HeldOut
  settings          train.TrainSettings: the method's recipe, and what the common flags say (FIT: sentence-
                    transformers' recipe, which fine-tuning follows; CONSERT_FIT: the official ConSERT code's,
                    every ConSERT run's; its --optimizer official swaps in the code's own AdamW and warm-up)
  say_start, say_best, say_done   the run's first line, a stage's best, the last line

and what model selection reads (--eval-task; lib/selection.py keeps the best encoder and stops early):
  DEV_TASKS, check_dev_task   the scores selection may read: a task's dev data, never its test data
  dev_score, higher_is_better  --eval-task's score of an encoder, and its direction
  training_evaluation         what the selection flags (lib/cli.add_selection_arguments) ask each evaluation for

What is left in each script is its own: its flags, its objective, its batches (and ConSERT's stage table).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Sequence

import torch

import data
import evaluate
import train
from lib import cli, corpus, datafiles, distributed, selection, taskfiles
from lib.errors import CorpusError, UsageError
from lib.weights import default_model_path
from model import Bert, SentenceEncoder

# sentence-transformers' fit (SentenceTransformer.fit), which finetune.py follows: PyTorch's AdamW (eps 1e-8) with
# weight decay 0.01, transformers' linear warm-up from lr 0 over ceil(10%) of the steps (warmup_steps as its examples
# set it), then linear decay to 0; gradients clipped to norm 1
FIT = dict(weight_decay=0.01, adam_eps=1e-8, warmup_ratio=0.1, schedule="linear", grad_clip=1.0,
           lr_factor_fn=train.linear_schedule_with_warmup)
# ConSERT's: fit as the official ConSERT code ran it (sentence-transformers 0.3: AdamW with eps 1e-6), with
# train.lr_factor's warm-up over int(10%) of the steps; --optimizer official puts its optimiser and warm-up back
CONSERT_FIT = dict(weight_decay=0.01, adam_eps=1e-6, warmup_ratio=0.1, schedule="linear", grad_clip=1.0)


def check_run(args: argparse.Namespace) -> torch.device:
    """What every run checks once its inputs are read, before a model is loaded or a file written: --eval-task has
    dev data (and, with --eval-data, its files are there; a task of that folder without it is refused, as it would
    evaluate nothing), --device is one this machine has, OUT holds no run (or --resume / --overwrite says what to
    do with it). Returns the device."""
    check_dev_task(args.eval_task, args.eval_data)
    if args.eval_task and not cli.evaluates(args):
        raise UsageError(f"--eval-task {args.eval_task} reads its dev data from --eval-data DIR (`python evaluate.py "
                         "--fetch-data DIR` fills one): without it nothing would be evaluated")
    device = cli.device(args.device)
    cli.say_if_amp_is_slow(device, args.amp)
    cli.check_out_folder(Path(args.out), args.resume, args.overwrite)
    return device


def hold_out(items: Sequence, args: argparse.Namespace, what: str) -> tuple[Sequence, list]:
    """--heldout N: (the items that train, the N kept out; lib.corpus.hold_out), said in one line: N `what` kept out,
    and how many more left out of training because they repeat one of their sentences."""
    trained, kept_out = corpus.hold_out(items, args.heldout)
    if kept_out and distributed.rank() == 0:
        print(f"--heldout {args.heldout}: {len(kept_out)} {what} kept out of training, and "
              f"{len(items) - len(kept_out) - len(trained)} more that repeat one of their sentences")
    return trained, kept_out


def load_encoder(model: str | Path | None, pooling: str | None, max_length: int | None,
                 mlm_head: bool = False, bert_class: type[Bert] = Bert) -> SentenceEncoder:
    """--model's encoder (a folder or a Hub id; None: the shipped all-MiniLM-L6-v2), its BERT built as `bert_class`
    (model.Bert, or with --plain off one of speedups/fast.py's subclasses). A checkpoint's masked-LM head is kept
    only with `mlm_head` (baselines/mlm.py trains it; TSDAE's decoder starts its LM head from it): the encoder
    never uses it, and DDP wants no idle weights."""
    encoder = SentenceEncoder.from_pretrained(model or default_model_path(), pooling=pooling, max_length=max_length,
                                              bert_class=bert_class)
    if not mlm_head:
        encoder.bert.mlm_head = None
    return encoder


def loader(dataset: torch.utils.data.Dataset, collate: Callable, encoder: SentenceEncoder, args: argparse.Namespace,
           device: torch.device, lengths: Sequence[int] | None = None) -> torch.utils.data.DataLoader:
    """The training batches of `dataset`: plain shuffled batches of --batch-size, as a DataLoader(shuffle=True) gives
    them, or with each item's token `lengths` (--bucketing), batches of similar length. Under torchrun this process's
    share of each batch. data.make_loader with the common flags (--seed, --workers)."""
    return data.make_loader(dataset, lengths=len(dataset) if lengths is None else lengths, collate=collate,
                            pad_id=encoder.bert.cfg.pad_token_id, batch_size=args.batch_size, seed=args.seed,
                            device=device, bucketing=lengths is not None, workers=args.workers,
                            rank=distributed.rank(), world_size=distributed.world_size())


def held_out_signals(objective: torch.nn.Module, dataset: torch.utils.data.Dataset, collate: Callable,
                     sentences: Sequence[str], args: argparse.Namespace,
                     device: torch.device) -> selection.HeldOut | None:
    """--heldout N: the kept-out items (`dataset`, built as epoch 0 builds them) in fixed batches, their `sentences`,
    and the objective as the main process computes it by itself (it alone evaluates). None without --heldout."""
    if not len(dataset):
        return None
    batches = data.fixed_batches(dataset, collate=collate, pad_id=objective.encoder.bert.cfg.pad_token_id,
                                 batch_size=args.batch_size, device=device)
    return selection.HeldOut(distributed.this_process_only(objective), batches, list(sentences))


def settings(args: argparse.Namespace, batches: torch.utils.data.DataLoader, card: Callable,
             heldout: selection.HeldOut | None = None, *, steps: int | None, epochs: int, lr: float,
             out: Path | None = None, resume: bool | None = None, eval_pooling: str | None = None,
             **recipe) -> train.TrainSettings:
    """train.TrainSettings of a run: `steps`, else `epochs` passes over the loader's `batches`, at peak `lr`, with the
    method's `recipe` (its optimiser's settings, what it saves beside model/) and what the common flags say: OUT
    (or `out`), --resume (or `resume`), --amp, --save-every, and the evaluation the selection flags ask for
    (training_evaluation; with `eval_pooling`, the same weights pooled so for scoring), its best
    encoder kept in best/."""
    eval_fn, log_fn = training_evaluation(args, heldout)
    if eval_fn and eval_pooling:
        score = eval_fn
        eval_fn = lambda enc: score(SentenceEncoder(enc.bert, enc.tokenizer, eval_pooling, enc.max_length, enc.source))
    return train.TrainSettings(
        out=Path(out or args.out), steps=steps or epochs * len(batches.batch_sampler), lr=lr, amp=args.amp,
        save_every=args.save_every, resume=args.resume if resume is None else resume, eval_every=args.eval_every,
        eval_fn=eval_fn, log_fn=log_fn, keep_best=eval_fn is not None,
        higher_is_better=higher_is_better(args.eval_task), card=card, **recipe)


def say_start(what: str, run: train.TrainSettings, objective: torch.nn.Module, args: argparse.Namespace,
              device: torch.device) -> None:
    """The line that starts the training: what trains, how many steps of how many items, where, into which folder,
    and which pieces of speedups/ replace plain ones (none: the plain path, the classes a learner reads)."""
    fast = sorted({type(m).__name__ for m in objective.modules() if type(m).__module__.startswith("speedups.")})
    if distributed.rank() == 0:
        print(f"{what}: {run.steps} steps of {args.batch_size} at lr {run.lr:g} on {distributed.world_size()} x "
              f"{device} ({'speedups: ' + ', '.join(fast) if fast else 'plain path'}); saving to {run.out}")


def say_best(state: train.RunState, task: str | None, out: Path) -> None:
    """After a stage that evaluated: its best score, and where best/ keeps that encoder."""
    if state.best is not None and distributed.rank() == 0:
        print(f"best {task} {state.best:.4g}: encoder saved to {Path(out) / 'best'}")


def say_done(out: Path, note: str) -> None:
    """The run's last line: where its encoder is."""
    if distributed.rank() == 0:
        print(f"done: encoder saved to {Path(out) / 'model'} ({note})")


# ----------------------------------------------------------------------------
# Model selection's score: which dev data --eval-task may read (lib/selection.py: when, and what it keeps)


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
    evaluate) or a file of yours, when its dev files are not there, or when the file of sts:PATH or pairs:PATH is
    malformed (it is read once here, so it fails now rather than at the first evaluation). None: no task."""
    if task is None or task in HELDOUT_TASKS:
        return
    if task not in DEV_TASKS and taskfiles.own_file(task) is None:
        why = ("USEB has no dev split for TwitterPara: its valid split is its test set" if task == "useb-twitterpara"
               else "USEB's average includes TwitterPara, whose valid split is its test set" if task == "useb"
               else "it has no dev data here, so selection would read its test data"
               if task in evaluate.TASKS or task == "all"
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


def training_evaluation(args: argparse.Namespace,
                        heldout: selection.HeldOut | None) -> tuple[Callable | None, Callable | None]:
    """(eval_fn, log_fn) for TrainSettings from the selection flags (cli.add_selection_arguments): the score of
    --eval-task (None when nothing is evaluated), and {name: value} of what else each evaluation logs: the other
    held-out signal (with --heldout), alignment and uniformity on STS-b dev (--log-alignment)."""
    signals = heldout.signals() if heldout else {}
    if not cli.evaluates(args):
        eval_fn = None
    elif args.eval_task in signals:  # heldout-loss, heldout-...: cli.check_selection asked for --heldout
        eval_fn = signals.pop(args.eval_task)
    else:  # a task's dev data in --eval-data, or your own file
        eval_fn = lambda encoder: dev_score(encoder, args.eval_task, args.eval_data)
    logged = [lambda encoder: {name: signal(encoder) for name, signal in signals.items()}] if signals else []
    if args.log_alignment and args.eval_data:
        pairs = datafiles.load_stsb(Path(args.eval_data) / "stsbenchmark" / "sts-dev.csv")
        logged.append(lambda encoder: evaluate.alignment_uniformity(encoder, pairs))
    log_fn = (lambda encoder: {k: v for log in logged for k, v in log(encoder).items()}) if logged else None
    return eval_fn, log_fn
