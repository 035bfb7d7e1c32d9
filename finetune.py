"""After TSDAE: supervised fine-tuning on your own labels.

The TSDAE paper's recipe for a domain with a few labels (arXiv:2104.06979 §6, fig. 2): TSDAE on the unlabelled
text first, then ordinary supervised training on the labelled pairs. This file is that second step: three
losses of sentence-transformers, each on the vectors of the encoder's ordinary forward pass (no views, no
decoder), with the encoder's own dropout on.

    (anchor, positive [, hard negatives]) -->  in-batch negatives   (Henderson et al. 2017; SimCSE's supervised
                                                                      recipe with NLI triples, arXiv:2104.08821)
    (sentence1, sentence2, score)         -->  CoSENT (Su 2022), or the cosine regression of SBERT (Reimers &
                                                                      Gurevych 2019, arXiv:1908.10084 §3)

Read top to bottom:
  1. in-batch negatives              in_batch_negatives_loss (and how it differs from consert.nt_xent)
  2. scored pairs                    cosent_loss, cosine_regression_loss, normalise_scores
  3. the objective                   SupervisedLoss: the vectors of each column, then the loss
  4. its batches                     ExampleDataset, collate_examples
The experiment (the files, the flags, the run) is commands/finetune_train.py: `python finetune.py` runs it.
"""
from __future__ import annotations

import runpy
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

from data import pad, tokenize
from lib.distributed import own_rows
from model import SentenceEncoder

# ----------------------------------------------------------------------------
# 1. In-batch negatives: (anchor, positive [, hard negative]) rows


