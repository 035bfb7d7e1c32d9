"""Stand-ins for the exercises (ASSIGNMENTS.md) that a test needs but does not grade, so that each exercise can be
checked alone in the student copy, whatever else is still blank: tests/conftest.py puts one in place of each
blank exercise (course.assignments.is_written) that the exercises being graded do not include.

None of them is the reference body. Each is either a library's version (PyTorch's fused attention, the safetensors
package, sentence-transformers' pooling), the formula a public test already compares with, or a simpler function of
the same shape that is NOT what the exercise asks for (no randomness, a roll instead of a shuffle, a one-direction
loss): good enough for another exercise's test, and visibly wrong for its own.
"""
from __future__ import annotations

import random
from pathlib import Path

import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              dropout_p: float = 0.0) -> torch.Tensor:
    """Exercise 1's stand-in: PyTorch's fused kernel (test_attention_formula_equals_the_fused_kernel's oracle)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, h, Lq, dh)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Exercise 2's stand-in: sentence-transformers' Pooling module (test_minilm_encode_equals_sentence_transformers'
    oracle)."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    features = {"token_embeddings": hidden, "attention_mask": attention_mask}
    return Pooling(hidden.shape[-1], pooling_mode=mode)(features)["sentence_embedding"]  # (B, d)


def delete_words(words: list[list[int]], ratio: float, rng: random.Random, **_) -> list[list[int]]:
    """Exercise 3's stand-in, not its noise: every other word, the first kept (no randomness, ratio ignored)."""
    return words[::2]


def decoder_layer_forward(self, x: torch.Tensor, memory: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
    """Exercise 4's stand-in: the three blocks as test_decoder_layer_is_its_three_post_norm_blocks writes them out."""
    x = self.self_attn_norm(x + self.dropout(self.self_attn(x, causal)))  # (B, L, d)
    x = self.cross_attn_norm(x + self.dropout(self.cross_attn(x, memory=memory)))  # (B, L, d)
    return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (B, L, d)


def tsdae_loss_forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Exercise 5's stand-in: the cross-entropy at every position, padding ignored, as
    test_loss_is_the_cross_entropy_over_real_label_tokens computes it."""
    original, mask = batch["original_ids"], batch["original_mask"]
    states = self.decoder(original[:, :-1], self.memory(batch))  # (B, L-1, d)
    labels = original[:, 1:].masked_fill(mask[:, 1:] == 0, -100)  # (B, L-1)
    total = F.cross_entropy(self.decoder.logits(states).flatten(0, 1), labels.flatten(), reduction="sum")
    return self.global_mean(total, self.count(batch))


def token_cutoff(x: torch.Tensor, attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Exercise 6's stand-in, not its view: each token row zeroed with probability `rate` (a random count)."""
    return x * (torch.rand(x.shape[:2], device=x.device) >= rate)[:, :, None]


def feature_cutoff(x: torch.Tensor, attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Exercise 6's stand-in, not its view: each feature column zeroed with probability `rate` (a random count)."""
    return x * (torch.rand(len(x), 1, x.shape[-1], device=x.device) >= rate)


def shuffled_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Exercise 7's stand-in, not its view: each sentence's real positions rolled by a random offset (a rotation,
    not a uniform permutation)."""
    n = attention_mask.sum(1, keepdim=True)  # (B, 1)
    t = torch.arange(attention_mask.shape[1], device=attention_mask.device)[None, :]  # (1, L)
    offset = (torch.rand(n.shape, device=n.device) * n).long()  # (B, 1)
    return torch.where(t < n, (t + offset) % n.clamp(min=1), t)  # (B, L)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float, same: torch.Tensor | None = None) -> torch.Tensor:
    """Exercise 8's stand-in, not NT-Xent: view 1 against view 2's rows only, one direction (InfoNCE)."""
    sim = F.normalize(z1.float(), dim=-1) @ F.normalize(z2.float(), dim=-1).T / temperature  # (N, N)
    return F.cross_entropy(sim, torch.arange(len(z1), device=z1.device))


def span_mask(attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Exercise 10's stand-in, not its view: the first k real tokens, k drawn from 1..n (neither the promised length
    nor a random start)."""
    n = attention_mask.sum(1, keepdim=True)  # (B, 1)
    keep = (torch.rand(n.shape, device=n.device) * n).long() + 1  # (B, 1)
    t = torch.arange(attention_mask.shape[1], device=attention_mask.device)[None, :]  # (1, L)
    return (t < keep).to(attention_mask.dtype)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Exercise 11's stand-in: the safetensors package."""
    from safetensors.torch import load_file

    return load_file(str(path))


# {exercise: [(module, attribute: a function or Class.method), stand-in]}
STAND_INS = {
    1: [("model", "attention", attention)],
    2: [("model", "pool", pool)],
    3: [("tsdae", "delete_words", delete_words)],
    4: [("tsdae", "DecoderLayer.forward", decoder_layer_forward)],
    5: [("tsdae", "TSDAELoss.forward", tsdae_loss_forward)],
    6: [("consert", "token_cutoff", token_cutoff), ("consert", "feature_cutoff", feature_cutoff)],
    7: [("consert", "shuffled_positions", shuffled_positions)],
    8: [("consert", "nt_xent", nt_xent)],
    10: [("consert", "span_mask", span_mask)],
    11: [("lib.weights", "read_safetensors", read_safetensors)],
}
