"""TSDAE (Wang, Reimers & Gurevych 2021): train a sentence encoder by rebuilding damaged sentences.

    damaged sentence --encoder--> ONE vector --decoder--> the original sentence

The only path from the damaged input to the decoder is the sentence vector (§3.2), so that vector
must carry the sentence's meaning. After training the decoder is thrown away.

    python tsdae.py --corpus examples/topics.txt --steps 200 --out runs/tsdae
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn as nn

import data
from model import (
    GradientLast, SentenceEncoder, TrainSettings, TSDAEDecoder, add_run_arguments, default_model_path, global_mean,
    init_distributed, pick_device, run_cli, train,
)


class VocabularyCrossEntropy(torch.autograd.Function):
    """sum_t -log softmax(h_t E^T + b)[y_t]: the decoder's vocabulary projection and its loss in one step.

    The same numbers as F.cross_entropy(F.linear(h, E, b), y, reduction="sum"), computed with a single
    (T, V) tensor: autograd would keep the logits and the log-probabilities and make two more (T, V)
    gradients. Here the backward turns the saved log-probabilities into d loss / d logits = softmax - onehot(y)
    in place. Speed and memory only; tests/test_tsdae.py checks it against the plain formula.
    """

    VOCAB_CHUNK = 1024  # on CPU, MKL runs the projection faster as (T, d) x (d, 1024) pieces than in one piece

    @staticmethod
    def forward(ctx, h: torch.Tensor, E: torch.Tensor, b: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """h (T, d) decoder states at the label positions, E (V, d) word embeddings, b (V,), y (T,) labels."""
        h = h.to(torch.promote_types(h.dtype, torch.float32))  # projection and softmax in float32 at least
        logits = h.new_empty(len(h), len(E))  # (T, V)
        for i in range(0, len(E), VocabularyCrossEntropy.VOCAB_CHUNK):
            v = slice(i, i + VocabularyCrossEntropy.VOCAB_CHUNK)
            torch.addmm(b[v], h, E[v].T, out=logits[:, v])  # (T, chunk) = h E_v^T + b_v
        log_probs = torch.log_softmax(logits, -1, out=logits)  # (T, V), in place: no second (T, V) tensor
        ctx.save_for_backward(h, E, log_probs, y)
        return -log_probs.gather(1, y[:, None]).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        h, E, log_probs, y = ctx.saved_tensors
        d_logits = log_probs.exp_()  # (T, V): softmax, in place of the log-probabilities
        d_logits[torch.arange(len(y), device=y.device), y] -= 1  # softmax - onehot(y)
        # the loss's scalar gradient multiplies the small factors, never the (T, V) one
        return (d_logits @ E) * grad, d_logits.T @ (h * grad), d_logits.sum(0) * grad, None  # (T, d), (V, d), (V,)


class TSDAELoss(nn.Module):
    """Encoder + tied decoder + reconstruction loss for one batch of (damaged, original) sentences.

    normalisation="tokens": cross-entropy averaged over every non-pad label token of the batch
        (the reference code's choice, sentence-transformers' DenoisingAutoEncoderLoss; the default).
    normalisation="sentence": summed over each sentence's tokens, averaged over sentences
        (the paper's objective, §3.1: the log-likelihood of each sentence).
    """

    def __init__(self, encoder: SentenceEncoder, tie: bool = True, normalisation: str = "tokens"):
        super().__init__()
        assert normalisation in ("tokens", "sentence")
        self.encoder = encoder
        self.decoder = TSDAEDecoder(encoder.bert, tie=tie)  # app. A: tied to the encoder
        if not tie:
            encoder.bert.mlm_head = None  # the separate decoder has its own copy; the encoder never used it
        self.decoder.embeddings.sparse_word_grad = True  # speed only: see model.GradientLast
        self.normalisation = normalisation

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # the vocabulary projection's E, taken before any lookup so that its dense gradient comes last
        word_embeddings = GradientLast.apply(self.decoder.embeddings.word.weight)  # (V, d)
        # §3.1: the encoder reads the DAMAGED sentence and gives one vector per sentence
        sentence_vec = self.encoder(batch["damaged_ids"], batch["damaged_mask"])  # (B, d)
        # teacher forcing: read the original up to t, predict token t+1 ([CLS] a b -> a b [SEP])
        original, mask = batch["original_ids"], batch["original_mask"]
        decoder_input, labels = original[:, :-1], original[:, 1:]  # (B, L-1) each
        is_label = mask[:, 1:].bool()  # (B, L-1): real tokens to predict
        states = self.decoder(decoder_input, sentence_vec)  # (B, L-1, d)
        # the vocabulary projection is the costliest matmul: compute it only where there is a label
        head = self.decoder.lm_head
        h = head.transform(states[is_label])  # (T, d), T = real label tokens in the batch
        total = VocabularyCrossEntropy.apply(h, word_embeddings, head.bias, labels[is_label])  # sum over T
        count = is_label.sum() if self.normalisation == "tokens" else torch.tensor(len(original), device=total.device)
        return global_mean(total, count)  # = total / count; under torchrun over the whole global batch


def make_loader(sentences: list[str], encoder: SentenceEncoder, args: argparse.Namespace, device: torch.device,
                rank: int = 0, world: int = 1) -> torch.utils.data.DataLoader:
    """(damaged, original) batches, length-bucketed on the original sentences."""
    dataset = data.DenoisingDataset(sentences, encoder.tokenizer, encoder.max_length, args.noise, args.noise_ratio,
                                    args.seed)
    lengths = data.token_lengths(encoder.tokenizer, sentences, encoder.max_length)
    return data.make_loader(dataset, lengths, data.collate_pairs, encoder.bert.cfg.pad_token_id, args.batch_size,
                            args.seed, device, not args.no_bucketing, args.workers, rank, world)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Train a sentence encoder with TSDAE on unlabelled sentences (one per line).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--corpus", required=True, help="UTF-8 text file, one sentence per line")
    p.add_argument("--model", default=None, help="local Hugging Face BERT folder (default: the shipped all-MiniLM-L6-v2)")
    p.add_argument("--out", default="runs/tsdae",
                   help="run folder: model/ (the trained encoder), checkpoint/ (to resume), log.jsonl")
    p.add_argument("--epochs", type=int, default=1, help="passes over the corpus (ignored when --steps is given)")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps in total (the paper: 100000)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="sentences per step (app. B); under torchrun the global batch, split over the processes")
    p.add_argument("--lr", type=float, default=3e-5, help="AdamW learning rate (app. B), constant as in the reference")
    p.add_argument("--max-length", type=int, default=75, help="tokens per sentence, longer lines are truncated")
    p.add_argument("--pooling", default="cls", choices=["cls", "mean", "max"], help="sentence vector (app. A, tab. 7)")
    p.add_argument("--noise", default="delete", choices=sorted(data.NOISE), help="noise type (app. A, tab. 5)")
    p.add_argument("--noise-ratio", type=float, default=0.6, help="probability a word is affected (app. A, tab. 6)")
    p.add_argument("--untie", action="store_true", help="separate decoder weights (initialised from the same checkpoint)")
    p.add_argument("--loss-normalisation", default="tokens", choices=["tokens", "sentence"],
                   help="tokens: mean over the batch's tokens (reference code); sentence: per-sentence sum (paper §3.1)")
    add_run_arguments(p)
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    p.add_argument("--eval-data", default=None, help="data folder with stsbenchmark/: log STS-b dev Spearman")
    p.add_argument("--eval-every", type=int, default=500, help="steps between evaluations (with --eval-data)")
    p.add_argument("--bad-lines", default="error", choices=["error", "skip", "replace"],
                   help="what to do with corpus lines that are not UTF-8")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = init_distributed()
    torch.manual_seed(args.seed)
    device = pick_device(args.device)
    sentences = data.read_corpus(args.corpus, args.bad_lines)
    encoder = SentenceEncoder.from_pretrained(args.model or default_model_path(), pooling=args.pooling,
                                              max_length=args.max_length)
    objective = TSDAELoss(encoder, tie=not args.untie, normalisation=args.loss_normalisation)
    loader = make_loader(sentences, encoder, args, device, rank, world)
    steps = args.steps or args.epochs * len(loader.batch_sampler)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eval_fn = None
    if args.eval_data:
        from evaluate import stsb_dev_spearman

        eval_fn = lambda enc: stsb_dev_spearman(enc, args.eval_data)
    settings = TrainSettings(out=out, steps=steps, lr=args.lr, seed=args.seed, amp=args.amp,
                             save_every=args.save_every, eval_every=args.eval_every, eval_fn=eval_fn,
                             resume=args.resume, compile=args.compile)
    if rank == 0:
        print(f"TSDAE: {len(sentences)} sentences, {steps} steps of {args.batch_size} on {world} x {device}; saving to {out}")
    train(encoder, objective, loader, settings, device)
    if rank == 0:
        print(f"done: encoder saved to {out / 'model'} ({args.pooling} pooling)")
    return 0


if __name__ == "__main__":
    run_cli(main)
