"""Supervised fine-tuning's experiment, around the objective of finetune.py: your labelled file, the command
line and the run (`python finetune.py` runs it).

    python tsdae.py --corpus my_text.txt --out runs/tsdae                  # 1. adapt to the domain, no labels
    python finetune.py --pairs my_pairs.tsv --model runs/tsdae/model --out runs/ft   # 2. then your labels
    python evaluate.py --model runs/ft/model --tasks sts:my_test.tsv       # 3. your own test set

  make_parser, parse_args   every flag, with sentence-transformers' training defaults (experiment.FIT)
  main                      the run: experiment.py's steps and the ones below, then train.train
  read_examples             the rows of --pairs (or --nli's triples), their kind, and --sample
  build_objective           the encoder and SupervisedLoss (the cached gradient with --micro-batch)
  examples                  the rows as training items
"""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (data.py, train.py, lib/, ...) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import random
from typing import Sequence

import torch

import finetune
import train
from commands import experiment
from lib import cli, distributed
from lib.datafiles import nli_triplets, read_nli, read_training_file
from lib.errors import UsageError
from model import SentenceEncoder
from speedups import gradcache

# The columns of each kind of row, as lib.datafiles.read_training_file names them (n-tuples: columns_of).
COLUMNS = {"pairs": ("anchor", "positive"), "triplets": ("anchor", "positive", "negative"),
           "scored": ("sentence1", "sentence2", "score")}


def columns_of(kind: str, rows: Sequence[tuple]) -> tuple[str, ...]:
    """The names of the rows' columns: COLUMNS[kind], or for n-tuples anchor, positive, negative_1 ... negative_k."""
    if kind != "tuples" or not rows:  # no rows (none held out): no columns to name
        return COLUMNS.get(kind, ())
    return ("anchor", "positive", *(f"negative_{i}" for i in range(1, len(rows[0]) - 1)))


def main(argv: list[str] | None = None) -> int:
    """A fine-tuning run: your rows and SupervisedLoss (finetune.py), then the shared loop."""
    args = parse_args(argv)
    kind, rows = read_examples(args)
    device = experiment.check_run(args)  # bad input stops the run before a model is loaded or a file written
    rows, kept_out = experiment.hold_out(rows, args, "rows")  # a dev signal from rows that never train
    distributed.init()
    torch.manual_seed(args.seed)
    objective = build_objective(args)
    encoder = objective.encoder
    card = cli.model_card("fine-tuning", make_parser(), args, argv, ["\t".join(map(str, row)) for row in rows],
                          pooling=encoder.pooling, lr=args.lr, corpus=args.pairs or f"{args.nli} (NLI triples)")
    loader = experiment.loader(examples(kind, rows, encoder), finetune.collate_examples, encoder, args, device)
    heldout = experiment.held_out_signals(objective, examples(kind, kept_out, encoder), finetune.collate_examples,
                                          [s for row in kept_out for s in row if isinstance(s, str)], args, device)
    run = experiment.settings(args, loader, card, heldout, steps=args.steps, epochs=args.epochs, lr=args.lr,
                              decay_steps=fit_decay_steps(len(rows), args), **experiment.FIT)
    loss = "in-batch negatives" if kind != "scored" else args.loss
    what = f"{kind} of anchor, positive and {len(rows[0]) - 2} negatives" if kind == "tuples" else kind
    experiment.say_start(f"fine-tuning: {len(rows)} {what} ({loss})", run, objective, args, device)
    train.train(encoder, objective, loader, run, device)
    experiment.say_done(run.out, f"{encoder.pooling} pooling")
    return 0


