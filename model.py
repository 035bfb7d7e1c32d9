"""BERT written by hand on plain (B, L, d) tensors, and the sentence encoder built on it.

Read top to bottom:
  1. BertConfig           the few numbers that define a BERT (its config.json)
  2. Embeddings           word + position + segment vectors, LayerNorm, dropout
  3. attention            softmax(Q K^T / sqrt(d_head)) V, the formula
     MultiHeadAttention   h heads of it; keys and values from the sentence itself or from a `memory`
  4. FeedForward, EncoderLayer, Bert   post-LayerNorm residual blocks: embed, then run the layers
  5. MLMHead              BERT's masked-LM head (TSDAE's decoder reuses it)
  6. pool                 one vector per sentence: cls / mean / max (after_pooling: Normalize, Dense)
  7. SentenceEncoder      tokenizer + Bert + pooling: from_pretrained / encode / save_pretrained
  8. a later read, once BERT is done: what the other families add (PreNormEncoderLayer, RelativePositionBias,
     Rotary: ModernBERT's pre-LayerNorm blocks, MPNet's and ModernBERT's positions)

No objective and no training here. Three pieces exist for the methods: the `memory` of MultiHeadAttention (TSDAE's
cross-attention), Bert.forward split into embed and run_layers, with position_ids (where ConSERT makes its views),
and last2-mean pooling (ConSERT's official evaluation). The files on disk (safetensors, Hugging
Face names, Hub ids) are lib/weights.py's job; speed-ups are speedups/fast.py's (PackedBert: a Bert subclass,
chosen when the encoder is loaded: `SentenceEncoder.from_pretrained(path, bert_class=PackedBert)`).
Nothing to run here: `SentenceEncoder.from_pretrained("runs/tsdae/model").encode([...])` after training, or the
commands (`python tsdae.py --corpus FILE`), which load it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

import data
from lib import weights
from lib.card import ModelCard, write_model_card

# ----------------------------------------------------------------------------
# 1. Config


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768  # d
    num_hidden_layers: int = 12
    num_attention_heads: int = 12  # h
    intermediate_size: int = 3072  # the feed-forward's inner size
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0
    hidden_act: str = "gelu"
    # What the other checkpoint families change (weights.ARCHITECTURES sets these from their config.json):
    model_type: str = "bert"  # the Hugging Face layout to save back in
    embedding_size: int | None = None  # ELECTRA: embeddings this wide, projected to hidden_size (None: hidden_size)
    position_offset: int = 0  # RoBERTa / XLM-R: position ids count from pad_token_id + 1
    embedding_pad_id: int | None = None  # MPNet: the id its embeddings take for padding, 1 whatever pad_token_id
    # says (transformers' MPNetEmbeddings fixes it); None: pad_token_id
    attention_output_dropout: bool = True  # DistilBERT adds its attention output without dropout
    # (DistilBERT's other difference: no token-type embeddings, type_vocab_size 0)
    relative_attention_num_buckets: int | None = None  # MPNet: a learned bias per head and bucketed distance
    # ModernBERT (arXiv:2412.13663 §2.1): pre-LayerNorm blocks, GeGLU, no biases, rotary positions, local layers
    norm_first: bool = False  # LayerNorm before each block (not after), and one after the last layer
    gated_ffn: bool = False  # GeGLU feed-forward: GELU(x W_1) * (x W_2)
    bias: bool = True  # False: no bias in any Linear or LayerNorm
    global_rope_theta: float | None = None  # rotary positions with this base (global layers), no position vectors
    local_rope_theta: float | None = None  # the local layers' base
    local_attention: int | None = None  # a local layer's window: each query sees keys within local_attention // 2
    global_attn_every_n_layers: int | None = None  # layers 0, n, 2n, ... attend globally, the others locally

    @classmethod
    def from_dict(cls, values: dict) -> BertConfig:
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def is_local(self, layer: int) -> bool:
        """ModernBERT: does this layer attend within a window (local) rather than to the whole sentence?"""
        return bool(self.global_attn_every_n_layers) and layer % self.global_attn_every_n_layers != 0


# ----------------------------------------------------------------------------
# 2. Embeddings


class Embeddings(nn.Module):
    """token vector + position vector + segment vector, then LayerNorm and dropout (BERT §3)."""

    def __init__(self, cfg: BertConfig, lookup_class: type[nn.Embedding] = nn.Embedding):
        super().__init__()
        e = cfg.embedding_size or cfg.hidden_size
        pad_id = cfg.pad_token_id if cfg.embedding_pad_id is None else cfg.embedding_pad_id
        self.word = lookup_class(cfg.vocab_size, e, padding_idx=pad_id)  # the word vectors E (V, e)
        self.position = nn.Embedding(cfg.max_position_embeddings, e,  # (ModernBERT has none: Rotary)
                                     padding_idx=pad_id if cfg.position_offset else None
                                     ) if cfg.global_rope_theta is None else None
        self.token_type = nn.Embedding(cfg.type_vocab_size, e) if cfg.type_vocab_size else None
        self.norm = nn.LayerNorm(e, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.project = nn.Linear(e, cfg.hidden_size) if e != cfg.hidden_size else None  # ELECTRA's
        self.pad_id, self.offset = pad_id, cfg.position_offset

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, L); position_ids (B, L): each token's position in its sentence, 0, 1, ... by default."""
        B, L = input_ids.shape
        if position_ids is None and self.offset:  # RoBERTa counts the real tokens only, as transformers does, so a
            position_ids = (input_ids != self.pad_id).cumsum(1) - 1  # left-padded sentence gets its own positions
        elif position_ids is None:
            position_ids = torch.arange(L, device=input_ids.device).expand(B, L)  # (B, L)
        if self.offset:  # RoBERTa counts from pad_token_id + 1, and padding keeps pad_token_id
            position_ids = torch.where(input_ids == self.pad_id, self.pad_id, position_ids + self.offset)
        x = self.word(input_ids)  # (B, L, e)
        if self.position is not None:
            x = x + self.position(position_ids)
        if self.token_type is not None:  # all our inputs are single sentences: segment id 0 everywhere
            x = x + self.token_type.weight[0]
        x = self.dropout(self.norm(x))
        return x if self.project is None else self.project(x)  # (B, L, d)


