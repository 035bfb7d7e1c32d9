"""Alignment and uniformity: the shape of the embedding space (Wang & Isola 2020, arXiv:2005.10242).

Not a score of either paper's tables but a look at WHY a score moves. With f(x) = e(x) / ||e(x)||, the
embedding put on the unit sphere:
  alignment  = E_{(x, y) positive pair} ||f(x) - f(y)||^2               (alpha = 2): paraphrases stay close
  uniformity = log E_{x, y i.i.d., x != y} exp(-2 ||f(x) - f(y)||^2)    (t = 2): all the rest spreads out
Lower is better for both. On the sphere ||f(x) - f(y)||^2 = 2 - 2 cos(x, y) (0 to 4), so both are about
cosines. A collapsed encoder (one vector for every sentence: raw BERT's narrow cone taken to its end) has
the perfect alignment 0 and the worst uniformity, 0; vectors at right angles to each other (cosine 0,
squared distance 2) give log exp(-4) = -4. Contrastive learning (ConSERT's NT-Xent) optimises both at once.
Measured as SimCSE measures them (arXiv:2104.08821 §2 eq. 2-3; §3 footnote 3: "STS-B pairs with a score
higher than 4 as p_pos and all STS-B sentences as p_data"; its authors: "the whole STS-B dataset",
princeton-nlp/SimCSE#52): positives = the pairs of gold score > 4 of 5, data = every sentence of every pair of
train, dev and test, a sentence in several pairs counted each time (as Wang & Isola's pdist counts repeated
rows). Raw numbers, not x 100 like the other tasks.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

POSITIVE_SCORE = 4.0      # STS gold score (0-5) ABOVE which a pair counts as a paraphrase
UNIFORMITY_CHUNK = 256    # rows of each (chunk, N) block of distances: memory chunk x N, whatever N


def alignment(x: torch.Tensor, y: torch.Tensor) -> float:
    """E ||f(x_i) - f(y_i)||^2 over the rows of x, y (P, d): row i of x and row i of y are a positive pair.
    Rows need not be unit length: they are normalised first."""
    if len(x) == 0 or x.shape != y.shape:
        raise ValueError(f"alignment needs two (P, d) tensors of the same shape, P >= 1 (got {tuple(x.shape)} "
                         f"and {tuple(y.shape)})")
    fx, fy = F.normalize(x.double(), dim=-1), F.normalize(y.double(), dim=-1)  # (P, d) each, unit rows
    return float((fx - fy).pow(2).sum(-1).mean())  # alignment = E ||f(x) - f(y)||_2^2   (alpha = 2)


def uniformity(emb: torch.Tensor, chunk: int = UNIFORMITY_CHUNK) -> float:
    """log E_{i != j} exp(-2 ||f(e_i) - f(e_j)||^2) over the N rows of emb (N, d): every pair of rows i != j, also
    two rows of one sentence that the data hold twice (SimCSE's count: a sentence in several pairs counts each time).
    The mean over the N (N - 1) ordered pairs i != j equals the mean over the unordered ones (torch.pdist's,
    Wang & Isola's code): the distance is symmetric. log-mean-exp is computed as a logsumexp (stable for any
    exponent), `chunk` rows at a time, so no block is larger than (chunk, N)."""
    n = len(emb)
    if n < 2:
        raise ValueError(f"uniformity needs at least 2 sentences (got {n})")
    f = F.normalize(emb.double(), dim=-1)  # (N, d) unit rows: f(x) = e(x) / ||e(x)||
    block_sums = []
    for start in range(0, n, chunk):
        rows = f[start:start + chunk]  # (C, d)
        sq_dist = (2 - 2 * rows @ f.T).clamp(min=0)  # (C, N): ||a - b||^2 = 2 - 2 a.b for unit a, b
        exponent = -2 * sq_dist  # (C, N): the t = 2 of exp(-t ||f(x) - f(y)||^2)
        own = torch.arange(len(rows))
        exponent[own, start + own] = float("-inf")  # x != y: a sentence is not paired with itself
        block_sums.append(torch.logsumexp(exponent.flatten(), dim=0))  # log sum over the block's pairs
    # uniformity = log( (1 / (N (N - 1))) sum_{i != j} exp(-2 ||f(x_i) - f(x_j)||^2) )
    return float(torch.logsumexp(torch.stack(block_sums), dim=0) - np.log(n * (n - 1)))


def alignment_uniformity_of(emb: torch.Tensor, gold: Sequence[float], above: float = POSITIVE_SCORE) -> dict:
    """The same from the vectors: rows 2i and 2i + 1 of emb (2 n, d) are pair i, of gold score gold[i]."""
    positive = torch.tensor([score > above for score in gold])  # (n,)
    if not positive.any():
        raise ValueError(f"no pair has a gold score above {above}: alignment needs positive pairs")
    x, y = emb[0::2][positive], emb[1::2][positive]  # (P, d) each: the paraphrase pairs
    return {"alignment": alignment(x, y), "uniformity": uniformity(emb),
            "positive_pairs": int(positive.sum()), "sentences": len(emb)}
