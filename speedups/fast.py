"""The speed-ups of the default run, each a subclass that replaces named pieces of the plain code (the cached
gradient, which saves memory, is speedups/gradcache.py).

What runs by default: the command lines choose these classes when they build the objective, the plain code's
classes with `--plain`. The method itself (TSDAELoss.forward, ConSERTLoss.forward, every layer's forward) is
never restated here: each class below replaces the pieces the table names and inherits the rest.

  piece (default)            replaces (--plain)                          chosen where
  PackedBert                 model.Bert.run_layers, on the real tokens   SentenceEncoder.from_pretrained(...,
   (PackedAttention)          its layers' attention, on packed rows       bert_class=PackedBert):
                                                                          commands/tsdae_train, commands/consert_train
                                                                          (not --bucketing), evaluate, baselines/mlm
  SparseLookupPackedBert     also Bert's word lookup (SparseGradLookup)  TSDAE with a tied decoder
  PackedDecoder              tsdae.TSDAEDecoder.forward (with `keep`)    TSDAELoss(..., decoder_class=PackedDecoder)
   (SentenceVectorAttention)  a decoder layer's cross_attn
   .neg_log_likelihood       tsdae.TSDAEDecoder.neg_log_likelihood
    (VocabularyCrossEntropy)  its F.cross_entropy(F.linear(...))
  FusedAttention.attend      model.MultiHeadAttention.attend (CUDA)      inside PackedAttention, on CUDA tensors

  what each saves: PackedBert the encoder layers' work on padding; PackedDecoder the decoder's work where there is
  no label, SentenceVectorAttention Q, K, V and out at every token, VocabularyCrossEntropy 3 of 4 vocabulary-sized
  (T, V) tensors, the (V, d) zero-fills of E's gradient and fresh memory for it every step; FusedAttention one
  fused kernel per attention.

Every class has the plain one's parameters under the same names (a checkpoint loads either way) and, built from
the same seed, the same initial values. tests/test_fast.py shows that each gives the numbers of the plain piece it
replaces, on the real MiniLM weights (FusedAttention: tests/test_model.py, and tests/test_cuda.py on a GPU); bench/ab.py
measures what each one buys (figures in bench/README.md). One speed-up stays in the plain code as an argument of a
PyTorch call: the fused AdamW kernel (train.make_optimizer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import model
import tsdae

# ----------------------------------------------------------------------------
# Packing: the layers compute the real tokens only


@dataclass
class Packing:
    """Where the N kept tokens of a padded (B, L) batch sit. Every piece of a layer but attention works on one
    position at a time, so a layer can run on the kept tokens alone, packed into rows (N, d)."""

    index: torch.Tensor  # (N,) flat positions b * L + t of the kept tokens
    B: int
    L: int

    @classmethod
    def of(cls, keep: torch.Tensor) -> Packing:
        B, L = keep.shape
        return cls(keep.reshape(-1).nonzero().squeeze(1), B, L)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.B * self.L, -1).index_select(0, self.index)  # (B, L, d) -> (N, d)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        padded = x.new_zeros(self.B * self.L, x.shape[-1]).index_copy(0, self.index, x)  # zeros elsewhere
        return padded.view(self.B, self.L, -1)  # (N, d) -> (B, L, d)


@dataclass
class PackedMask:
    """What a layer passes to its attention as `mask` on packed rows: the plain mask, and where the rows sit."""

    keys: torch.Tensor  # the plain path's mask: (B, 1, 1, L) padding or (L, L) causal, True = may attend
    packing: Packing


class PackedAttention(model.MultiHeadAttention):
    """Replaces model.MultiHeadAttention.attend on packed rows (N, d): the projections act on the rows; for the
    formula, q, k and v are laid out as (B, L, d) (zeros where no row is), then the result is packed again. Equal:
    the kept positions see the same keys as in the plain layout (padding is masked; a causal prefix holds every
    earlier position). The formula: the plain one on CPU, where it was faster at sentence lengths, FusedAttention's
    kernel on CUDA. Given the plain layout (a plain mask, as a plain TSDAEDecoder passes), the plain attend."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: PackedMask) -> torch.Tensor:
        if not isinstance(mask, PackedMask):
            return super().attend(q, k, v, mask)  # (B, Lq, d)
        p = mask.packing
        formula = FusedAttention.attend if q.is_cuda else model.MultiHeadAttention.attend
        return p.pack(formula(self, p.unpack(q), p.unpack(k), p.unpack(v), mask.keys))  # (N, d)