# ----------------------------------------------------------------------------
# 3. Attention


# Exercise 1 (ASSIGNMENTS.md)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_head)) V ("Attention Is All You Need", eq. 1).

    q: (B, h, Lq, dh), k and v: (B, h, Lk, dh); mask: bool, broadcastable to (B, h, Lq, Lk), True = may attend;
    or float: added to the scores (MPNet's position bias, -inf where a query may not attend), as PyTorch's fused
    kernel reads a float mask. dropout_p: BERT's dropout on the attention probabilities (training only).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, Lq, Lk)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    probs = scores.softmax(dim=-1)  # each query's weights over the keys sum to 1
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs @ v  # (B, h, Lq, dh)


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention. The queries come from x; the keys and values from x too
    (self-attention) or from a `memory` (cross-attention, as in TSDAE's decoder).
    layer: the index of the encoder layer it serves (ModernBERT's positions and windows depend on it: Rotary,
    section 8); None for a cross-attention, whose queries see no positions."""

    def __init__(self, cfg: BertConfig, layer: int | None = None):
        super().__init__()
        assert cfg.hidden_size % cfg.num_attention_heads == 0
        self.n_heads = cfg.num_attention_heads
        self.q = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)
        self.k = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)
        self.v = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=cfg.bias)
        self.dropout_p = cfg.attention_probs_dropout_prob
        rotary = cfg.global_rope_theta is not None and layer is not None  # ModernBERT's positions (section 8)
        self.rotary = Rotary(cfg, local=cfg.is_local(layer)) if rotary else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                memory: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, Lq, d); memory: (B, Lk, d) or None (= x); mask: bool, broadcastable to (B, h, Lq, Lk)."""
        kv = x if memory is None else memory
        return self.out(self.attend(self.q(x), self.k(kv), self.v(kv), mask))  # (B, Lq, d)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Split the projections (B, L, d) into h heads, attend in each, and concatenate the heads again."""
        q, k, v, mask = self.heads(q, k, v, mask)  # (B, h, L, dh) each
        y = attention(q, k, v, mask, self.dropout_p if self.training else 0.0)  # (B, h, Lq, dh)
        return merge_heads(y)  # (B, Lq, d)

    def heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(B, L, d) -> (B, h, L, dh) each."""
        h = self.n_heads
        q, k, v = split_heads(q, h), split_heads(k, h), split_heads(v, h)
        if self.rotary is not None:  # ModernBERT (section 8): positions turn q and k; a local layer narrows the mask
            q, k, mask = self.rotary(q, k, mask)
        return q, k, v, mask


def split_heads(t: torch.Tensor, h: int) -> torch.Tensor:
    """(B, L, d) -> (B, h, L, d/h): head i reads features i*d/h ... (i+1)*d/h - 1."""
    B, L, d = t.shape
    return t.view(B, L, h, d // h).transpose(1, 2)


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, h, L, dh) -> (B, L, h*dh): the heads side by side again."""
    B, h, L, dh = y.shape
    return y.transpose(1, 2).reshape(B, L, h * dh)


# ----------------------------------------------------------------------------
# 4. Feed-forward and the encoder


class FeedForward(nn.Module):
    """d -> 4d -> d with BERT's exact (erf) GELU. ModernBERT's GeGLU (gated_ffn; Shazeer, arXiv:2002.05202):
    `up` makes twice the inner size, and its second half gates the first: down(GELU(x W_1) * (x W_2)); its config
    may name GELU's tanh approximation instead (hidden_act "gelu_pytorch_tanh")."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.gated = cfg.gated_ffn
        self.approximate = "tanh" if cfg.hidden_act == "gelu_pytorch_tanh" else "none"  # "none": the erf form
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size * (2 if self.gated else 1), bias=cfg.bias)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            inner, gate = self.up(x).chunk(2, dim=-1)
            return self.down(F.gelu(inner, approximate=self.approximate) * gate)
        return self.down(F.gelu(self.up(x), approximate=self.approximate))


class EncoderLayer(nn.Module):
    """Post-LayerNorm residual blocks: x = LN(x + Attn(x)); x = LN(x + FFN(x)). (ModernBERT's pre-LayerNorm
    blocks: PreNormEncoderLayer, section 8.)"""

    def __init__(self, cfg: BertConfig, attention_class: type[MultiHeadAttention] = MultiHeadAttention, layer: int = 0):
        super().__init__()
        self.attn = attention_class(cfg, layer)
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.attn_dropout = self.dropout if cfg.attention_output_dropout else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, L, d). Only self.attn looks across positions; the rest acts on each position alone (so the default
        run's fast.PackedBert can pass the real tokens' rows alone, (N, d), through the same code)."""
        x = self.attn_norm(x + self.attn_dropout(self.attn(x, mask)))  # (B, L, d)
        return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (B, L, d)


class Bert(nn.Module):
    """The BERT encoder: embed the tokens, then run N layers. `mlm_head` exists only when the checkpoint has one.
    A subclass may name other classes for two pieces: the layers' attention (speedups/fast.py's PackedBert), and
    the word lookup (its SparseLookupPackedBert). MPNet adds `relative_bias` (to every layer's scores), ModernBERT
    `final_norm` (section 8)."""

    attention_class: type[MultiHeadAttention] = MultiHeadAttention
    lookup_class: type[nn.Embedding] = nn.Embedding

    def __init__(self, cfg: BertConfig, with_mlm_head: bool = False):
        super().__init__()
        self.cfg = cfg
        self.embeddings = Embeddings(cfg, self.lookup_class)
        layer_class = PreNormEncoderLayer if cfg.norm_first else EncoderLayer  # ModernBERT's: section 8
        self.layers = nn.ModuleList([layer_class(cfg, self.attention_class, i)
                                     for i in range(cfg.num_hidden_layers)])
        self.relative_bias = RelativePositionBias(cfg) if cfg.relative_attention_num_buckets else None
        self.final_norm = (nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.bias)
                           if cfg.norm_first else None)
        self.mlm_head = MLMHead(cfg) if with_mlm_head else None
        self.apply(init_weights)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None = None,
                all_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """input_ids, attention_mask: (B, L); 1 in the mask = real token, 0 = padding. position_ids: (B, L) to
        override 0..L-1. Returns the last layer's states (B, L, d), or with all_layers the embedding output
        and every layer's. States at padding positions are meaningless: pooling skips them."""
        return self.run_layers(self.embed(input_ids, position_ids), attention_mask, all_layers)

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The embedding layer's output (B, L, d): what ConSERT's views change. (ModernBERT, whose positions are
        where a row sits (Rotary): given position_ids, a permutation of 0..L-1 per row, each token's row moves there;
        the states come out in that order, which mean and max pooling do not see.)"""
        x = self.embeddings(input_ids, position_ids)  # (B, L, d)
        if position_ids is not None and self.embeddings.position is None:
            x = torch.zeros_like(x).scatter(1, position_ids[..., None].expand_as(x), x)  # row t -> position_ids[t]
        return x

    def run_layers(self, x: torch.Tensor, attention_mask: torch.Tensor,
                   all_layers: bool = False) -> torch.Tensor | list[torch.Tensor]:
        """The N layers on an embedding output x (B, L, d)."""
        # (B, 1, 1, L): every query may see every real key
        mask = self.self_attention_mask(attention_mask.bool()[:, None, None, :])
        states = [x]
        for layer in self.layers:
            x = layer(x, mask)  # (B, L, d)
            if all_layers:
                states.append(x)
        x = self.finish(x)
        return [*states[:-1], x] if all_layers else x

    def self_attention_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The mask each layer's self-attention gets: `mask` (padding or causal) as it is, or with MPNet the
        relative position bias added ((B, h, L, L) float, -inf where `mask` is False)."""
        return mask if self.relative_bias is None else self.relative_bias(mask)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's output (B, L, d) as it is, or through ModernBERT's final LayerNorm."""
        return x if self.final_norm is None else self.final_norm(x)


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation: N(0, 0.02) weights, zero biases, LayerNorm = identity."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


# ----------------------------------------------------------------------------
# 5. Masked-LM head (BERT's `cls.predictions`)


class MLMHead(nn.Module):
    """logits = LN(GELU(W h + b)) E^T + bias, where E is the word-embedding matrix (tied, not copied).
    W maps the hidden size to E's width (ELECTRA's embedding_size)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        e = cfg.embedding_size or cfg.hidden_size
        self.dense = nn.Linear(cfg.hidden_size, e, bias=cfg.bias)
        self.norm = nn.LayerNorm(e, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.apply(init_weights)

    def transform(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(h)))  # (..., e)

    def forward(self, h: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(h), word_embeddings, self.bias)  # (..., V)


