"""LABS.md, lab 5: TSDAE without its bottleneck: the decoder reads every token state of the damaged sentence.

In TSDAE (arXiv:2104.06979 §3.2) the decoder's cross-attention reads one vector per sentence, so that vector must
carry the sentence. Here it reads the encoder's final states of every real token of the damaged sentence (its
padding masked out): the decoder can copy the surviving words from their own states, and nothing forces the pooled
vector to carry the sentence. The same parameters and normalisation. `python labs/token_memory.py FLAGS` trains it
(the run of `python tsdae.py FLAGS`, on the plain path: the fast decoder reads one vector).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (tsdae.py, consert.py, lib/) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataclasses import dataclass

import torch

import train
from commands import experiment, tsdae_train
from lib import cli, distributed
from model import MultiHeadAttention
from tsdae import TSDAEDecoder, TSDAELoss


@dataclass
class TokenStates:
    """The decoder's memory in this lab: the damaged sentence's token states and which of them are real."""

    states: torch.Tensor  # (B, Ld, d)
    mask: torch.Tensor  # (B, Ld), 1 = a real token


class TokenMemoryAttention(MultiHeadAttention):
    """A decoder layer's cross-attention (the same parameters) reading a TokenStates memory: every real token is a
    key, padding is masked out."""

    def forward(self, x: torch.Tensor, mask: None = None, memory: TokenStates | None = None) -> torch.Tensor:
        keys = memory.mask.bool()[:, None, None, :]  # (B, 1, 1, Ld): every query may see every real token
        return super().forward(x, keys, memory=memory.states)  # (B, L, d)


class TokenMemoryDecoder(TSDAEDecoder):
    """tsdae.TSDAEDecoder whose layers' cross-attention is a TokenMemoryAttention."""

    cross_attention_class = TokenMemoryAttention


class TokenMemoryTSDAELoss(TSDAELoss):
    """tsdae.TSDAELoss whose memory (TSDAELoss.memory) is the token states instead of the sentence vector, read by
    a TokenMemoryDecoder."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, decoder_class=TokenMemoryDecoder, **kwargs)

    def memory(self, batch: dict[str, torch.Tensor]) -> TokenStates:
        states = self.encoder.bert(batch["damaged_ids"], batch["damaged_mask"])  # (B, Ld, d), not pooled
        return TokenStates(states, batch["damaged_mask"])


def make_parser() -> cli.ArgumentParser:
    """`python tsdae.py`'s flags, under this lab's description, but --plain: this lab runs the plain path only."""
    return tsdae_train.make_parser(__doc__, fast_path=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = make_parser()
    return tsdae_train.check_args(p, p.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    """`python labs/token_memory.py FLAGS`: tsdae_train.main's steps with this objective, on the plain path."""
    args = parse_args(argv)
    sentences, kept_out, device, card = tsdae_train.read_inputs(args, argv)
    encoder = experiment.load_encoder(args.model, pooling=args.pooling, max_length=args.max_length, mlm_head=True)
    objective = TokenMemoryTSDAELoss(encoder, tie=not args.untie, normalisation=args.loss_normalisation,
                                     global_mean=distributed.global_mean)
    loader = tsdae_train.pair_loader(tsdae_train.denoising_pairs(sentences, encoder, args), encoder, args, device)
    run = tsdae_train.prepare_run(objective, loader, kept_out, card, args, device)
    train.train(encoder, objective, loader, run, device)
    experiment.say_done(run.out, f"{args.pooling} pooling")
    return 0


if __name__ == "__main__":
    cli.run(main)
