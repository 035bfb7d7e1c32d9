"""LABS.md, lab 3: SimCSE's two dropout masks, against one mask shared by both copies of a sentence.

With the views simcse and simcse (Gao et al. 2021), the two views of a sentence are two encoder passes that differ
only by their dropout masks. This objective makes ONE pass whose vectors are both views, z2 = z1: SimCSE's
"fixed 0.1" row (§3, tab. 3). The positive pair is then identical, sim(k, p(k)) = 1 / temperature whatever the
encoder does, and NT-Xent can only push the negatives apart.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (tsdae.py, consert.py, lib/) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from labs import contrastive
from consert import ConSERTLoss
from lib import cli


class SharedDropoutConSERTLoss(ConSERTLoss):
    """consert.ConSERTLoss (the unsupervised objective) whose forward compares one pass with itself. (In a joint
    stage both simcse views would already be the one unaugmented pass, consert.AdversarialConSERTLoss.vectors:
    consert_train.check_args refuses that pair there.)"""

    view_names = ("simcse",)  # both views simcse: ConSERTLoss.__init__ (and labs/contrastive.parse_args) refuse others

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        z = self.encode(batch["input_ids"], batch["attention_mask"], self.views[0])  # (B, d): one pass, one mask
        return self.cl_weight * self.contrastive(z, z, batch["sentence_keys"])


def make_parser() -> cli.ArgumentParser:
    """`python consert.py`'s flags, under this lab's description: this file's command line."""
    return contrastive.make_parser(__doc__, SharedDropoutConSERTLoss)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return contrastive.parse_args(argv, SharedDropoutConSERTLoss, __doc__)


def main(argv: list[str] | None = None) -> int:
    """`python labs/shared_dropout.py --view1 simcse --view2 simcse FLAGS`: the run of `python consert.py` with the
    same flags (--strategy unsup), trained by this objective."""
    return contrastive.main(argv, SharedDropoutConSERTLoss, __doc__)


if __name__ == "__main__":
    cli.run(main)
