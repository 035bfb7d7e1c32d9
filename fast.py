"""Every speed-up of this repository, each a drop-in replacement of one named plain piece.

The plain code (model.py, tsdae.py, consert.py) is the one to learn from. The command lines run the pieces
below by default; `--plain` runs the plain code. tests/test_fast.py shows that each piece gives the numbers
of the plain one it replaces, on the real MiniLM weights. `python bench/ab.py` measures what each one buys:
it alternates versions step by step in one process, each version leaving one piece out (figures: 2-core
CPU, MiniLM, batch 8, tsdae.py's random batches; 40 steps; the median per-step time with the piece / without
it; bench/README.md has the figures and why one piece shows only between processes).

  piece                     replaces                                 what it saves                    step time
  PackedBert                model.Bert                               the encoder's work on padding    TSDAE x0.98,
                                                                                                      encode x0.96
  SentenceVectorAttention   a TSDAE decoder layer's cross_attn       Q, K; V and out at every token   TSDAE x0.98
  LabelOnlyTSDAELoss        tsdae.TSDAELoss                          the decoder and LM head at       TSDAE x0.70
   (VocabularyCrossEntropy,                                          padding, 3 of 4 vocabulary-sized
   GradientLast, SparseGradLookup,                                   tensors, 47 MB of fresh memory
   gradient_memory)                                                  a step
  FusedAttention            model.MultiHeadAttention (CUDA only)     one fused kernel per attention   not measured (no GPU)
All together, TSDAE step x0.65 against the plain path; 2.07x sentence-transformers' sentences/s (bench/bench.py).

The entry points speed_up_encoder, speed_up_tsdae and speed_up_consert each RETURN a new object that shares
every Parameter with the plain one given, and never change the plain one. One speed-up stays in the plain code
as an argument of a PyTorch call: the fused AdamW kernel (train.make_optimizer).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import model

# ----------------------------------------------------------------------------
# Putting the pieces in


def speed_up_encoder(encoder: model.SentenceEncoder, device: torch.device) -> model.SentenceEncoder:
    """The encoder with PackedBert (and FusedAttention on CUDA). For `encode` and ConSERT."""
    return replaced(encoder, bert=fast_bert(encoder.bert, device))


def speed_up_tsdae(objective: nn.Module, device: torch.device) -> LabelOnlyTSDAELoss:
    """The fast version of a tsdae.TSDAELoss."""
    return LabelOnlyTSDAELoss(objective, device)


def speed_up_consert(objective: nn.Module, device: torch.device) -> nn.Module:
    """A consert.ConSERTLoss whose encoder runs PackedBert (for batches that hold padding: consert_train.py
    leaves it out with --bucketing)."""
    return replaced(objective, encoder=speed_up_encoder(objective.encoder, device))


def fast_bert(bert: model.Bert, device: torch.device) -> PackedBert:
    if device.type == "cuda":  # on CPU the plain formula is faster at sentence lengths (see FusedAttention)
        bert = replaced(bert, layers=nn.ModuleList([replaced(layer, attn=FusedAttention(layer.attn))
                                                   for layer in bert.layers]))
    return PackedBert(bert)


def replaced(module: nn.Module, **children: nn.Module) -> nn.Module:
    """A shallow copy of `module` with some of its children swapped: the same Parameters and other children, as
    in `module`, which stays as it was."""
    new = copy.copy(module)
    new._modules = {**module._modules, **children}
    return new


# ----------------------------------------------------------------------------
# Packing: the encoder computes the real tokens only


@dataclass
class Packing:
    """Where the N real tokens of a padded (B, L) batch sit. Every layer but attention works on one position
    at a time, so those layers can run on the real tokens alone, packed into (N, d)."""

    index: torch.Tensor  # (N,) flat positions b * L + t of the real tokens
    B: int
    L: int

    @classmethod
    def of(cls, attention_mask: torch.Tensor) -> Packing:
        B, L = attention_mask.shape
        return cls(attention_mask.reshape(-1).nonzero().squeeze(1), B, L)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.B * self.L, -1).index_select(0, self.index)  # (B, L, d) -> (N, d)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        padded = x.new_zeros(self.B * self.L, x.shape[-1]).index_copy(0, self.index, x)  # zeros at padding
        return padded.view(self.B, self.L, -1)  # (N, d) -> (B, L, d)


class PackedBert(nn.Module):
    """Replaces model.Bert (built from one: the very same embeddings and layers, not copies).

    Equal: the projections, feed-forward blocks, LayerNorms and residuals act on each position alone, so
    computing them on the packed real tokens gives the same real-token states; only attention needs the
    sentences, so q, k and v are laid out as (B, L, d) for it. Real-token states equal model.Bert's; padding
    states are 0 (model.Bert's are meaningless there; pooling skips them).
    Gain (bench/ab.py): TSDAE step x0.98, `encode` x0.96, ConSERT step on random batches x0.95; on length-bucketed
    ConSERT batches, which hold almost no padding, x1.03 (slower) in the last session and x0.93 in this one:
    consert_train.py still leaves it out there.
    """

    def __init__(self, bert: model.Bert):
        super().__init__()
        self.cfg, self.embeddings, self.layers, self.mlm_head = bert.cfg, bert.embeddings, bert.layers, bert.mlm_head
        self.train(bert.training)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None,
                all_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """The signature and results of model.Bert.forward."""
        return self.run_layers(self.embed(input_ids, position_ids), attention_mask, all_layers)

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.embeddings(input_ids, position_ids)  # (B, L, d)

    def run_layers(self, x: torch.Tensor, attention_mask: torch.Tensor,
                   all_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """model.Bert.run_layers on the real tokens only."""
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L)
        packing = Packing.of(attention_mask)
        h = packing.pack(x)  # (N, d): the real tokens only
        states = [x]
        for layer in self.layers:
            h = self.packed_layer(layer, h, mask, packing)
            if all_layers:
                states.append(packing.unpack(h))
        return states if all_layers else packing.unpack(h)  # (B, L, d), zeros at padding

    @staticmethod
    def packed_layer(layer: model.EncoderLayer, h: torch.Tensor, mask: torch.Tensor, packing: Packing) -> torch.Tensor:
        """model.EncoderLayer.forward on packed rows h (N, d)."""
        attn = layer.attn
        q, k, v = packing.unpack(attn.q(h)), packing.unpack(attn.k(h)), packing.unpack(attn.v(h))  # (B, L, d)
        a = attn.out(packing.pack(attn.attend(q, k, v, mask)))  # (N, d)
        h = layer.attn_norm(h + layer.attn_dropout(a))
        return layer.ffn_norm(h + layer.dropout(layer.ffn(h)))  # (N, d)


# ----------------------------------------------------------------------------
# Attention as one fused kernel (CUDA)


class FusedAttention(model.MultiHeadAttention):
    """Replaces model.MultiHeadAttention (built from one: the same q, k, v, out). The same formula, run by
    PyTorch as one fused kernel (F.scaled_dot_product_attention): on CUDA, flash or memory-efficient attention.
    Used on CUDA only: on CPU the written-out formula was faster at sentence lengths (2.3x at 14 tokens, 1.1x at
    60, timed alone on the 2-core CPU of bench/README.md). Its dropout draws other random numbers than the plain
    formula's; in eval mode the results are equal (tests/test_fast.py)."""

    def __init__(self, attn: model.MultiHeadAttention):
        nn.Module.__init__(self)
        self.n_heads, self.dropout_p, self.q, self.k, self.v, self.out = (
            attn.n_heads, attn.dropout_p, attn.q, attn.k, attn.v, attn.out)
        self.train(attn.training)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        B, Lq, d = q.shape
        split = lambda t: t.view(B, t.shape[1], self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, h, L, dh)
        y = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask,
                                           dropout_p=self.dropout_p if self.training else 0.0)  # (B, h, Lq, dh)
        return y.transpose(1, 2).reshape(B, Lq, d)