def in_batch_negatives_loss(anchors: torch.Tensor, candidates: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """The multiple-negatives ranking loss (Henderson et al. 2017, arXiv:1705.00652; sentence-transformers'
    MultipleNegativesRankingLoss). anchors a_i (N, d); candidates (M, d): the N positives p_i first (row i is
    a_i's positive), then any hard negatives (one column n_i, or k of them: n-tuples). Every other row's positive
    and negatives are negatives of a_i:

        s(i, j) = scale * cos(a_i, c_j)
        loss    = mean over i of  -log( exp s(i, i) / sum over the M candidates j of exp s(i, j) )

    It is consert.nt_xent's view-1 half at temperature 1 / scale (scale 20: temperature 0.05), with two
    differences: the candidates are only the other column (positives and hard negatives), never the other
    anchors; and there is no second, view-2 direction. As in the reference, a sentence repeated in the batch
    counts as a negative of its copy (nt_xent leaves copies out)."""
    a = F.normalize(anchors.float(), dim=-1)  # (N, d), unit length: dot product = cosine
    c = F.normalize(candidates.float(), dim=-1)  # (M, d)
    scores = scale * a @ c.T  # (N, M)
    positive = torch.arange(len(a), device=a.device)  # a_i's positive is candidate i
    return F.cross_entropy(scores, positive)


# ----------------------------------------------------------------------------
# 2. Scored pairs: (sentence1, sentence2, score) rows


def cosent_loss(u: torch.Tensor, v: torch.Tensor, scores: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """CoSENT (Su 2022; sentence-transformers' CoSENTLoss): only the ORDER of the gold scores matters. With
    c_i = scale * cos(u_i, v_i), for every two pairs i, j of the batch whose gold scores say i < j:

        loss = log( 1 + sum over (i, j) with score_i < score_j of exp(c_i - c_j) )

    a pair scored lower whose cosine is higher than another's costs exp(of the gap). u, v (B, d); scores (B,)."""
    c = scale * F.cosine_similarity(u.float(), v.float(), dim=-1)  # (B,)
    gap = c[:, None] - c[None, :]  # (B, B): c_i - c_j
    ordered = scores[:, None] < scores[None, :]  # (B, B): gold says pair i is less similar than pair j
    terms = torch.cat([gap.new_zeros(1), gap[ordered]])  # the 1 of log(1 + ...) is exp(0)
    return torch.logsumexp(terms, dim=0)


def cosine_regression_loss(u: torch.Tensor, v: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """SBERT's regression objective (arXiv:1908.10084 §3; sentence-transformers' CosineSimilarityLoss):
    loss = mean over i of (cos(u_i, v_i) - score_i)^2, the scores in [0, 1] (normalise_scores)."""
    return F.mse_loss(F.cosine_similarity(u.float(), v.float(), dim=-1), scores.float())  # (B,) vs (B,)


def normalise_scores(scores: Sequence[float], low: float, high: float) -> list[float]:
    """Gold scores from [low, high] to [0, 1], as the reference's examples divide STS-b's 0-5 scores by 5: the
    range a cosine regression can reach. CoSENT reads only their order, which this keeps."""
    return [(s - low) / (high - low) for s in scores]


SCORED_LOSSES = ("cosent", "cosine")  # the losses of scored pairs: cosent_loss, cosine_regression_loss


# ----------------------------------------------------------------------------
# 3. The objective


class SupervisedLoss(nn.Module):
    """Encoder; forward(batch) -> the loss of one batch of labelled rows.

    {anchor_*, positive_* [, negative_*]}:      in_batch_negatives_loss(anchors, positives [+ negatives]);
    {..., negative_1_*, ..., negative_k_*}:     the same with every negative column (an n-tuple file).
    {sentence1_*, sentence2_*, scores}:          `loss`, "cosent" (default) or "cosine" (cosine_regression_loss).
    Each column is encoded by the encoder's own forward pass (`vectors`), its pooling included.
    gather(x): the rows the loss compares: this batch's (own_rows), or under torchrun every process's, so the
    in-batch negatives and CoSENT's pairs of pairs are those of the whole batch (lib/distributed.py)."""

    def __init__(self, encoder: SentenceEncoder, loss: str = "cosent", scale: float = 20.0,
                 gather: Callable[[torch.Tensor], torch.Tensor] = own_rows):
        super().__init__()
        if loss not in SCORED_LOSSES:
            raise ValueError(f"unknown loss {loss!r} for scored pairs; choose from {', '.join(SCORED_LOSSES)}")
        self.encoder, self.loss, self.scale, self.gather = encoder, loss, scale, gather

    def vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """One column's sentence vectors (B, d): the encoder's forward pass, as at inference but with dropout."""
        return self.encoder(input_ids, attention_mask)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        column = lambda name: self.gather(self.vectors(batch[f"{name}_ids"], batch[f"{name}_mask"]))  # (N, d)
        if "scores" in batch:  # scored pairs
            u, v, scores = column("sentence1"), column("sentence2"), self.gather(batch["scores"])
            if self.loss == "cosent":
                return cosent_loss(u, v, scores, self.scale)
            return cosine_regression_loss(u, v, scores)
        negatives = [name[: -len("_ids")] for name in batch if name.startswith("negative") and name.endswith("_ids")]
        candidates = [column("positive")] + [column(name) for name in negatives]  # every hard-negative column
        return in_batch_negatives_loss(column("anchor"), torch.cat(candidates), self.scale)


# ----------------------------------------------------------------------------
# 4. The batches: item (epoch, i) -> the token ids of row i's sentences (and its score); collate pads each column


class ExampleDataset(torch.utils.data.Dataset):
    """Rows of sentences (and, for scored pairs, a score last), named by `columns`: ("anchor", "positive"),
    ("anchor", "positive", "negative"), ("anchor", "positive", "negative_1", ..., "negative_k") or ("sentence1",
    "sentence2", "score")."""

    def __init__(self, rows: Sequence[tuple], columns: tuple[str, ...], tokenizer: Tokenizer, max_length: int):
        self.rows, self.columns, self.tokenizer, self.max_length = rows, columns, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: tuple[int, int]) -> dict:
        row = dict(zip(self.columns, self.rows[key[1]]))
        score = row.pop("score", None)
        item = dict(zip(row, tokenize(self.tokenizer, list(row.values()), self.max_length)))
        return item if score is None else {**item, "score": score}


def collate_examples(items: list[dict], pad_id: int = 0, multiple: int = 1) -> dict[str, torch.Tensor]:
    """{column_ids, column_mask} for each sentence column, padded on its own; `scores` (B,) float32 when scored."""
    batch = {}
    for name in (name for name in items[0] if name != "score"):
        batch[f"{name}_ids"], batch[f"{name}_mask"] = pad([item[name] for item in items], pad_id, multiple)
    if "score" in items[0]:
        batch["scores"] = torch.tensor([item["score"] for item in items], dtype=torch.float32)
    return batch


if __name__ == "__main__":  # python finetune.py --pairs ...: the experiment around this objective
    runpy.run_module("commands.finetune_train", run_name="__main__")  # as `python -m commands.finetune_train`
