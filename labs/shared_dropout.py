"""LABS.md, lab 3: SimCSE's two dropout masks, against one mask shared by both copies of a sentence.

With the views simcse and simcse (Gao et al. 2021), the two views of a sentence are two encoder passes that differ
only by their dropout masks. `--shared-dropout` makes ONE pass whose vectors are both views, z2 = z1: SimCSE's
"fixed 0.1" row (§3, tab. 3). The positive pair is then identical, sim(k, p(k)) = 1 / temperature whatever the
encoder does, and NT-Xent can only push the negatives apart.
"""
from __future__ import annotations

import torch

from consert import ConSERTLoss, UnaugmentedPass, View


class SharedDropoutConSERTLoss(ConSERTLoss):
    """consert.ConSERTLoss whose contrastive loss compares one pass with itself."""

    def __init__(self, encoder, views: tuple[View, View], **settings):
        if [view.name for view in views] != ["simcse", "simcse"]:
            raise ValueError("shared dropout masks are for the views simcse and simcse")
        super().__init__(encoder, views, **settings)

    def contrastive(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keys: torch.Tensor,
                    unaugmented: UnaugmentedPass | None = None, attacked: torch.Tensor | None = None) -> torch.Tensor:
        z = self.vectors(input_ids, attention_mask, self.views[0], unaugmented)  # (B, d): one pass, one set of masks
        return self.contrastive_loss(z, z, keys)
