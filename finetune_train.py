"""Supervised fine-tuning's experiment, around the objective of finetune.py: your labelled file, the command
line and the run (`python finetune.py` and `python finetune_train.py` run it).

    python tsdae.py --corpus my_text.txt --out runs/tsdae                  # 1. adapt to the domain, no labels
    python finetune.py --pairs my_pairs.tsv --model runs/tsdae/model --out runs/ft   # 2. then your labels
    python evaluate.py --model runs/ft/model --tasks sts:my_test.tsv       # 3. your own test set

  make_parser, parse_args   every flag, with sentence-transformers' training defaults
  main                      the run, as a short list of the steps below
  read_examples             the rows of --pairs (or --nli's triples), their kind, and --sample
  build_objective           the encoder and SupervisedLoss (the cached gradient with --micro-batch)
  example_loader            the rows in plain shuffled batches
  held_out_signals          --heldout N: the loss on rows kept out of training
  settings                  train.TrainSettings of the run
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Callable, Sequence

import torch

import data
import finetune
import train
from lib import cli, distributed, selection
from lib.corpus import hold_out
from lib.datafiles import nli_triplets, read_nli, read_training_file
from lib.errors import UsageError
from lib.weights import default_model_path
from model import SentenceEncoder
from speedups import gradcache

# The columns of each kind of row, as lib.datafiles.read_training_file names them.
COLUMNS = {"pairs": ("anchor", "positive"), "triplets": ("anchor", "positive", "negative"),
           "scored": ("sentence1", "sentence2", "score")}


def make_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(
        description="Fine-tune a sentence encoder on your own labelled file (after TSDAE: arXiv:2104.06979 §6). "
                    "Pairs or triplets train with in-batch negatives; scored pairs with CoSENT (or --loss cosine).",
        formatter_class=cli.HelpFormatter,
    )
    src = p.add_argument_group("data (one of --pairs, --nli)")
    given = src.add_mutually_exclusive_group(required=True)
    given.add_argument("--pairs", metavar="FILE",
                       help="TSV, CSV (each with a header) or JSONL. Columns: anchor, positive [, negative] "
                            "(in-batch negatives); or sentence1, sentence2 [, score or label] (with a score: scored "
                            "pairs; without: pairs)")
    given.add_argument("--nli", metavar="FILE",
                       help="NLI pairs (.jsonl premise/hypothesis/label, or a SICK file) as SimCSE's supervised "
                            "triples: premise, entailment as its positive, contradiction as its hard negative")
    src.add_argument("--loss", default="cosent", choices=sorted(finetune.SCORED_LOSSES),
                     help="for scored pairs: cosent (Su 2022; only the order of the scores matters) or cosine (SBERT's "
                          "regression of the cosine onto the score, normalised to [0, 1])")
    src.add_argument("--score-range", metavar="LOW,HIGH",
                     help="with --loss cosine: the range the scores come from, mapped to [0, 1] (default: the file's "
                          "lowest and highest score; STS-b: 0,5)")
    src.add_argument("--sample", type=int, metavar="K",
                     help="train on K rows drawn at random (by --seed) from the file: how far do K labels go?")
    p.add_argument("--model", default=None,
                   help="the encoder to start from: a run's model/ folder (e.g. runs/tsdae/model), a checkpoint folder "
                        "or a Hub id (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--pooling", default=None, choices=["cls", "mean", "max"],
                   help="sentence vector (default: the model folder's own; a TSDAE run's is CLS)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the rows (ignored when --steps is given)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps in total (default: the epochs' batches)")
    p.add_argument("--batch-size", type=int, default=16,
                   help="rows per step; each row's positive is every other row's negative. Under torchrun the global "
                        "batch, split over the processes")
    p.add_argument("--lr", type=float, default=2e-5,
                   help="AdamW learning rate (eps 1e-6, weight decay 0.01, 10%% linear warm-up, then linear decay: "
                        "sentence-transformers' fit)")
    p.add_argument("--scale", type=float, default=20.0, help="the cosine's factor in both losses (1 / temperature)")
    p.add_argument("--max-length", type=int, default=None, help="tokens per sentence (default: the model folder's)")
    p.add_argument("--micro-batch", type=int, metavar="N",
                   help="encode each batch N sentences at a time with the cached gradient (Gao et al. 2021): the whole "
                        "batch's loss and exact gradient in the encoder memory of N; dropout is drawn per chunk "
                        "(speedups/gradcache.py)")
    cli.add_run_arguments(p, out="runs/finetune")
    cli.add_selection_arguments(p, eval_every=100, what="e.g. --eval-task sts:dev.tsv, your own dev file")
    p.add_argument("--bad-lines", default="error", choices=["error", "skip", "replace"],
                   help="with --nli: what to do with lines that are not UTF-8")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = make_parser()
    args = p.parse_args(argv)
    cli.check_arguments(p, args, positive=("lr", "scale"),
                        at_least_one=("epochs", "steps", "batch_size", "eval_every", "micro_batch", "sample"))
    cli.check_selection(p, args)
    if args.max_length is not None and args.max_length < 3:
        p.error(f"--max-length must be at least 3: the start token, one word, the end token (got {args.max_length})")
    if args.score_range:
        try:
            low, high = (float(x) for x in args.score_range.split(","))
        except ValueError:
            p.error(f"--score-range wants LOW,HIGH, two numbers (got {args.score_range!r})")
        if not low < high:
            p.error(f"--score-range: LOW must be below HIGH (got {args.score_range})")
        args.score_range = (low, high)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # check every input first: bad input stops the run before any model is loaded or any file is written
    kind, rows = read_examples(args)
    selection.check_dev_task(args.eval_task, args.eval_data)
    device = cli.device(args.device)
    cli.check_out_folder(Path(args.out), args.resume, args.overwrite)
    count = len(rows)
    rows, kept_out = hold_out(rows, args.heldout)  # --heldout N: a dev signal from rows that never train
    if kept_out and distributed.rank() == 0:
        print(f"--heldout {args.heldout}: {len(kept_out)} rows kept out of training, and "
              f"{count - len(kept_out) - len(rows)} more that repeat one of their sentences")
    rank, world = distributed.init()
    torch.manual_seed(args.seed)
    objective = build_objective(args)
    loader = example_loader(kind, rows, objective.encoder, args, device, rank, world)
    heldout = held_out_signals(kind, kept_out, objective, args, device)
    run = settings(args, argv, rows, heldout, objective.encoder,
                   steps=args.steps or args.epochs * len(loader.batch_sampler))
    if rank == 0:
        loss = "in-batch negatives" if kind != "scored" else args.loss
        print(f"fine-tuning: {len(rows)} {kind} ({loss}), {run.steps} steps of {args.batch_size} at lr {args.lr:g} on "
              f"{world} x {device}; saving to {run.out}")
    train.train(objective.encoder, objective, loader, run, device)
    if rank == 0:
        print(f"done: encoder saved to {run.out / 'model'} ({objective.encoder.pooling} pooling)")
    return 0


def read_examples(args: argparse.Namespace) -> tuple[str, list[tuple]]:
    """(kind, rows): the rows of --pairs as lib.datafiles.read_training_file reads them, or the NLI triples of
    --nli; with --sample K, K of them drawn at random; with --loss cosine, the scores mapped to [0, 1]."""
    if args.nli:
        kind, rows = "triplets", nli_triplets(read_nli(args.nli, args.bad_lines))
        if not rows:
            raise UsageError(f"--nli {args.nli}: no premise has both an entailment and a contradiction hypothesis")
    else:
        kind, rows = read_training_file(args.pairs)
    if args.sample:
        if args.sample > len(rows):
            raise UsageError(f"--sample {args.sample}: the file has {len(rows)} rows")
        rows = random.Random(args.seed).sample(rows, args.sample)
    if kind == "scored" and args.loss == "cosine":
        scores = [score for *_, score in rows]
        low, high = args.score_range or (min(scores), max(scores))
        if not low < high:
            raise UsageError(f"--loss cosine: every score is {low}; give --score-range LOW,HIGH")
        rows = [(s1, s2, score) for (s1, s2, _), score in zip(rows, finetune.normalise_scores(scores, low, high))]
    return kind, rows


def build_objective(args: argparse.Namespace) -> finetune.SupervisedLoss:
    """The encoder of --model and its SupervisedLoss; under torchrun over the global batch (its in-batch
    negatives, CoSENT's pairs of pairs). With --micro-batch the same objective, its encoder passes through the
    cached gradient."""
    encoder = SentenceEncoder.from_pretrained(args.model or default_model_path(), pooling=args.pooling,
                                              max_length=args.max_length)
    encoder.bert.mlm_head = None  # a checkpoint's masked-LM head is not used here (and DDP wants no idle weights)
    options = dict(loss=args.loss, scale=args.scale, gather=distributed.gather_with_local_grad)
    if args.micro_batch:
        return gradcache.ChunkedSupervisedLoss(encoder, micro_batch=args.micro_batch, **options)
    return finetune.SupervisedLoss(encoder, **options)


def example_loader(kind: str, rows: Sequence[tuple], encoder: SentenceEncoder, args: argparse.Namespace,
                   device: torch.device, rank: int = 0, world: int = 1) -> torch.utils.data.DataLoader:
    """The rows in plain shuffled batches, as sentence-transformers' DataLoader(shuffle=True) gives them."""
    dataset = finetune.ExampleDataset(rows, COLUMNS[kind], encoder.tokenizer, encoder.max_length)
    return data.make_loader(dataset, lengths=len(rows), collate=finetune.collate_examples,
                            pad_id=encoder.bert.cfg.pad_token_id, batch_size=args.batch_size, seed=args.seed,
                            device=device, bucketing=False, workers=args.workers, rank=rank, world_size=world)


def held_out_signals(kind: str, kept_out: list[tuple], objective: finetune.SupervisedLoss, args: argparse.Namespace,
                     device: torch.device) -> selection.HeldOut | None:
    """--heldout N: the kept-out rows in fixed batches, and the objective as the main process computes it alone."""
    if not kept_out:
        return None
    encoder = objective.encoder
    dataset = finetune.ExampleDataset(kept_out, COLUMNS[kind], encoder.tokenizer, encoder.max_length)
    batches = data.fixed_batches(dataset, collate=finetune.collate_examples, pad_id=encoder.bert.cfg.pad_token_id,
                                 batch_size=args.batch_size, device=device)
    sentences = [s for row in kept_out for s in row if isinstance(s, str)]
    return selection.HeldOut(distributed.this_process_only(objective), batches, sentences)


def settings(args: argparse.Namespace, argv: list[str] | None, rows: Sequence[tuple], heldout: selection.HeldOut | None,
             encoder: SentenceEncoder, steps: int) -> train.TrainSettings:
    """sentence-transformers' fit: AdamW (eps 1e-6, weight decay 0.01), 10% linear warm-up, linear decay, clip 1;
    the evaluation the flags ask for; the card of the rows."""
    eval_fn, log_fn = selection.training_evaluation(args, heldout)
    lines = ["\t".join(map(str, row)) for row in rows]
    source = args.pairs or f"{args.nli} (NLI triples)"
    card: Callable = cli.model_card("fine-tuning", make_parser(), args, argv, lines,
                                    pooling=encoder.pooling, lr=args.lr, corpus=source)
    return train.TrainSettings(
        out=Path(args.out), steps=steps, lr=args.lr, weight_decay=0.01, adam_eps=1e-6, warmup_ratio=0.1,
        schedule="linear", grad_clip=1.0, amp=args.amp, save_every=args.save_every, resume=args.resume,
        eval_every=args.eval_every, eval_fn=eval_fn, log_fn=log_fn, keep_best=eval_fn is not None,
        higher_is_better=selection.higher_is_better(args.eval_task), card=card)


if __name__ == "__main__":
    cli.run(main)
