"""TSDAE's experiment, around the method of tsdae.py: the batches, the command line and the run
(`python tsdae.py` runs it).

  make_parser, parse_args   every flag, with the paper's defaults (app. A, B), but the reference code's loss
                            normalisation and a run of one epoch, not 100K steps; check_args: each in its range
  main                      the run's steps, then train.train (a lab's entry point, labs/, runs them with its
                            own piece):
    read_inputs             the corpus, the --heldout lines, the device and the model card (bad input stops here)
    build_objective         the encoder and TSDAELoss (speedups/fast.py's pieces unless --plain)
    denoising_pairs, pair_loader   (damaged, original) pairs in the reference's plain shuffled batches
    prepare_run             the run's settings (the decoder saved beside model/: decoder_saver)
"""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (data.py, train.py, lib/, ...) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
from typing import Callable, Sequence

import torch

import data
import train
import tsdae
from commands import experiment
from lib import cli, distributed
from lib.corpus import open_corpus
from lib.errors import UsageError
from lib.weights import default_model_path
from model import Bert, SentenceEncoder
from speedups import fast


def main(argv: list[str] | None = None) -> int:
    """A TSDAE run: the corpus, the denoising pairs and TSDAELoss (tsdae.py), then the shared loop, with the
    reference's AdamW at a constant lr, no weight decay, gradients clipped to norm 1 (train.TrainSettings' defaults).
    A lab (labs/, LABS.md) is its own entry point: these steps, with its own objective or pairs."""
    args = parse_args(argv)
    sentences, kept_out, device, card = read_inputs(args, argv)
    objective = build_objective(args)
    loader = pair_loader(denoising_pairs(sentences, objective.encoder, args), objective.encoder, args, device)
    run = prepare_run(objective, loader, kept_out, card, args, device)
    train.train(objective.encoder, objective, loader, run, device)
    experiment.say_done(run.out, f"{args.pooling} pooling")
    return 0


def read_inputs(args: argparse.Namespace, argv: list[str] | None) -> tuple[Sequence[str], list[str], torch.device,
                                                                           Callable]:
    """The corpus lines that train, the --heldout lines kept out (a dev signal without labels), the device and the
    model card: bad input stops the run here, before a model is loaded or a file written."""
    sentences = open_corpus(args.corpus, args.bad_lines)  # where each line is; its text stays on disk
    device = experiment.check_run(args)
    card = cli.model_card("TSDAE", make_parser(), args, argv, sentences, pooling=args.pooling, lr=args.lr)
    sentences, kept_out = experiment.hold_out(sentences, args, "lines")
    _, world = distributed.init()
    if args.micro_batch and world > 1:  # each process would all-reduce once per part, and their parts differ in number
        raise UsageError("--micro-batch is not written for TSDAE under torchrun yet; more processes make each "
                         "one's share of the batch smaller instead")
    torch.manual_seed(args.seed)
    return sentences, kept_out, device, card


def prepare_run(objective: tsdae.TSDAELoss, loader: torch.utils.data.DataLoader, kept_out: list[str], card: Callable,
                args: argparse.Namespace, device: torch.device) -> train.TrainSettings:
    """The run's settings (--heldout's pairs, the decoder saved beside model/), said in the line that starts
    training."""
    heldout = experiment.held_out_signals(objective, denoising_pairs(kept_out, objective.encoder, args),
                                          tsdae.collate_pairs, kept_out, args, device)
    run = experiment.settings(args, loader, card, heldout, steps=args.steps, epochs=args.epochs, lr=args.lr,
                              micro_batch=args.micro_batch or 0, save_with_model=decoder_saver(objective, args))
    experiment.say_start(f"TSDAE: {len(loader.dataset)} sentences", run, objective, args, device)
    return run


def build_objective(args: argparse.Namespace) -> tsdae.TSDAELoss:
    """TSDAELoss on the encoder of --model, the decoder tied to it; under torchrun its loss is the mean over every
    process's tokens. By default built from speedups/fast.py's subclasses: the encoder a PackedBert (its word lookup a
    SparseGradLookup when tied), the decoder a PackedDecoder, with the plain parameters under their names and the
    same numbers with dropout off (in training, other draws of the dropout masks). --plain: model.Bert and
    tsdae.TSDAEDecoder as written."""
    tie = not args.untie
    if args.plain:
        bert_class = Bert
    else:
        bert_class = fast.SparseLookupPackedBert if tie else fast.PackedBert
    # with its masked-LM head, if the checkpoint has one: the decoder's head starts from it (TSDAEDecoder)
    encoder = experiment.load_encoder(args.model, pooling=args.pooling, max_length=args.max_length, mlm_head=True,
                                      bert_class=bert_class)
    return tsdae.TSDAELoss(encoder, decoder_class=tsdae.TSDAEDecoder if args.plain else fast.PackedDecoder, tie=tie,
                           normalisation=args.loss_normalisation, global_mean=distributed.global_mean)


