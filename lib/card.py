"""The model card: README.md of a trained model folder, as the Hugging Face Hub and sentence-transformers write it
(YAML front matter between --- lines, then Markdown), from plain data.

  ModelCard            what the card says: method, base model, corpus, settings, the command (strings and numbers)
  corpus_fingerprint   the corpus as (lines, SHA-256): two runs with the same one saw the same text
  model_card_text      README.md's text; with the folder, its vector size and maximum length
  write_model_card     README.md into a model folder

The caller fills a ModelCard: cli.model_card from a run's arguments (cli.non_default_settings, cli.command_line),
train.py as the run goes (steps, best dev score); model.SentenceEncoder.save_pretrained writes it. This file reads
a folder only through weights.py and knows no command line.

No YAML library: the front matter holds only strings and lists of strings, each written as a double-quoted YAML
scalar (yaml_string), which nothing in a value can break.

    card = ModelCard(method="TSDAE", base_model="bert-base-uncased", pooling="cls", corpus="corpus.txt",
                     corpus_lines=count, corpus_sha256=digest, steps=..., batch_size=..., lr=..., command=...)
    write_model_card(folder, card)        # folder: the model folder save_pretrained wrote (or is writing)
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from lib.weights import (POOLING_MODES, ModelLoadError, default_model_path, read_config, read_max_length,
                        read_pooling)

# The methods this repository trains: arXiv id and title of each paper.
PAPERS = {
    "TSDAE": ("2104.06979", "TSDAE: Using Transformer-based Sequential Denoising Auto-Encoder for Unsupervised "
                            "Sentence Embedding Learning"),
    "ConSERT": ("2105.11741", "ConSERT: A Contrastive Framework for Self-Supervised Sentence Representation Transfer"),
    "MLM": ("1810.04805", "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding"),
    "fine-tuning": ("1908.10084", "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks"),
}
LABELLED = {"fine-tuning"}  # the methods that train on labels (the others: "trained without labels")
CODE_LICENSE = "mit"  # the licence of the code that trained the model (LICENSE)
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")  # bert-base-uncased, org/name
SHIPPED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"  # the Hub id of what default_model_path() holds


@dataclass
class ModelCard:
    """What README.md says about a trained model. The caller (cli.model_card) fills it from a run's arguments."""

    method: str                  # one of PAPERS (another method needs paper_id and paper_title)
    base_model: str              # --model as given: a Hub id or a folder
    pooling: str                 # cls, mean or max: the folder's 1_Pooling
    corpus: str                  # the training sentences: the file as given, or a description
    steps: int                   # optimiser steps taken
    batch_size: int
    lr: float                    # peak learning rate
    command: str                 # the exact command line (cli.command_line())
    corpus_lines: int | None = None    # corpus_fingerprint(lines)[0]
    corpus_sha256: str | None = None   # corpus_fingerprint(lines)[1]
    non_default_settings: dict[str, object] = field(default_factory=dict)  # cli.non_default_settings(parser, args)
    dev_metric: str | None = None      # the model-selection score's name, e.g. "STS-b dev Spearman x 100"
    dev_score: float | None = None
    paper_id: str | None = None        # arXiv id; default: PAPERS[method]
    paper_title: str | None = None
    base_model_id: str | None = None   # the front matter's base_model, a Hub id (default: hub_base_model)
    datasets: list[str] = field(default_factory=list)  # Hub data set ids of the corpus, only when known
    license: str | None = None         # the weights' licence: the base model's, only when known (base_license)
    tags: list[str] = field(default_factory=list)      # tags beyond the standard ones
    load_path: str = "path/to/this/folder"  # what the loading examples open


def corpus_fingerprint(lines: Sequence[str]) -> tuple[int, str]:
    """(number of lines, SHA-256 hex of the lines each followed by '\\n', UTF-8): the sentences the run trained
    on, as read (blank lines already skipped), so two runs with the same fingerprint saw the same text. One pass
    over `lines`: a lib.corpus.Corpus streams from its file."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return len(lines), digest.hexdigest()


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
    """The YAML header: library_name, pipeline_tag, base_model (when known), tags, datasets, license (the base
    model's, when known), code_license (the training code's)."""
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
    lines.append(f"code_license: {yaml_string(CODE_LICENSE)}")
    return "\n".join(lines + ["---"])


def base_license(folder: Path) -> str | None:
    """The `license:` of a model folder's own card (README.md's front matter), or None."""
    try:
        text = (Path(folder) / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("---"):
        return None
    found = re.search(r"^license:\s*['\"]?([^'\"\n]+?)['\"]?\s*$", text.split("\n---", 1)[0], re.M)
    return found.group(1) if found else None


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
             f"A sentence encoder trained {'on labelled pairs' if card.method in LABELLED else 'without labels'} "
             f"with **{card.method}** "
             f"([arXiv:{paper_id}](https://arxiv.org/abs/{paper_id}), *{title}*), starting from "
             f"{markdown_cell(card.base_model)}. It maps a sentence to {size} ({card.pooling} pooling); compare "
             "two sentences by the cosine similarity of their vectors.", "",
             "## Training", "", *table(("setting", "value"), settings), ""]
    if card.non_default_settings:
        parts += ["Every setting that differs from the command's default:", "",
                  *table(("flag", "value"), list(card.non_default_settings.items())), ""]
    parts += ["The command that trained it:", "", code_block(card.command, "bash"), "", *usage(card, max_length), "",
              "## Licence", "",
              f"The weights derive from {markdown_cell(card.base_model)}"
              f"{f', licensed {card.license}' if card.license else ' (its licence was not found: check it)'}. "
              f"The code that trained them is under the {CODE_LICENSE.upper()} licence."]
    return "\n".join(parts)


def write_model_card(folder: Path, card: ModelCard) -> None:
    """README.md in a model folder (replacing one there). Call it after save_pretrained wrote the folder, or
    inside the same atomic_dir, so the card and the weights appear together."""
    text = model_card_text(card, folder)
    (Path(folder) / "README.md").write_text(text, encoding="utf-8", errors="backslashreplace")