# ----------------------------------------------------------------------------
# 6. Pooling


# Exercise 2 (ASSIGNMENTS.md)
def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """One vector per sentence from token states. hidden: (B, L, d), attention_mask: (B, L) -> (B, d)."""
    if mode == "cls":
        return hidden[:, 0]  # the first token's state ([CLS])
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    if mode == "mean":  # average over real tokens only
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    if mode == "max":  # padding can never win the max
        return hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).amax(1)
    raise ValueError(f"unknown pooling '{mode}' (choose cls, mean or max)")


def after_pooling(vectors: torch.Tensor, modules: list[dict]) -> torch.Tensor:
    """sentence-transformers' modules after Pooling (modules.json; weights.read_after_pooling), on pooled vectors
    (N, d), in order: Dense, activation(W s + b) (N, d'); Normalize, s / |s| (all-MiniLM-L6-v2's last module)."""
    for module in modules:
        if module["kind"] == "Dense":
            vectors = getattr(nn, module["activation"])()(F.linear(vectors, module["weight"], module["bias"]))
        else:  # Normalize
            vectors = F.normalize(vectors, dim=-1)
    return vectors


# The official ConSERT evaluation pools the average of the last two layers ("last2avg"): an evaluation-time
# choice of SentenceEncoder, which a sentence-transformers folder cannot express.
LAST2_MEAN = "last2-mean"
POOLINGS = (*weights.POOLING_MODES, LAST2_MEAN)


