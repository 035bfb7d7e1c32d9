"""TSDAE's experiment, around the method of tsdae.py: the batches, the command line and the run
(`python tsdae.py` and `python tsdae_train.py` run it).

  make_parser, parse_args   every flag, with the paper's defaults (app. A, B)
  main                      the run, as a short list of the steps below
  build_objective           the encoder and TSDAELoss (speedups/fast.py's pieces unless --plain; a lab's when asked)
  denoising_pairs, pair_loader
                            (damaged, original) pairs in the reference's plain shuffled batches (--bucketing: by length)
  held_out_signals          --heldout N: the loss on lines kept out of training, a dev signal without labels
  settings                  train.TrainSettings of the run
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, Sequence

import torch

import data
import train
import tsdae
from labs.noise_once import NoiseOnceDataset
from labs.token_memory import TokenMemoryTSDAELoss
from lib import cli, distributed
from lib.corpus import hold_out, open_corpus
from lib.errors import UsageError
from lib.weights import default_model_path
from model import Bert, SentenceEncoder
from speedups import fast


def make_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(
        description="Train a sentence encoder with TSDAE (arXiv:2104.06979) on unlabelled sentences, one per line.",
        formatter_class=cli.HelpFormatter,
    )
    p.add_argument("--corpus", required=True, help="UTF-8 text file, one sentence per line")
    p.add_argument("--model", default=None,
                   help="a BERT, RoBERTa, XLM-R, DistilBERT or ELECTRA checkpoint: a local folder or a Hub id such as "
                        "bert-base-uncased (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the corpus (ignored when --steps is given)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimiser steps in total (default: one epoch, corpus size / batch size; the paper: 100000)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="sentences per step (app. B); under torchrun the global batch, split over the processes")
    p.add_argument("--lr", type=float, default=3e-5, help="AdamW learning rate (app. B), constant as in the reference")
    p.add_argument("--max-length", type=int, default=75, help="tokens per sentence, longer lines are truncated")
    p.add_argument("--pooling", default="cls", choices=["cls", "mean", "max"], help="sentence vector (app. A, tab. 7)")
    p.add_argument("--noise", default="delete", choices=sorted(tsdae.NOISE), help="noise type (app. A, tab. 5)")
    p.add_argument("--noise-ratio", type=float, default=0.6, help="probability a word is affected (app. A, tab. 6)")
    p.add_argument("--noise-once", action="store_true",
                   help="damage each sentence once: every epoch sees the same damaged version (LABS.md, lab 2)")
    p.add_argument("--untie", action="store_true", help="separate decoder weights (initialised from the same checkpoint)")
    p.add_argument("--decoder-memory", default="vector", choices=["vector", "tokens"],
                   help="what the decoder's cross-attention reads: the sentence vector (§3.2), or every token state "
                        "of the damaged sentence, no bottleneck (LABS.md, lab 5; runs the plain path)")
    p.add_argument("--bucketing", action="store_true",
                   help="batches of similar length (less padding) instead of the reference's plain shuffled batches; "
                        "changes each sentence's weight in the token mean")
    p.add_argument("--micro-batch", type=int, metavar="N",
                   help="forward and backward each batch N sentences at a time, each part weighted by its share of the "
                        "batch's tokens, in the memory of N sentences (one process only): the same loss and gradient "
                        "to 1e-5 when nothing is drawn at random; with dropout each part draws its own masks (the "
                        "same distribution, not the same numbers)")
    p.add_argument("--loss-normalisation", default="tokens", choices=["tokens", "sentence"],
                   help="tokens: mean over the batch's tokens (reference code); sentence: per-sentence sum (paper §3.1). "
                        "One factor per batch apart: when every step is clipped to norm 1 they train alike (LABS.md, lab 6)")
    cli.add_run_arguments(p, out="runs/tsdae")
    cli.add_selection_arguments(p, eval_every=500, what="the paper selects none: app. B assumes no labelled data")
    p.add_argument("--bad-lines", default="error", choices=["error", "skip", "replace"],
                   help="what to do with corpus lines that are not UTF-8")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = make_parser()
    args = p.parse_args(argv)
    cli.check_arguments(p, args, positive=("lr",), at_least_one=("epochs", "steps", "batch_size", "eval_every", "micro_batch"),
                          ratios=("noise_ratio",))
    cli.check_selection(p, args)
    if args.max_length < 3:
        p.error(f"--max-length must be at least 3: the start token, one word, the end token (got {args.max_length})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # check every input first: bad input stops the run before any model is loaded or any file is written
    train.check_dev_task(args.eval_task, args.eval_data)
    sentences = open_corpus(args.corpus, args.bad_lines)  # where each line is; its text stays on disk
    device = cli.device(args.device)
    cli.check_out_folder(Path(args.out), args.resume, args.overwrite)
    card = cli.model_card("TSDAE", make_parser(), args, argv, sentences, pooling=args.pooling, lr=args.lr)
    lines = len(sentences)
    sentences, kept_out = hold_out(sentences, args.heldout)  # --heldout N: a dev signal without labels
    if kept_out and distributed.rank() == 0:
        print(f"--heldout {args.heldout}: {len(kept_out)} lines kept out of training, and "
              f"{lines - len(kept_out) - len(sentences)} more that repeat one of their sentences")
    rank, world = distributed.init()
    if args.micro_batch and world > 1:  # each process would all-reduce once per part, and their parts differ in number
        raise UsageError("--micro-batch is not written for TSDAE under torchrun yet; more processes make each "
                         "one's share of the batch smaller instead")
    torch.manual_seed(args.seed)
    plain, objective = build_objective(args, device)
    loader = pair_loader(sentences, plain.encoder, args, device, rank, world)
    heldout = held_out_signals(kept_out, objective, args, device)
    run = settings(args, plain, card, heldout, steps=args.steps or args.epochs * len(loader.batch_sampler))
    if rank == 0:
        print(f"TSDAE: {len(sentences)} sentences, {run.steps} steps of {args.batch_size} on {world} x {device}"
              f"{' (plain path)' if args.plain else ''}; saving to {run.out}")
    train.train(plain.encoder, objective, loader, run, device)
    if rank == 0:
        print(f"done: encoder saved to {run.out / 'model'} ({args.pooling} pooling)")
    return 0


def build_objective(args: argparse.Namespace, device: torch.device) -> tuple[tsdae.TSDAELoss, tsdae.TSDAELoss]:
    """(the objective whose encoder and decoder are saved, the objective that trains): one object, built with
    speedups/fast.py's pieces (the encoder a PackedBert, its word lookup a SparseGradLookup when tied, the decoder a
    PackedDecoder: the plain parameters under their names, the same numbers) unless --plain or a lab that reads
    token states. The encoder of --model with the decoder tied to it; under torchrun its loss is the mean over
    every process's tokens."""
    quick, tie = not args.plain and args.decoder_memory == "vector", not args.untie
    bert_class = (fast.SparseLookupPackedBert if tie else fast.PackedBert) if quick else Bert
    encoder = SentenceEncoder.from_pretrained(args.model or default_model_path(), pooling=args.pooling,
                                              max_length=args.max_length, bert_class=bert_class)
    settings = dict(tie=tie, normalisation=args.loss_normalisation, global_mean=distributed.global_mean)
    if args.decoder_memory == "tokens":  # LABS.md, lab 5
        objective = TokenMemoryTSDAELoss(encoder, **settings)
    else:
        objective = tsdae.TSDAELoss(encoder, decoder_class=fast.PackedDecoder if quick else tsdae.TSDAEDecoder, **settings)
    return objective, objective