def fit_decay_steps(rows: int, args: argparse.Namespace) -> int | None:
    """With --epochs, the step where the lr reaches 0 as sentence-transformers' fit (6.2) schedules it:
    rows // batch * epochs, full batches only, while its trainer trains every batch, the short last one too
    (dataloader_drop_last False), so the last steps run at lr 0: README's 175 pairs, batch 16, 3 epochs train 33
    steps and decay to 0 at step 30. None with --steps (fit's steps_per_epoch: decay over them all) and with fewer
    rows than a batch, where fit's schedule is 0 after the warm-up and nothing would train: decay over the steps."""
    return None if args.steps else (rows // args.batch_size) * args.epochs or None


def read_examples(args: argparse.Namespace) -> tuple[str, list[tuple]]:
    """(kind, rows): the rows of --pairs as lib.datafiles.read_training_file reads them (the columns it does not
    read named in one line; a score outside --score-range refused), or the NLI triples of --nli; with --loss cosine,
    the scores mapped to [0, 1]; with --sample K, K of them drawn at random."""
    if args.nli:
        kind, rows = "triplets", nli_triplets(read_nli(args.nli, args.bad_lines))
        if not rows:
            raise UsageError(f"--nli {args.nli}: no premise has both an entailment and a contradiction hypothesis")
    else:
        kind, rows, unused = read_training_file(args.pairs, args.score_range)
        if unused and distributed.rank() == 0:
            print(f"--pairs {args.pairs}: not used: the column{'s' * (len(unused) > 1)} {', '.join(unused)}")
    if kind != "scored" and (scored_flags := scored_only(args)):
        raise UsageError(f"--pairs {args.pairs}: {kind} have no scores (they train with in-batch negatives): "
                         f"{', '.join(scored_flags)} would change nothing")
    if kind == "scored" and args.loss == "cosine":  # the whole file's range, whatever --sample draws
        scores = [score for *_, score in rows]
        low, high = args.score_range or (min(scores), max(scores))
        if not low < high:
            raise UsageError(f"--loss cosine: every score is {low}; give --score-range LOW,HIGH")
        rows = [(s1, s2, score) for (s1, s2, _), score in zip(rows, finetune.normalise_scores(scores, low, high))]
    if args.sample:
        if args.sample > len(rows):
            raise UsageError(f"--sample {args.sample}: the file has {len(rows)} rows")
        rows = random.Random(args.seed).sample(rows, args.sample)
    return kind, rows


def scored_only(args: argparse.Namespace) -> list[str]:
    """The flags given that only scored pairs read."""
    return ["--loss"] * (args.loss != "cosent") + ["--score-range"] * (args.score_range is not None)


def build_objective(args: argparse.Namespace) -> finetune.SupervisedLoss:
    """The encoder of --model and its SupervisedLoss; under torchrun over the global batch (its in-batch
    negatives, CoSENT's pairs of pairs). With --micro-batch the same objective, its encoder passes through the
    cached gradient."""
    encoder = experiment.load_encoder(args.model, pooling=args.pooling, max_length=args.max_length)
    options = dict(loss=args.loss, scale=args.scale, gather=distributed.gather_with_local_grad)
    if args.micro_batch:
        return gradcache.ChunkedSupervisedLoss(encoder, micro_batch=args.micro_batch, **options)
    return finetune.SupervisedLoss(encoder, **options)


def examples(kind: str, rows: Sequence[tuple], encoder: SentenceEncoder) -> finetune.ExampleDataset:
    """The rows as ExampleDataset items (the training rows, or the --heldout ones); the caller batches them."""
    return finetune.ExampleDataset(rows, columns_of(kind, rows), encoder.tokenizer, encoder.max_length)


def make_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(description="Fine-tune a sentence encoder on your own labelled file (after TSDAE: "
                                       "arXiv:2104.06979 §6). Pairs or triplets train with in-batch negatives; "
                                       "scored pairs with CoSENT (or --loss cosine).")
    src = p.add_argument_group("data (one of --pairs, --nli)")
    given = src.add_mutually_exclusive_group(required=True)
    given.add_argument("--pairs", metavar="FILE",
                       help="TSV, CSV (each with a header) or JSONL. Columns: anchor, positive [, negative or "
                            "negative_1, negative_2, ...] (in-batch negatives); or sentence1, sentence2 [, score or "
                            "label] (with a score: scored pairs; without: pairs). Other columns are named, not read")
    given.add_argument("--nli", metavar="FILE",
                       help="NLI pairs (.jsonl premise/hypothesis/label, or a SICK file) as SimCSE's supervised "
                            "triples: premise, entailment as its positive, contradiction as its hard negative")
    src.add_argument("--loss", default="cosent", choices=sorted(finetune.SCORED_LOSSES),
                     help="for scored pairs: cosent (Su 2022; only the order of the scores matters) or cosine (SBERT's "
                          "regression of the cosine onto the score, normalised to [0, 1])")
    src.add_argument("--score-range", metavar="LOW,HIGH",
                     help="the range the scores come from (a score outside it is refused); with --loss cosine "
                          "mapped to [0, 1] (default: the file's lowest and highest score; STS-b: 0,5)")
    src.add_argument("--sample", type=int, metavar="K",
                     help="draw K rows at random (by --seed) from the file, before --heldout keeps its N of them "
                          "out: how far do K labels go?")
    p.add_argument("--model", default=None,
                   help="the encoder to start from: a run's model/ folder (e.g. runs/tsdae/model), a checkpoint folder "
                        "or a Hub id (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--pooling", default=None, choices=["cls", "mean", "max"],
                   help="sentence vector (default: the model folder's own: a TSDAE run's is its --pooling, "
                        "CLS unless set)")
    cli.add_length_arguments(p, passes_over="the rows")
    p.add_argument("--batch-size", type=int, default=16,
                   help="rows per step (with pairs and triplets, each row's positive is every other row's negative). "
                        "Under torchrun the global batch, split over the processes")
    p.add_argument("--lr", type=float, default=2e-5,
                   help="AdamW learning rate (eps 1e-8, weight decay 0.01, linear warm-up from 0 over ceil(10%%) "
                        "of the steps, then linear decay to 0, gradients clipped to norm 1: sentence-transformers' "
                        "fit)")
    p.add_argument("--scale", type=float, default=20.0,
                   help="the cosine's factor in in-batch negatives and CoSENT (1 / temperature); "
                        "--loss cosine has none")
    p.add_argument("--max-length", type=int, default=None, help="tokens per sentence (default: the model folder's)")
    p.add_argument("--micro-batch", type=int, metavar="N",
                   help="encode each batch N sentences at a time with the cached gradient (GradCache, "
                        "arXiv:2101.06983): the whole batch's loss and exact gradient in the encoder memory of N; "
                        "dropout is drawn per chunk (speedups/gradcache.py)")
    cli.add_run_arguments(p, out="runs/finetune", inputs="the lines of --nli", fast_path=False)  # one path only
    cli.add_selection_arguments(p, eval_every=100, what="e.g. --eval-task sts:dev.tsv, your own dev file")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, each in its range; --score-range as (LOW, HIGH)."""
    p = make_parser()
    args = cli.parse_args(p, argv, positive=("lr", "scale"),
                        at_least_one=("epochs", "steps", "batch_size", "eval_every", "micro_batch", "sample"))
    cli.check_selection(p, args)
    if args.pairs and args.bad_lines != "error":
        p.error("--bad-lines would change nothing: it acts on --nli's lines (a --pairs file must be valid UTF-8)")
    if args.nli and scored_only(args):
        p.error(f"--nli trains triplets, which have no scores: {', '.join(scored_only(args))} would change nothing")
    if args.loss == "cosine" and args.scale != p.get_default("scale"):
        p.error("--scale would change nothing: --loss cosine regresses the cosine itself, with no scale")
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


if __name__ == "__main__":
    cli.run(main)