# ----------------------------------------------------------------------------
# 7. SentenceEncoder: what users and the training scripts hold


def load_bert(folder: str | Path, bert_class: type[Bert] = Bert) -> Bert:
    """A Bert (of any family in weights.ARCHITECTURES) from a local Hugging Face folder, every tensor checked
    by name and shape. bert_class: Bert or a subclass with the same parameters (speedups/fast.py's PackedBert)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise weights.ModelLoadError(f"model folder {folder} does not exist")
    cfg = BertConfig.from_dict(weights.read_config(folder))
    state = weights.read_weights(folder, cfg.model_type)
    bert = bert_class(cfg, with_mlm_head=weights.has_mlm_head(state, cfg.model_type))
    weights.copy_weights({weights.hf_name(n, cfg.model_type): p for n, p in bert.named_parameters()}, state, folder)
    return bert


class SentenceEncoder(nn.Module):
    """Tokenizer + Bert + pooling. `encode` gives one float32 vector per sentence: the pooled vector, then the
    source folder's modules after Pooling (Normalize, Dense: after_pooling), as sentence-transformers gives it.
    `forward`, what the objectives train on, stops at the pooled vector: TSDAE's decoder reads it, and the
    cosine losses cannot tell it from its Normalize; those modules are never trained, and a Dense stays as it was."""

    def __init__(self, bert: Bert, tokenizer: Tokenizer, pooling: str = "mean", max_length: int = 256,
                 source: Path | None = None):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"unknown pooling '{pooling}' (choose {', '.join(POOLINGS)})")
        self.bert, self.tokenizer, self.pooling, self.max_length = bert, tokenizer, pooling, max_length
        self.source = source  # folder we were loaded from: its tokenizer files and modules travel with save_pretrained
        self.post_pooling = weights.read_after_pooling(source) if source is not None else []  # not parameters

    @classmethod
    def from_pretrained(cls, path: str | Path, pooling: str | None = None, max_length: int | None = None,
                        bert_class: type[Bert] = Bert) -> SentenceEncoder:
        """`path`: a local folder or a Hugging Face Hub id. pooling / max_length default to the folder's
        sentence-transformers settings, else mean / 256. bert_class: see load_bert."""
        folder = weights.resolve_model(path)
        bert = load_bert(folder, bert_class)
        pooling = pooling or weights.read_pooling(folder) or "mean"
        positions = bert.cfg.max_position_embeddings - bert.cfg.position_offset
        max_length = min(max_length or weights.read_max_length(folder) or 256, positions)
        return cls(bert, weights.load_tokenizer(folder), pooling, max_length, source=folder)

    @property
    def device(self) -> torch.device:
        return self.bert.embeddings.word.weight.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, L) ids and mask -> (B, d) sentence vectors."""
        if self.pooling == LAST2_MEAN:  # mean-pool each of the last two layers, average the two
            *_, second_last, last = self.bert(input_ids, attention_mask, all_layers=True)  # (B, L, d) each
            return (pool(second_last, attention_mask, "mean") + pool(last, attention_mask, "mean")) / 2
        return pool(self.bert(input_ids, attention_mask), attention_mask, self.pooling)

    @torch.inference_mode()
    def encode(self, sentences: list[str], batch_size: int = 64, show_progress: bool = False) -> torch.Tensor:
        """(N, d) float32 on CPU, in input order (d: the last Dense's width, if any). Sorted by length inside,
        so batches carry little padding."""
        was_training = self.training
        self.eval()
        ids = data.tokenize(self.tokenizer, list(sentences), self.max_length)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))  # longest first: a too-big batch fails early
        out = torch.empty(len(ids), self.bert.cfg.hidden_size)
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        for batch in data.progress(batches, desc="encode",
                                   disable=None if show_progress else True):  # None: on a terminal
            input_ids, mask = data.pad([ids[i] for i in batch], self.bert.cfg.pad_token_id,
                                       data.pad_multiple(self.device))
            out[batch] = self(input_ids.to(self.device), mask.to(self.device)).float().cpu()
        self.train(was_training)
        return after_pooling(out, self.post_pooling)  # (N, d)

    def save_pretrained(self, out_dir: str | Path, card: ModelCard | None = None) -> None:
        """A folder that transformers.AutoModel and sentence_transformers.SentenceTransformer load (the source
        folder's whole module stack, its pooler), with a model card (README.md) when one is given. Written to a
        temporary folder first and then renamed: a crash never leaves half a model."""
        if self.pooling == LAST2_MEAN:
            raise ValueError(f"a sentence-transformers folder cannot express {LAST2_MEAN} pooling; save with another")
        cfg = self.bert.cfg
        with weights.atomic_dir(Path(out_dir)) as tmp:
            tensors = weights.hf_tensors({n: p for n, p in self.bert.named_parameters()
                                          if not n.startswith("mlm_head.")}, cfg.model_type)
            tensors.update(weights.pooler_tensors(self.source, cfg.to_dict()))  # unused here; transformers wants it
            weights.write_safetensors(tensors, tmp / "model.safetensors")
            base = weights.read_json(self.source / "config.json", missing=None) if self.source else None
            weights.write_json(tmp / "config.json", weights.hf_config(cfg.to_dict(), base))
            weights.save_tokenizer(self.tokenizer, tmp, self.source, cfg.model_type)
            weights.write_sentence_transformers(tmp, self.pooling, self.max_length, cfg.hidden_size, self.source)
            if card is not None:
                write_model_card(tmp, card)


