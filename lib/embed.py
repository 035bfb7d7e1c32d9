"""Sentences to unit vectors, the first step of every evaluation (evaluate.py) and of the held-out signals
(lib/selection.py): cosine similarity is then a dot product."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F


def encode_unique(encoder, sentences: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> torch.Tensor:
    """Unit-length embeddings, one row per input sentence; each distinct sentence is encoded once. `encoder`: any
    object with encode(sentences, batch_size=..., show_progress=...) -> (N, d), as model.SentenceEncoder."""
    unique = list(dict.fromkeys(sentences))
    emb = torch.as_tensor(encoder.encode(unique, batch_size=batch_size, show_progress=show_progress))
    emb = F.normalize(emb.float(), dim=-1)  # then cosine similarity = dot product
    row = {s: i for i, s in enumerate(unique)}
    return emb[[row[s] for s in sentences]]