def denoising_pairs(lines: Sequence[str], encoder: SentenceEncoder, args: argparse.Namespace) -> tsdae.DenoisingDataset:
    """(damaged, original) pairs of `lines`, damaged as --noise and --noise-ratio say. The --heldout lines too: built
    as epoch 0 damages them, so two runs that differ in how training is damaged (labs/noise_once.py) score the same
    damaged lines."""
    return tsdae.DenoisingDataset(lines, encoder.tokenizer, encoder.max_length, noise=args.noise,
                                  ratio=args.noise_ratio, seed=args.seed)


def pair_loader(pairs: tsdae.DenoisingDataset, encoder: SentenceEncoder, args: argparse.Namespace,
                device: torch.device) -> torch.utils.data.DataLoader:
    """The pairs in plain shuffled batches, as the reference's DataLoader(shuffle=True) gives them. With --bucketing,
    batches of similar original length: less work on padding, but the loss is a mean over the batch's tokens, so in
    a bucketed batch each sentence weighs about 1/B whatever its length. Only bucketing tokenises the whole corpus
    first (its lengths)."""
    lengths = data.token_lengths(pairs.tokenizer, pairs.sentences, pairs.max_length) if args.bucketing else None
    return experiment.loader(pairs, tsdae.collate_pairs, encoder, args, device, lengths)


def decoder_saver(objective: tsdae.TSDAELoss, args: argparse.Namespace) -> Callable[[Path], None]:
    """Saves the decoder beside model/ (OUT/decoder; examples/reconstruct.py reads it), with how it was trained."""
    decoder = {"objective": type(objective).__name__, "tie": not args.untie, "normalisation": args.loss_normalisation,
               "base_model": str(args.model or default_model_path()), "seed": args.seed, "noise": args.noise,
               "noise_ratio": args.noise_ratio, "corpus": str(args.corpus)}
    return lambda out: tsdae.save_decoder(objective, out / "decoder", decoder)


def make_parser(description: str = "Train a sentence encoder with TSDAE (arXiv:2104.06979) on unlabelled "
                                   "sentences, one per line.", fast_path: bool = True) -> cli.ArgumentParser:
    """Every flag; `description` opens --help, and a run with no fast path has no --plain (a lab's, labs/)."""
    p = cli.ArgumentParser(description=description)
    p.add_argument("--corpus", required=True, help="UTF-8 text file, one sentence per line")
    p.add_argument("--model", default=None,
                   help=f"a {cli.checkpoint_families()} checkpoint: a local folder or a Hub id such as "
                        "bert-base-uncased (default: the shipped all-MiniLM-L6-v2)")
    cli.add_length_arguments(p, passes_over="the corpus", paper="100000")
    p.add_argument("--batch-size", type=int, default=8,
                   help="sentences per step (app. B); under torchrun the global batch, split over the processes")
    p.add_argument("--lr", type=float, default=3e-5, help="AdamW learning rate (app. B), constant as in the reference")
    p.add_argument("--max-length", type=int, default=75,
                   help="tokens per sentence, longer lines are truncated (the reference example's; the paper "
                        "states none)")
    p.add_argument("--pooling", default="cls", choices=["cls", "mean", "max"], help="sentence vector (app. A, tab. 7)")
    p.add_argument("--noise", default="delete", choices=sorted(tsdae.NOISE), help="noise type (app. A, tab. 5)")
    p.add_argument("--noise-ratio", type=float, default=0.6, help="probability a word is affected (app. A, tab. 6)")
    p.add_argument("--untie", action="store_true",
                   help="separate decoder weights (initialised from the same checkpoint)")
    p.add_argument("--bucketing", action="store_true",
                   help="batches of similar length (less padding) instead of the reference's plain shuffled batches; "
                        "changes each sentence's weight in the token mean")
    p.add_argument("--micro-batch", type=int, metavar="N",
                   help="forward and backward each batch N sentences at a time, each part weighted by its share of the "
                        "loss's terms (the batch's tokens; its sentences with --loss-normalisation sentence), in the "
                        "memory of N sentences (one process only): the same loss and gradient to 1e-5 when nothing "
                        "is drawn at random; with dropout each part draws its own masks (the same distribution, not "
                        "the same numbers)")
    p.add_argument("--loss-normalisation", default="tokens", choices=["tokens", "sentence"],
                   help="tokens: mean over the batch's tokens (reference code); "
                        "sentence: per-sentence sum (paper §3.1). "
                        "One factor per batch apart: when every step is clipped to norm 1 they train alike "
                        "(LABS.md, lab 6)")
    cli.add_run_arguments(p, out="runs/tsdae", inputs="corpus lines", fast_path=fast_path)
    cli.add_selection_arguments(p, eval_every=500, what="the paper selects none: app. B assumes no labelled data")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, each in its range (check_args)."""
    p = make_parser()
    return check_args(p, p.parse_args(argv))


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Each flag in its range; --max-length leaves room for a word."""
    cli.check_arguments(p, args, positive=("lr",),
                        at_least_one=("epochs", "steps", "batch_size", "eval_every", "micro_batch"),
                        ratios=("noise_ratio",))
    cli.check_selection(p, args)
    if args.max_length < 3:
        p.error(f"--max-length must be at least 3: the start token, one word, the end token (got {args.max_length})")
    return args


if __name__ == "__main__":
    cli.run(main)