# ----------------------------------------------------------------------------
# 8. A later read: what the other families add (MPNet, ModernBERT)
#
# BERT's ideas end above. Two of the families model.py loads (lib/weights.py's ARCHITECTURES) see positions
# differently, and one puts its LayerNorms elsewhere; each piece below is chosen by a BertConfig field when
# the model is built, and the classes above only ask whether it is there.


class PreNormEncoderLayer(EncoderLayer):
    """ModernBERT's pre-LayerNorm blocks (norm_first; arXiv:2412.13663 §2.1.1): x = x + Attn(LN(x));
    x = x + FFN(LN(x)); its first layer has no LayerNorm before attention (the embeddings' output is already
    normalised), and Bert.finish adds one after the last layer. The same parameters as EncoderLayer."""

    def __init__(self, cfg: BertConfig, attention_class: type[MultiHeadAttention] = MultiHeadAttention, layer: int = 0):
        super().__init__(cfg, attention_class, layer)
        if layer == 0:
            self.attn_norm = nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn_dropout(self.attn(self.attn_norm(x), mask))  # (B, L, d)
        return x + self.dropout(self.ffn(self.ffn_norm(x)))  # (B, L, d)


class RelativePositionBias(nn.Module):
    """MPNet's relative positions (arXiv:2004.09297, pre-training setup; T5's, arXiv:1910.10683 §2.1): a learned
    number per head for the distance between a query and a key, added to the attention scores of every layer (one
    table for all of them), beside the absolute position vectors. Distances go into 32 buckets: 16 for keys before
    the query, 16 after; within each, distances 0..7 get a bucket each, and the rest 8 buckets on a log scale
    8 * 16^(k/8), k = 0..7: the k-th starts at distance 8, 12, 16, 23, 32, 46, 64, 91, the last holding 91 and
    beyond (tests/test_model.py)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.table = nn.Embedding(cfg.relative_attention_num_buckets, cfg.num_attention_heads)  # (32, h)

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        """mask: bool, broadcastable to (B, h, L, L) (padding or causal), True = may attend -> the float mask
        (B, h, L, L) or (h, L, L): the bias where a query may attend, -inf elsewhere."""
        L = mask.shape[-1]
        positions = torch.arange(L, device=mask.device)
        bias = self.table(self.bucket(positions[:, None] - positions[None, :])).permute(2, 0, 1)  # (h, L, L)
        return bias.masked_fill(~mask, float("-inf"))

    @staticmethod
    def bucket(distance: torch.Tensor, half: int = 16, exact: int = 8, far: int = 128) -> torch.Tensor:
        """distance = query position - key position (L, L) -> bucket ids in 0..2 * half - 1."""
        n = distance.abs()
        logarithmic = exact + (torch.log(n.clamp(min=exact).float() / exact) / math.log(far / exact)
                               * (half - exact)).long()  # 8..15: 8 + floor(8 log(n/8) / log 16)
        return (distance < 0).long() * half + torch.where(n < exact, n, logarithmic.clamp(max=half - 1))


class Rotary(nn.Module):
    """ModernBERT's positions (rotary, RoFormer arXiv:2104.09864 §3.4; ModernBERT §2.1.1): no position vector
    is added to the input; instead the query and key of the token at position t are turned, each pair of features
    (i, i + dh/2) by the angle t * theta^(-2i/dh). A query-key product then depends on their distance only.
    Global layers use a base theta of 160,000, local layers 10,000; a local layer's query also sees only the keys
    within local_attention // 2 positions of it."""

    def __init__(self, cfg: BertConfig, local: bool = False):
        super().__init__()
        self.theta = cfg.local_rope_theta if local else cfg.global_rope_theta
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.window = cfg.local_attention // 2 if local else None

    def forward(self, q: torch.Tensor, k: torch.Tensor,
                mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """q, k: (B, h, L, dh), turned; mask (bool, broadcastable to (B, h, L, L)) narrowed in a local layer."""
        if self.window is not None:
            positions = torch.arange(q.shape[-2], device=q.device)
            near = (positions[:, None] - positions[None, :]).abs() <= self.window  # (L, L): |t - t'| <= window
            itself = positions[:, None] == positions[None, :]  # a padding query far from every real key sees itself
            mask = near if mask is None else (mask & near) | itself  # (no row without keys: no NaN to spread)
        return self.turn(q), self.turn(k), mask

    def turn(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, h, L, dh), the query or key of the token at each position 0..L-1 -> x turned, same shape."""
        dh = self.head_dim
        frequencies = 1.0 / (self.theta ** (torch.arange(0, dh, 2, dtype=torch.float, device=x.device) / dh))
        angles = torch.arange(x.shape[-2], device=x.device).float()[:, None] * frequencies  # (L, dh/2)
        cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)  # (L, dh): feature i and i + dh/2 alike
        first, second = x.float().chunk(2, dim=-1)
        return (x.float() * cos + torch.cat((-second, first), dim=-1) * sin).to(x.dtype)
