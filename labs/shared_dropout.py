"""LABS.md, lab 3: SimCSE's two dropout masks, against one mask shared by both copies of a sentence.

With the views simcse and simcse (Gao et al. 2021), the two views of a sentence are two encoder passes that differ
only by their dropout masks. `--shared-dropout` makes ONE pass whose vectors are both views, z2 = z1: SimCSE's
"fixed 0.1" row (§3, tab. 3). The positive pair is then identical, sim(k, p(k)) = 1 / temperature whatever the
encoder does, and NT-Xent can only push the negatives apart.
"""
from __future__ import annotations

import torch

from consert import ConSERTLoss, View


class SharedDropoutConSERTLoss(ConSERTLoss):
    """consert.ConSERTLoss (the unsupervised objective) whose forward compares one pass with itself. (In a joint
    stage both simcse views are already the one unaugmented pass: consert.AdversarialConSERTLoss.vectors.)"""

    def __init__(self, encoder, views: tuple[View, View], **settings):
        if [view.name for view in views] != ["simcse", "simcse"]:
            raise ValueError("shared dropout masks are for the views simcse and simcse")
        super().__init__(encoder, views, **settings)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        z = self.encode(batch["input_ids"], batch["attention_mask"], self.views[0])  # (B, d): one pass, one set of masks
        return self.cl_weight * self.contrastive(z, z, batch["sentence_keys"])