class PackedBert(model.Bert):
    """Replaces model.Bert.run_layers; its layers' attention is a PackedAttention (the same parameters).

    Equal: the projections, feed-forward blocks, LayerNorms and residuals act on each position alone, so the plain
    EncoderLayer.forward on the packed real tokens gives the same real-token states. Padding states are 0
    (model.Bert's are meaningless there; pooling skips them).
    """

    attention_class = PackedAttention

    def run_layers(self, x: torch.Tensor, attention_mask: torch.Tensor,
                   all_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """model.Bert.run_layers on the real tokens only."""
        packing = Packing.of(attention_mask)
        mask = PackedMask(self.self_attention_mask(attention_mask.bool()[:, None, None, :]), packing)  # (B, 1, 1, L)
        h = packing.pack(x)  # (N, d): the real tokens only
        states = [x]
        for layer in self.layers:
            h = layer(h, mask)  # model.EncoderLayer.forward on the rows
            if all_layers:
                states.append(packing.unpack(h))
        h = packing.unpack(self.finish(h))  # (B, L, d), zeros at padding
        return [*states[:-1], h] if all_layers else h


# ----------------------------------------------------------------------------
# Attention as one fused kernel (CUDA)


class FusedAttention(model.MultiHeadAttention):
    """Replaces model.MultiHeadAttention.attend: the same formula, run by PyTorch as one fused kernel
    (F.scaled_dot_product_attention): on CUDA, flash or memory-efficient attention. PackedAttention runs it on CUDA
    only: on CPU the written-out formula was faster at sentence lengths (bench/README.md). Its dropout draws other
    random numbers than the plain formula's; in eval mode the results are equal (tests/test_model.py)."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        q, k, v, mask = self.heads(q, k, v, mask)  # (B, h, L, dh) each
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout_p if self.training else 0.0)
        return model.merge_heads(y)  # (B, Lq, d)


# ----------------------------------------------------------------------------
# TSDAE's decoder at the label positions only


@dataclass
class RowMemory:
    """What a packed decoder layer passes to its cross-attention as `memory`: the sentence vectors, and which
    sentence each row belongs to."""

    vectors: torch.Tensor  # (B, 1, d)
    sentence: torch.Tensor  # (N,)


class SentenceVectorAttention(model.MultiHeadAttention):
    """Replaces a TSDAE decoder layer's `cross_attn` (model.MultiHeadAttention with a memory of length 1), on rows.

    Equal: over a single key, softmax(Q K^T / sqrt(dh)) = 1 whatever Q and K are, so every position of every
    head receives that head's value of the sentence vector s. The Q and K projections change nothing (their
    gradient is exactly 0): they keep their places (a checkpoint's names are the plain ones) but are frozen and
    never run; V and the output projection run once per sentence, not per token.
    Attention dropout still drops each (position, head) weight, as in the plain version.
    """

    def __init__(self, cfg: model.BertConfig):
        super().__init__(cfg)
        self.q.requires_grad_(False)  # no gradient to give: DDP and the optimiser leave them alone
        self.k.requires_grad_(False)

    def forward(self, x: torch.Tensor, mask: None = None, memory: RowMemory | None = None) -> torch.Tensor:
        """x (N, d) rows (they only set the shape: the attention weights do not depend on the queries)."""
        # index_select, not [memory.sentence]: the backward of indexing (index_put_ with accumulate) adds the N rows
        # into the B sentences with parallel atomic adds on CPU (2+ threads, 32768+ numbers), in an order that varies
        # from run to run, so a resumed run drifted from an uninterrupted one (issue 56); index_add_ adds in order
        per_head = self.per_head(memory.vectors).index_select(0, memory.sentence)  # (N, h, d)
        # the attention probability (1) of each row and head, with BERT's dropout on probabilities
        probs = F.dropout(x.new_ones(len(x), 1, self.n_heads), self.dropout_p, self.training)  # (N, 1, h)
        y = (probs @ per_head).squeeze(1)  # (N, d)
        return y if self.out.bias is None else y + self.out.bias  # (ModernBERT's has no bias)

    def per_head(self, memory: torch.Tensor) -> torch.Tensor:
        """out(concat_h y_h) = sum_h W_out[:, h] y_h + b: each head's value of s, projected once per sentence."""
        B, _, d = memory.shape
        h = self.n_heads
        value = self.v(memory).view(B, h, d // h)  # (B, h, dh): each head's value of s
        return torch.einsum("ehk,bhk->bhe", self.out.weight.view(d, h, d // h), value)  # (B, h, d)


class PackedDecoder(tsdae.TSDAEDecoder):
    """Replaces tsdae.TSDAEDecoder.forward and .neg_log_likelihood, the two pieces TSDAELoss.forward calls (the
    same embeddings, layers and LM head; the layers' self-attention the PackedBert encoder's PackedAttention,
    their cross-attention a SentenceVectorAttention).

    forward: the decoder on the kept (label) positions only, as PackedBert for the encoder: the plain
        DecoderLayer.forward on packed rows. No later position of a sentence is kept, so (causal) none needs them.
    neg_log_likelihood: VocabularyCrossEntropy, which writes E's gradient into memory kept from step to step.
    """

    cross_attention_class = SentenceVectorAttention

    def __init__(self, encoder: model.Bert, tie: bool = True):
        if not isinstance(encoder.layers[0].attn, PackedAttention):
            raise TypeError("PackedDecoder runs the encoder's layers on packed rows: load the encoder with "
                            "bert_class=PackedBert (or SparseLookupPackedBert)")
        super().__init__(encoder, tie)
        self.kept = None  # the memory of E's gradient (gradient_memory)

    def forward(self, input_ids: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """The rows (T, d) of tsdae.TSDAEDecoder.forward(input_ids, memory, keep); without keep, (B, L, d)."""
        B, L = input_ids.shape
        if keep is None:
            return self(input_ids, memory, torch.ones_like(input_ids, dtype=torch.bool)).view(B, L, -1)
        packing = Packing.of(keep)
        positions = (packing.index % L)[None, :]  # (1, T): each token's position in its sentence
        x = self.embeddings(input_ids.reshape(1, -1)[:, packing.index], positions)[0]  # (T, d)
        rows = RowMemory(memory, packing.index // L)  # memory (B, 1, d): the sentence vectors
        causal = PackedMask(self.self_attention_mask(torch.ones(L, L, dtype=torch.bool, device=x.device).tril()),
                            packing)  # (L, L)
        for layer in self.layers:
            x = layer(x, rows, causal)  # tsdae.DecoderLayer.forward on the rows
        return self.finish(x)

    def neg_log_likelihood(self, states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        head, E = self.lm_head, self.embeddings.word.weight
        return VocabularyCrossEntropy.apply(head.transform(states), E, head.bias, labels,
                                            lambda: self.gradient_memory(E))

    def gradient_memory(self, E: torch.Tensor) -> torch.Tensor | None:
        """Where E's gradient (V x d floats: 47 MB for all-MiniLM-L6-v2, 94 MB for bert-base) is written when E.grad
        is None, on CPU: memory kept from step to step. A fresh tensor that large costs page faults every step (freed
        memory that large goes back to the system); here the memory stays (a numpy array) and each step gets a new
        tensor over it (torch.from_numpy). A reference to an old E.grad kept across steps would see the new gradient."""
        if E.device.type != "cpu" or E.dtype != torch.float32:
            return None
        if self.kept is None or self.kept.shape != tuple(E.shape):
            self.kept = np.empty(tuple(E.shape), dtype=np.float32)
        return torch.from_numpy(self.kept)


class VocabularyCrossEntropy(torch.autograd.Function):
    """sum_t -log softmax(h_t E^T + b)[y_t]: the decoder's vocabulary projection and its loss in one step.

    The same numbers as F.cross_entropy(F.linear(h, E, b), y, reduction="sum"), computed with a single (T, V)
    tensor: autograd would keep the logits and the log-probabilities and make two more (T, V) gradients. Here the
    backward turns the saved log-probabilities into d loss / d logits = softmax - onehot(y) in place.
    E's gradient is not handed to autograd: the backward adds it to E.grad itself (written into memory() when
    E.grad is None). This backward runs before the word lookups' (the decoder's states depend on them), so their
    sparse rows (SparseGradLookup) are then added into that dense E.grad in place: no (V, d) zero-fill. Call
    .backward() on the loss, not torch.autograd.grad, which would not see E's part.
    Under autocast the projection and its backward run in the autocast dtype, as F.linear's would, and the
    softmax in float32, as F.cross_entropy's does (then the backward makes one (T, V) copy in that dtype).
    """

    VOCAB_CHUNK = 1024  # on CPU, MKL runs the projection faster as (T, d) x (d, 1024) pieces than in one piece

    @staticmethod
    def forward(ctx, h: torch.Tensor, E: torch.Tensor, b: torch.Tensor, y: torch.Tensor,
                memory: Callable[[], torch.Tensor | None] | None = None) -> torch.Tensor:
        """h (T, d) decoder states at the label positions, E (V, d) the word-embedding Parameter, b (V,), y (T,)
        labels. memory(): where to write E's gradient when E.grad is None, or None (a fresh tensor)."""
        device = h.device.type
        ctx.dtypes, ctx.E, ctx.memory = (h.dtype, b.dtype), E, memory
        ctx.dt = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                  else torch.promote_types(h.dtype, torch.float32))  # the projection's dtype
        h = h.to(ctx.dt)
        logits = h.new_empty(len(h), len(E), dtype=torch.promote_types(ctx.dt, torch.float32))  # (T, V)
        for i in range(0, len(E), VocabularyCrossEntropy.VOCAB_CHUNK):
            v = slice(i, i + VocabularyCrossEntropy.VOCAB_CHUNK)
            if ctx.dt == logits.dtype:
                torch.addmm(b[v].to(ctx.dt), h, E[v].to(ctx.dt).T, out=logits[:, v])  # (T, chunk) = h E_v^T + b_v
            else:  # a lower-precision product, then stored in float32 for the softmax
                logits[:, v] = torch.addmm(b[v].to(ctx.dt), h, E[v].to(ctx.dt).T)
        log_probs = torch.log_softmax(logits, -1, out=logits)  # (T, V), in place: no second (T, V) tensor
        ctx.save_for_backward(h, log_probs, y)
        return -log_probs.gather(1, y[:, None]).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, torch.Tensor, None, None]:
        h, log_probs, y = ctx.saved_tensors
        E = ctx.E
        d_logits = log_probs.exp_()  # (T, V): softmax, in place of the log-probabilities
        d_logits[torch.arange(len(y), device=y.device), y] -= 1  # softmax - onehot(y)
        d_logits = d_logits.to(ctx.dt)
        # the loss's scalar gradient multiplies the small factors, never the (T, V) one
        d_h, d_b = (d_logits @ E.to(ctx.dt)) * grad, d_logits.sum(0) * grad
        if E.requires_grad:
            if E.grad is None:
                out = ctx.memory() if ctx.memory is not None and ctx.dt == E.dtype else None
                E.grad = (torch.mm(d_logits.T, h * grad, out=out) if out is not None
                          else (d_logits.T @ (h * grad)).to(E.dtype))  # (V, d)
            else:
                E.grad.add_((d_logits.T @ (h * grad)).to(E.dtype))
        return d_h.to(ctx.dtypes[0]), None, d_b.to(ctx.dtypes[1]), None, None  # (T, d), -, (V,)


class SparseGradLookup(nn.Embedding):
    """Replaces the word-embedding lookup's forward (model.Embeddings.word, an nn.Embedding: the same weight,
    initialisation and names): the same vectors, but the backward gives only the rows of the batch's tokens (a
    sparse gradient; autograd adds it into the dense E.grad that VocabularyCrossEntropy wrote). Its `sparse`
    stays False, nn.Embedding's word for a sparse weight.grad, which DDP reads: E.grad is dense here. For TSDAE
    with a tied decoder only, where the vocabulary projection's dense E.grad is there before the lookups' rows."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight, self.padding_idx, sparse=True)


class SparseLookupPackedBert(PackedBert):
    """PackedBert whose word lookup is a SparseGradLookup: TSDAE's encoder when the decoder is tied to it (the
    decoder then looks words up with the same module)."""

    lookup_class = SparseGradLookup
