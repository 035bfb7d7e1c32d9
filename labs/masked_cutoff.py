"""LABS.md, lab 1: token cutoff with the cut tokens masked out, against the official token cutoff.

The official token_cutoff (consert.token_cutoff) zeroes int(n * rate) token rows of the embedding output and
leaves them in the attention mask: every other token still attends to them, as zero vectors, and mean pooling
counts them (its author confirms it: yym6472/ConSERT issue #7). The view "token_cutoff_masked" zeroes the same
rows AND takes them out of the attention mask, as if they were padding. `python labs/masked_cutoff.py --view2
token_cutoff_masked FLAGS` trains with it (the run of `python consert.py FLAGS`, with this view).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (tsdae.py, consert.py, lib/) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from labs import contrastive
from consert import ConSERTLoss, View, token_cutoff
from lib import cli


def masked_token_cutoff(x: torch.Tensor, attention_mask: torch.Tensor,
                        rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """token_cutoff's int(n * rate) rows of x (B, L, d) zeroed AND taken out of the attention mask (B, L): no token
    attends to a cut one and pooling skips it. Returns x and the new mask; rate < 1 leaves every sentence a token."""
    rows = torch.ones_like(attention_mask, dtype=x.dtype)[:, :, None]  # (B, L, 1)
    cut = token_cutoff(rows, attention_mask, rate)[:, :, 0] == 0  # (B, L): the rows token_cutoff zeroes, same draw
    return x.masked_fill(cut[:, :, None], 0.0), attention_mask.masked_fill(cut, 0)


class MaskedCutoffConSERTLoss(ConSERTLoss):
    """consert.ConSERTLoss that also makes the view token_cutoff_masked; every other view as ConSERTLoss.make_view."""

    view_names = (*ConSERTLoss.view_names, "token_cutoff_masked")

    def make_view(self, x: torch.Tensor, attention_mask: torch.Tensor,
                  view: View) -> tuple[torch.Tensor, torch.Tensor]:
        if view.name == "token_cutoff_masked":
            return masked_token_cutoff(x, attention_mask, view.rate)  # x (B, L, d), the mask (B, L) without the cut
        return super().make_view(x, attention_mask, view)


def make_parser() -> cli.ArgumentParser:
    """`python consert.py`'s flags, under this lab's description: this file's command line."""
    return contrastive.make_parser(__doc__, MaskedCutoffConSERTLoss)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return contrastive.parse_args(argv, MaskedCutoffConSERTLoss, __doc__)


def main(argv: list[str] | None = None) -> int:
    """`python labs/masked_cutoff.py FLAGS`: the run of `python consert.py FLAGS` (--strategy unsup), trained by
    this objective (so --view1 / --view2 may name token_cutoff_masked)."""
    return contrastive.main(argv, MaskedCutoffConSERTLoss, __doc__)


if __name__ == "__main__":
    cli.run(main)