# ----------------------------------------------------------------------------
# TSDAE's cross-attention over one vector


class SentenceVectorAttention(nn.Module):
    """Replaces a TSDAE decoder layer's `cross_attn` (model.MultiHeadAttention with a memory of length 1).

    Equal: over a single key, softmax(Q K^T / sqrt(dh)) = 1 whatever Q and K are, so every position of every
    head receives that head's value of the sentence vector s. The Q and K projections change nothing (their
    gradient is exactly 0) and are left out; V and the output projection run once per sentence, not per token.
    Attention dropout still drops each (position, head) weight, as in the plain version.
    Built from the plain module: its v and out are the same Parameters. Gain: TSDAE step x0.98 (bench/ab.py, on the
    plain loss).
    """

    def __init__(self, attn: model.MultiHeadAttention):
        super().__init__()
        self.n_heads, self.dropout_p, self.v, self.out = attn.n_heads, attn.dropout_p, attn.v, attn.out
        self.train(attn.training)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, memory: torch.Tensor | None = None) -> torch.Tensor:
        B, L, d = x.shape  # x only sets the shape: the attention weights do not depend on the queries
        assert memory is not None and memory.shape == (B, 1, d), "the memory is one vector per sentence"
        # the attention probability (1) of each position and head, with BERT's dropout on probabilities
        probs = F.dropout(x.new_ones(B, L, self.n_heads), self.dropout_p, self.training)  # (B, L, h)
        return probs @ self.per_head(memory) + self.out.bias  # (B, L, d)

    def on_rows(self, sentence: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """The same for N packed positions, row n of sentence[n]: (N, d)."""
        per_head = self.per_head(memory)[sentence]  # (N, h, d)
        probs = F.dropout(per_head.new_ones(len(sentence), 1, self.n_heads), self.dropout_p, self.training)  # (N, 1, h)
        return (probs @ per_head).squeeze(1) + self.out.bias  # (N, d)

    def per_head(self, memory: torch.Tensor) -> torch.Tensor:
        """out(concat_h y_h) = sum_h W_out[:, h] y_h + b: each head's value of s, projected once per sentence."""
        B, _, d = memory.shape
        h = self.n_heads
        value = self.v(memory).view(B, h, d // h)  # (B, h, dh): each head's value of s
        return torch.einsum("ehk,bhk->bhe", self.out.weight.view(d, h, d // h), value)  # (B, h, d)


# ----------------------------------------------------------------------------
# TSDAE's loss: the vocabulary projection without vocabulary-sized temporaries


class VocabularyCrossEntropy(torch.autograd.Function):
    """sum_t -log softmax(h_t E^T + b)[y_t]: the decoder's vocabulary projection and its loss in one step.

    The same numbers as F.cross_entropy(F.linear(h, E, b), y, reduction="sum"), computed with a single
    (T, V) tensor: autograd would keep the logits and the log-probabilities and make two more (T, V)
    gradients. Here the backward turns the saved log-probabilities into d loss / d logits = softmax - onehot(y)
    in place. Its gradient of E is a fresh (V, d) tensor, which GradientLast needs.
    Under autocast the projection and its backward run in the autocast dtype, as F.linear's would, and the
    softmax in float32, as F.cross_entropy's does (then the backward makes one (T, V) copy in that dtype).
    """

    VOCAB_CHUNK = 1024  # on CPU, MKL runs the projection faster as (T, d) x (d, 1024) pieces than in one piece

    @staticmethod
    def forward(ctx, h: torch.Tensor, E: torch.Tensor, b: torch.Tensor, y: torch.Tensor,
                memory: Callable[[], torch.Tensor | None] | None = None) -> torch.Tensor:
        """h (T, d) decoder states at the label positions, E (V, d) word embeddings, b (V,), y (T,) labels.
        memory(): at the backward, where to write E's gradient, or None (LabelOnlyTSDAELoss.gradient_memory)."""
        device = h.device.type
        ctx.dtypes, ctx.memory = (h.dtype, E.dtype, b.dtype), memory
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
        ctx.save_for_backward(h, E, log_probs, y)
        return -log_probs.gather(1, y[:, None]).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None, None]:
        h, E, log_probs, y = ctx.saved_tensors
        d_logits = log_probs.exp_()  # (T, V): softmax, in place of the log-probabilities
        d_logits[torch.arange(len(y), device=y.device), y] -= 1  # softmax - onehot(y)
        d_logits = d_logits.to(ctx.dt)
        # the loss's scalar gradient multiplies the small factors, never the (T, V) one
        d_h, d_b = (d_logits @ E.to(ctx.dt)) * grad, d_logits.sum(0) * grad
        out = ctx.memory() if ctx.memory is not None and ctx.dt == ctx.dtypes[1] else None
        d_E = torch.mm(d_logits.T, h * grad, out=out) if out is not None else d_logits.T @ (h * grad)
        return d_h.to(ctx.dtypes[0]), d_E.to(ctx.dtypes[1]), d_b.to(ctx.dtypes[2]), None, None  # (T, d), (V, d), (V,)


class GradientLast(torch.autograd.Function):
    """y = x, but autograd delivers this use's gradient of x after all the others.

    TSDAE uses the word-embedding matrix E (V x d, 47 MB for BERT) three times: the encoder's lookup, the
    decoder's lookup and the vocabulary projection. A plain lookup's backward builds a dense (V, d) gradient
    (a 47 MB zero-fill, then an add), although only the rows of the batch's tokens are non-zero.
    LabelOnlyTSDAELoss instead makes the lookups sparse (SparseGradLookup) and reads E for the projection through
    this identity, created before both lookups. Of the backward steps that are ready, autograd runs the one
    created last first, so this one runs after the lookups'; autograd adds sparse rows into a dense gradient
    in place only when the dense one comes last. (x.view_as(x) alone is not enough: its backward hands on a
    view, which autograd never adds into in place.)
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class SparseGradLookup(nn.Module):
    """Replaces the word-embedding lookup (model.Embeddings.word, an nn.Embedding) with the same weight: the same
    vectors, but the backward gives only the rows of the batch's tokens (a sparse gradient; see GradientLast).
    Not an nn.Embedding: DDP would then expect the weight's whole gradient to be sparse, and it is dense."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.weight, self.padding_idx, self.sparse = embedding.weight, embedding.padding_idx, True

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight, self.padding_idx, sparse=self.sparse)


class LabelOnlyTSDAELoss(nn.Module):
    """Replaces tsdae.TSDAELoss (built from one: the same encoder, decoder and parameters).

    Equal: the same loss and gradients (tests/test_fast.py); four changes, all in how, not what:
      1. the encoder is a PackedBert, the decoder runs on its real positions only (decoder_states), and each
         decoder layer's cross-attention is a SentenceVectorAttention;
      2. the LM head runs only where there is a label, not on padding (the plain loss multiplies those by 0);
      3. VocabularyCrossEntropy: one (T, V) tensor where autograd makes four;
      4. sparse word-embedding lookups + GradientLast: no 47 MB zero-fill and copy per lookup.
    Gain: TSDAE step x0.70 (bench/ab.py).
    """

    def __init__(self, plain: nn.Module, device: torch.device):
        super().__init__()
        self.normalisation = plain.normalisation
        bert, decoder = plain.encoder.bert, plain.decoder
        sparse = lambda embeddings: replaced(embeddings, word=SparseGradLookup(embeddings.word))
        encoder_embeddings = sparse(bert.embeddings)
        tied = decoder.embeddings is bert.embeddings
        self.encoder = replaced(plain.encoder, bert=fast_bert(replaced(bert, embeddings=encoder_embeddings), device))
        layers = []
        for layer in decoder.layers:
            self_attn = FusedAttention(layer.self_attn) if device.type == "cuda" else layer.self_attn
            layers.append(replaced(layer, self_attn=self_attn, cross_attn=SentenceVectorAttention(layer.cross_attn)))
        self.decoder = replaced(decoder, embeddings=encoder_embeddings if tied else sparse(decoder.embeddings),
                                layers=nn.ModuleList(layers))
        self.kept = None  # the memory of E's gradient (gradient_memory)
        self.train(plain.training)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        E = self.decoder.embeddings.word.weight
        # the vocabulary projection's E, taken before any lookup so that its dense gradient comes last
        word_embeddings = GradientLast.apply(E)  # (V, d)
        sentence_vec = self.encoder(batch["damaged_ids"], batch["damaged_mask"])  # (B, d)
        original, mask = batch["original_ids"], batch["original_mask"]
        decoder_input, labels = original[:, :-1], original[:, 1:]  # (B, L-1) each
        # the positions with a label, T of them: no later position of a sentence is real, so (causal) none needs
        # the others; with right padding they are the real decoder inputs but each sentence's last ([SEP])
        packing = Packing.of(mask[:, 1:])
        states = self.decoder_states(decoder_input, sentence_vec, packing)  # (T, d)
        head = self.decoder.lm_head
        y = labels.reshape(-1)[packing.index]  # (T,)
        total = VocabularyCrossEntropy.apply(head.transform(states), word_embeddings, head.bias, y,
                                             lambda: self.gradient_memory(E))  # sum over T
        return total / self.count(batch)

    def gradient_memory(self, E: torch.Tensor) -> torch.Tensor | None:
        """Where E's gradient (47 MB for BERT) is written, on CPU: memory kept from step to step. A fresh 47 MB
        tensor costs page faults every step (freed memory that large goes back to the system); here the memory
        stays (a numpy array) and each step gets a new tensor over it (torch.from_numpy), which autograd takes
        as E.grad without a copy, as it takes any fresh tensor. Gain: the OS-kernel time of a step 35 -> 5 ms, and
        TSDAE training 1.79x -> 2.07x the library's sentences/s (bench/bench.py; within one process, as in
        bench/ab.py, freed memory comes back warm and the gain does not show). Used only when the
        last step's gradient has been dropped (E.grad is None, as zero_grad(set_to_none=True) leaves it); a
        reference to an old E.grad kept across steps would see the new gradient."""
        if E.grad is not None or E.device.type != "cpu" or E.dtype != torch.float32:
            return None
        if self.kept is None or self.kept.shape != tuple(E.shape):
            self.kept = np.empty(tuple(E.shape), dtype=np.float32)
        return torch.from_numpy(self.kept)  # not a view of another tensor: autograd may then add into it in place

    def decoder_states(self, input_ids: torch.Tensor, sentence_vec: torch.Tensor, packing: Packing) -> torch.Tensor:
        """tsdae.TSDAEDecoder.forward at the positions `packing` holds only, packed (N, d): every piece but the
        causal self-attention acts on one position at a time (as PackedBert, for the decoder)."""
        B, L = input_ids.shape
        flat = input_ids.reshape(1, -1)[:, packing.index]  # (1, N)
        positions = (packing.index % L)[None, :]  # (1, N): each token's position in its sentence
        x = self.decoder.embeddings(flat, positions)[0]  # (N, d)
        sentence = packing.index // L  # (N,): each row's sentence
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()  # (L, L)
        for layer in self.decoder.layers:
            attn = layer.self_attn
            q, k, v = packing.unpack(attn.q(x)), packing.unpack(attn.k(x)), packing.unpack(attn.v(x))  # (B, L, d)
            x = layer.self_attn_norm(x + layer.dropout(attn.out(packing.pack(attn.attend(q, k, v, causal)))))
            x = layer.cross_attn_norm(x + layer.dropout(layer.cross_attn.on_rows(sentence, sentence_vec[:, None])))
            x = layer.ffn_norm(x + layer.dropout(layer.ffn(x)))  # (N, d)
        return x

    def count(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """T, as tsdae.TSDAELoss.count: the label tokens or the sentences of the batch."""
        if self.normalisation == "tokens":
            return batch["original_mask"][:, 1:].sum()
        return torch.tensor(len(batch["original_ids"]), device=batch["original_ids"].device)