def denoising_pairs(sentences: Sequence[str], encoder: SentenceEncoder,
                    args: argparse.Namespace) -> tsdae.DenoisingDataset:
    """The (damaged, original) pairs of the sentences, damaged as the flags say (training's and the held-out's)."""
    pairs = NoiseOnceDataset if args.noise_once else tsdae.DenoisingDataset  # LABS.md, lab 2
    return pairs(sentences, encoder.tokenizer, encoder.max_length, noise=args.noise, ratio=args.noise_ratio,
                 seed=args.seed)


def pair_loader(sentences: Sequence[str], encoder: SentenceEncoder, args: argparse.Namespace, device: torch.device,
                rank: int = 0, world: int = 1) -> torch.utils.data.DataLoader:
    """(damaged, original) pairs in plain shuffled batches, as the reference's DataLoader(shuffle=True) gives them.
    With --bucketing, batches of similar original length: less work on padding, but the loss is a mean over the
    batch's tokens, so in a bucketed batch each sentence weighs about 1/B whatever its length. Only bucketing
    tokenises the whole corpus first (its lengths); plain batches need only the number of sentences."""
    dataset = denoising_pairs(sentences, encoder, args)
    lengths = (data.token_lengths(encoder.tokenizer, sentences, encoder.max_length) if args.bucketing
               else len(sentences))
    return data.make_loader(dataset, lengths=lengths, collate=tsdae.collate_pairs,
                            pad_id=encoder.bert.cfg.pad_token_id, batch_size=args.batch_size, seed=args.seed,
                            device=device, bucketing=args.bucketing, workers=args.workers, rank=rank,
                            world_size=world)


def held_out_signals(kept_out: list[str], objective: tsdae.TSDAELoss, args: argparse.Namespace,
                     device: torch.device) -> train.HeldOut | None:
    """--heldout N: the kept-out lines, damaged once (as epoch 0 damages them, also with --noise-once: two runs that
    differ in how training is damaged score the same damaged lines), in fixed batches, and the objective as the
    main process computes it by itself (it alone evaluates)."""
    if not kept_out:
        return None
    encoder = objective.encoder
    pairs = tsdae.DenoisingDataset(kept_out, encoder.tokenizer, encoder.max_length, noise=args.noise,
                                   ratio=args.noise_ratio, seed=args.seed)
    batches = data.fixed_batches(pairs, collate=tsdae.collate_pairs, pad_id=encoder.bert.cfg.pad_token_id,
                                 batch_size=args.batch_size, device=device)
    return train.HeldOut(distributed.this_process_only(objective), batches, kept_out)


def settings(args: argparse.Namespace, plain: tsdae.TSDAELoss, card: Callable, heldout: train.HeldOut | None,
             steps: int) -> train.TrainSettings:
    """The run's settings: the reference's AdamW at a constant lr (train.TrainSettings' defaults), the
    evaluation the flags ask for (with the held-out signals), and the decoder saved beside model/
    (examples/reconstruct.py reads it)."""
    decoder = {"objective": type(plain).__name__, "tie": not args.untie, "normalisation": args.loss_normalisation,
               "base_model": str(args.model or default_model_path()), "seed": args.seed, "noise": args.noise,
               "noise_ratio": args.noise_ratio, "corpus": str(args.corpus)}
    save_decoder = lambda run: tsdae.save_decoder(plain, run / "decoder", decoder)
    eval_fn, log_fn = train.training_evaluation(args, heldout)
    return train.TrainSettings(
        out=Path(args.out), steps=steps, lr=args.lr, amp=args.amp, save_every=args.save_every, resume=args.resume,
        micro_batch=args.micro_batch or 0, eval_every=args.eval_every, eval_fn=eval_fn, log_fn=log_fn,
        keep_best=eval_fn is not None, higher_is_better=train.higher_is_better(args.eval_task), card=card,
        save_with_model=save_decoder)


if __name__ == "__main__":
    cli.run(main)
