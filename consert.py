"""ConSERT (Yan et al. 2021, arXiv:2105.11741): fine-tune a sentence encoder by telling two augmented views of
each sentence apart from the other sentences of the batch.

    sentence --embedding layer--> view 1 (e.g. feature cutoff) --Transformer layers--> mean pool --+
    sentence --embedding layer--> view 2 (e.g. token shuffle)  --Transformer layers--> mean pool --+-- NT-Xent

The views are made AT THE EMBEDDING LAYER (§3.3): the input words stay the same, only the position ids
or the embedding-layer output change. `model.Bert.forward` offers the two hooks this needs
(`position_ids`, `embedding_hook`); the views themselves live here. With NLI labels the contrastive loss
can be fused with a supervised classifier (§3.4: joint, sup-unsup, joint-unsup).

Read top to bottom:
  1. the views (§3.3)                  shuffle, token / feature cutoff, span, dropout, adversarial (FGV)
  2. the contrastive loss (§3.2)       nt_xent
  3. the objective (§3.2, §3.4)        ConSERTLoss: encode view 1, encode view 2, NT-Xent (+ NLI classifier)
  4. the data                          sentences, NLI pairs, the official STS training set
  5. the command line                  python consert.py --corpus sentences.txt
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

import data
import fast
import train
from model import MultiHeadAttention, SentenceEncoder, default_model_path, pool

# ----------------------------------------------------------------------------
# 1. Views (§3.3): how one encoder pass of a sentence differs from a plain one


@dataclass
class View:
    """The inputs of one encoder pass. A plain pass: the batch's attention mask and nothing else."""

    attention_mask: torch.Tensor  # (B, L), 1 = real token; span cutoff narrows it to the kept span
    position_ids: torch.Tensor | None = None  # (B, L); token shuffle permutes them
    embedding_hook: Callable[[torch.Tensor], torch.Tensor] | None = None  # cutoffs, dropout, adversarial


def random_subset(candidates: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """In row b of the bool matrix `candidates` (B, N), pick exactly counts[b] True positions, uniformly
    at random. Returns a bool matrix (B, N). One sort for the whole batch, no Python loop over sentences."""
    keys = torch.rand(candidates.shape, device=candidates.device).masked_fill(~candidates, 2.0)  # (B, N)
    order = keys.argsort(dim=1)  # (B, N): each row's candidates first, in random order
    first_k = torch.arange(candidates.shape[1], device=candidates.device) < counts[:, None]  # (B, N)
    return torch.zeros_like(candidates).scatter(1, order, first_k)  # position order[b, j] is picked iff j < k_b


# Exercise 7 (ASSIGNMENTS.md)
def shuffled_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Token shuffle: each sentence's real tokens ([CLS] and [SEP] included, as in the official code) get
    their position ids 0..n-1 in a random order; padding keeps its own. Returns position ids (B, L).
    The tokens stay where they are: only the position each one tells the encoder changes."""
    keys = torch.rand(attention_mask.shape, device=attention_mask.device)  # (B, L)
    keys = keys.masked_fill(attention_mask == 0, 2.0)  # padding sorts after every real token
    return keys.argsort(dim=1, stable=True)  # (B, L): a permutation of 0..n-1, then n, n+1, ... (stable)


# Exercise 6 (ASSIGNMENTS.md)
def token_cutoff(x: torch.Tensor, attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Zero int(n * rate) whole token rows of the embedding output x (B, L, d), among the n real tokens.
    The attention mask is unchanged: a cut token is still attended to, as a zero vector."""
    real = attention_mask.bool()  # (B, L)
    counts = (real.sum(1).double() * rate).long()  # (B,) int(n * rate), in double precision like Python's
    cut = random_subset(real, counts)  # (B, L)
    return x.masked_fill(cut[:, :, None], 0.0)


# Exercise 6 (ASSIGNMENTS.md)
def feature_cutoff(x: torch.Tensor, attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Zero int(d * rate) whole feature columns of the embedding output x (B, L, d), chosen per sentence."""
    B, L, d = x.shape
    everything = torch.ones(B, d, dtype=torch.bool, device=x.device)
    cut = random_subset(everything, torch.full((B,), int(d * rate), device=x.device))  # (B, d)
    return x.masked_fill(cut[:, None, :], 0.0)


def embedding_dropout(x: torch.Tensor, attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """ConSERT's "dropout" view: zero int(n * d * rate) random entries of the real tokens' embeddings.
    Unlike nn.Dropout there is no 1/(1 - rate) rescaling of the rest (the official code only zeroes)."""
    B, L, d = x.shape
    real = attention_mask.bool()[:, :, None].expand(B, L, d).reshape(B, L * d)  # (B, L*d)
    counts = (attention_mask.sum(1).double() * d * rate).long()  # (B,)
    cut = random_subset(real, counts).view(B, L, d)
    return x.masked_fill(cut, 0.0)


# Exercise 10 (ASSIGNMENTS.md)
def span_mask(attention_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Span cutoff: keep one contiguous span of max(int(n * (1 - rate)), 1) real tokens at a random start;
    the rest is masked out of attention and of pooling. Returns the new attention mask (B, L).
    (The official code also zeroes the ids outside the span but mean-pools over the original mask;
    here the masked tokens are simply gone: nothing attends to them and the pooling skips them.)"""
    n = attention_mask.sum(1)  # (B,)
    keep = (n.double() * (1 - rate)).long().clamp(min=1)  # (B,)
    start = (torch.rand(n.shape, device=n.device) * (n - keep + 1)).long()  # (B,) uniform in 0..n-keep
    start = torch.minimum(start, n - keep)  # float rounding must never push the span past the sentence
    t = torch.arange(attention_mask.shape[1], device=n.device)[None, :]  # (1, L)
    return ((t >= start[:, None]) & (t < (start + keep)[:, None])).to(attention_mask.dtype)


# Every view but "adversarial" (which needs a loss gradient, see `fgv_perturbation`): name -> (mask, rate) -> View.
VIEWS: dict[str, Callable[[torch.Tensor, float], View]] = {
    "none": lambda mask, rate: View(mask),
    # SimCSE (Gao et al. 2021): no augmentation; the encoder's own dropout is the only difference between passes
    "simcse": lambda mask, rate: View(mask),
    "shuffle": lambda mask, rate: View(mask, position_ids=shuffled_positions(mask)),
    "token_cutoff": lambda mask, rate: View(mask, embedding_hook=lambda x: token_cutoff(x, mask, rate)),
    "feature_cutoff": lambda mask, rate: View(mask, embedding_hook=lambda x: feature_cutoff(x, mask, rate)),
    "span": lambda mask, rate: View(span_mask(mask, rate)),
    "dropout": lambda mask, rate: View(mask, embedding_hook=lambda x: embedding_dropout(x, mask, rate)),
}
VIEW_NAMES = [*VIEWS, "adversarial"]


def fgv_perturbation(loss: torch.Tensor, embedding_output: torch.Tensor, norm: float) -> torch.Tensor:
    """Adversarial view, Fast Gradient Value (§3.3): r = norm * g / ||g|| per token, g = d loss / d embedding output.
    Added to the embedding output, r moves every token by `norm` in the direction that raises `loss` fastest
    (to first order). Padding rows have g = 0 and get r = 0. r is a constant: no gradient flows through it."""
    (g,) = torch.autograd.grad(loss, embedding_output, retain_graph=True)  # (B, L, d)
    return norm * g / (g.norm(dim=-1, keepdim=True) + 1e-10)  # (B, L, d); 1e-10 as in the official code


# ----------------------------------------------------------------------------
# 2. The contrastive loss (§3.2): NT-Xent, as the official code computes it


# Exercise 8 (ASSIGNMENTS.md)
def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float, same: torch.Tensor | None = None) -> torch.Tensor:
    """z1, z2: (N, d), row i of both = two views of sentence i. For each of the 2N items the other view of
    the same sentence is the positive and the other 2N-2 items of both views are negatives (2N-1 candidates).
    Loss = mean cross-entropy of view 1's rows + that of view 2's rows (the official code sums both).

    same: (N, N) bool, same[i, j] = sentences i and j are identical (default: only i = j). A batch can hold
    one sentence twice (a corpus with repeated lines); a copy is then left out of the other's candidates, so a
    sentence never counts an identical copy of itself as a negative. Masking, not dropping the copy: the batch
    keeps its size and every line of the corpus is still trained on, as the corpus repeats it."""
    N = len(z1)
    z = F.normalize(torch.cat([z1, z2]).float(), dim=-1)  # (2N, d), unit length: dot product = cosine
    sim = z @ z.T / temperature  # (2N, 2N)
    positive = torch.arange(2 * N, device=z.device).roll(N)  # item i of view 1 <-> item i of view 2
    if same is None:
        same = torch.eye(N, dtype=torch.bool, device=z.device)
    left_out = same.repeat(2, 2)  # (2N, 2N): the item itself, its other view, and any copy in either view
    left_out[torch.arange(2 * N, device=z.device), positive] = False  # ... but the positive stays a candidate
    sim = sim.masked_fill(left_out, float("-inf"))
    per_item = F.cross_entropy(sim, positive, reduction="none")  # (2N,)
    return per_item[:N].mean() + per_item[N:].mean()


# ----------------------------------------------------------------------------
# 3. The training objective: contrastive, supervised (§3.4), or both


def switch_off_dropout(encoder: SentenceEncoder) -> None:
    """The official unsupervised runs (--no_dropout) set every dropout of BERT to 0, so the views are the
    only randomness. Only the modules change: the saved config keeps the checkpoint's dropout values."""
    for module in encoder.bert.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if isinstance(module, MultiHeadAttention):
            module.dropout_p = 0.0


# The classifier's input for an NLI pair with sentence vectors u, v (§3.4). The paper, like SBERT, uses
# (u, v, |u - v|); every official supervised script adds max(u, v)^2 (--concatenation_sent_max_square).
NLI_FEATURES: dict[str, Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]]] = {
    "u,v,|u-v|": lambda u, v: [u, v, (u - v).abs()],
    "u,v,|u-v|,max(u,v)^2": lambda u, v: [u, v, (u - v).abs(), torch.maximum(u, v).square()],
}


class ConSERTLoss(nn.Module):
    """Encoder (+ NLI classifier); forward(batch) -> the loss of one batch.

    A batch of unlabelled sentences {input_ids, attention_mask, sentence_keys}:  cl_weight * NT-Xent(view 1, view 2).
    A batch of NLI pairs {premise_*, hypothesis_*, labels} (needs nli_classes > 0): the supervised loss,
    softmax cross-entropy of a linear classifier on `nli_features` of the plain, unaugmented vectors (§3.4);
    with joint=True plus cl_weight * (NT-Xent of the premises' views + NT-Xent of the hypotheses' views).
    The *_keys of a batch number its sentences, equal for identical ones (see collate_sentences, nt_xent).

    cl_weight: the official code multiplies the contrastive loss by cl_rate = 0.15 in every setting, also
    when it is the only loss; with AdamW a constant factor then matters only through gradient clipping.
    """

    def __init__(self, encoder: SentenceEncoder, views: tuple[tuple[str, float], tuple[str, float]],
                 temperature: float = 0.1, cl_weight: float = 0.15, adv_norm: float = 1.0,
                 nli_classes: int = 0, joint: bool = False, local_negatives: bool = False,
                 nli_features: str = "u,v,|u-v|,max(u,v)^2"):
        super().__init__()
        names = [name for name, _ in views]
        if any(name not in VIEW_NAMES for name in names):
            raise ValueError(f"unknown view in {names}; choose from {', '.join(VIEW_NAMES)}")
        if names == ["adversarial", "adversarial"]:
            raise ValueError("only one view can be adversarial: both would be the same perturbation")
        # NT-Xent treats its two views alike, so their order is free: an unaugmented view first (it can reuse
        # the plain pass the supervised loss makes anyway), an adversarial one last (it needs the other view)
        self.views = sorted(views, key=lambda view: {"none": 0, "simcse": 0, "adversarial": 2}.get(view[0], 1))
        self.encoder = encoder
        self.temperature, self.cl_weight, self.adv_norm, self.joint = temperature, cl_weight, adv_norm, joint
        self.local_negatives = local_negatives
        self.nli_features = NLI_FEATURES[nli_features]
        n_features = len(self.nli_features(torch.zeros(1), torch.zeros(1)))  # 3 or 4 vectors of size d
        self.classifier = nn.Linear(n_features * encoder.bert.cfg.hidden_size, nli_classes) if nli_classes else None

    def encode(self, input_ids: torch.Tensor, view: View) -> torch.Tensor:
        """One encoder pass under `view`: mean of the last layer over the view's tokens (official training). (B, d)"""
        hidden = self.encoder.bert(input_ids, view.attention_mask, position_ids=view.position_ids,
                                   embedding_hook=view.embedding_hook)  # (B, L, d)
        return pool(hidden, view.attention_mask, self.encoder.pooling)

    def contrastive(self, input_ids: torch.Tensor, mask: torch.Tensor, keys: torch.Tensor,
                    plain: tuple[torch.Tensor, torch.Tensor] | None = None,
                    supervised_loss: torch.Tensor | None = None) -> torch.Tensor:
        """NT-Xent between two views of these sentences (§3.2): encode view 1, encode view 2, compare.
        `plain` (from plain_pass): the unaugmented vectors, reused as a "none"/"simcse" view as the official
        code does, and the embedding output that the adversarial view perturbs."""
        (name1, rate1), (name2, rate2) = self.views
        if plain is not None and name1 in ("none", "simcse"):
            z1 = plain[0]  # (B, d)
        else:
            z1 = self.encode(input_ids, VIEWS[name1](mask, rate1))  # (B, d)
        if name2 == "adversarial":
            z2 = self.adversarial_view(input_ids, mask, keys, plain, z1, supervised_loss)
        else:
            z2 = self.encode(input_ids, VIEWS[name2](mask, rate2))  # (B, d)
        return self.batch_nt_xent(z1, z2, keys)

    def plain_pass(self, input_ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Vectors of the unaugmented sentences (B, d), and the embedding output (B, L, d) they came from
        (the adversarial view needs the loss gradient with respect to it)."""
        kept = []

        def keep(x: torch.Tensor) -> torch.Tensor:
            kept.append(x)
            return x

        z = self.encode(input_ids, View(mask, embedding_hook=keep))
        return z, kept[0]

    def adversarial_view(self, input_ids: torch.Tensor, mask: torch.Tensor, keys: torch.Tensor,
                         plain: tuple[torch.Tensor, torch.Tensor], other: torch.Tensor,
                         supervised_loss: torch.Tensor | None) -> torch.Tensor:
        """§3.3: FGV on the supervised loss. Without labels, the contrastive loss between the plain pass and the
        other view is attacked instead: this unsupervised variant is this project's extension. (B, d)"""
        plain_z, embedding_output = plain
        if supervised_loss is None:
            supervised_loss = nt_xent(plain_z, other, self.temperature, keys[:, None] == keys[None, :])
        r = fgv_perturbation(supervised_loss, embedding_output, self.adv_norm)  # (B, L, d)
        return self.encode(input_ids, View(mask, embedding_hook=lambda x: x + r))

    def batch_nt_xent(self, z1: torch.Tensor, z2: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """NT-Xent over the whole batch (on one process: nt_xent). Under torchrun each process holds part of
        it: the vectors of all processes are gathered, so negatives come from the global batch as on one
        device (§5.5: larger batches help). With local_negatives each process contrasts its own share only,
        and the loss is the mean over processes."""
        if self.local_negatives:
            loss = nt_xent(z1, z2, self.temperature, keys[:, None] == keys[None, :])
            return train.global_mean(loss, torch.tensor(1.0, device=z1.device))
        keys = train.gather_with_local_grad(keys)  # (N,): every process's sentences, in rank order
        z1, z2 = train.gather_with_local_grad(z1), train.gather_with_local_grad(z2)
        return nt_xent(z1, z2, self.temperature, keys[:, None] == keys[None, :])

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        adversarial = self.views[1][0] == "adversarial"
        if "labels" not in batch:  # unlabelled sentences
            ids, mask = batch["input_ids"], batch["attention_mask"]
            plain = self.plain_pass(ids, mask) if adversarial else None
            return self.cl_weight * self.contrastive(ids, mask, batch["sentence_keys"], plain)
        # §3.4: NLI pairs. u, v: the plain vectors of premise and hypothesis.
        a = self.plain_pass(batch["premise_ids"], batch["premise_mask"])
        b = self.plain_pass(batch["hypothesis_ids"], batch["hypothesis_mask"])
        u, v = a[0], b[0]  # (B, d) each
        logits = self.classifier(torch.cat(self.nli_features(u, v), dim=-1))  # (B, classes)
        supervised = train.global_mean(F.cross_entropy(logits.float(), batch["labels"], reduction="sum"),
                                       torch.tensor(len(logits), device=logits.device))  # mean over the global batch
        if not self.joint:
            return supervised
        contrastive = (self.contrastive(batch["premise_ids"], batch["premise_mask"], batch["premise_keys"], a, supervised)
                       + self.contrastive(batch["hypothesis_ids"], batch["hypothesis_mask"], batch["hypothesis_keys"],
                                          b, supervised))
        return supervised + self.cl_weight * contrastive


# ----------------------------------------------------------------------------
# 4. Data: unlabelled sentences, NLI pairs, the official STS training set


class SentenceDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> token ids of sentence i (the epoch is unused: the views are drawn in the model)."""

    def __init__(self, sentences: list[str], tokenizer: Tokenizer, max_length: int):
        self.sentences, self.tokenizer, self.max_length = sentences, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, key: tuple[int, int]) -> list[int]:
        return data.tokenize(self.tokenizer, [self.sentences[key[1]]], self.max_length)[0]


def sentence_keys(items: list[list[int]]) -> torch.Tensor:
    """A number per sentence, equal exactly for identical token sequences (Python's hash of the ids, the same in
    every process): how nt_xent recognises a sentence's copies in a batch. (N,) int64"""
    return torch.tensor([hash(tuple(ids)) for ids in items], dtype=torch.long)


def collate_sentences(items: list[list[int]], pad_id: int = 0, multiple: int = 1) -> dict[str, torch.Tensor]:
    input_ids, attention_mask = data.pad(items, pad_id, multiple)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "sentence_keys": sentence_keys(items)}


class NLIDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> (premise ids, hypothesis ids, label id) of pair i (pairs from data.read_nli)."""

    def __init__(self, pairs: list[tuple[str, str, int]], tokenizer: Tokenizer, max_length: int):
        self.pairs, self.tokenizer, self.max_length = pairs, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: tuple[int, int]) -> tuple[list[int], list[int], int]:
        premise, hypothesis, label = self.pairs[key[1]]
        p, h = data.tokenize(self.tokenizer, [premise, hypothesis], self.max_length)
        return p, h, label


def collate_nli(items: list[tuple[list[int], list[int], int]], pad_id: int = 0,
                multiple: int = 1) -> dict[str, torch.Tensor]:
    premise_ids, premise_mask = data.pad([p for p, _, _ in items], pad_id, multiple)
    hypothesis_ids, hypothesis_mask = data.pad([h for _, h, _ in items], pad_id, multiple)
    return {"premise_ids": premise_ids, "premise_mask": premise_mask, "hypothesis_ids": hypothesis_ids,
            "hypothesis_mask": hypothesis_mask, "labels": torch.tensor([label for _, _, label in items]),
            "premise_keys": sentence_keys([p for p, _, _ in items]),
            "hypothesis_keys": sentence_keys([h for _, h, _ in items])}


def sts_corpus(data_dir: str | Path) -> list[str]:
    """The official unsupervised training set (§4.1): every sentence of the STS12-16 inputs (scored or not),
    of the STS benchmark train/dev/test (the SentEval copies the official code reads) and of SICK
    train/trial/test, duplicates kept. No label is read. The official count is 89,192."""
    data_dir = Path(data_dir)
    sts = [data_dir / year / f"STS.input.{subset}.txt" for year, subsets in data.STS_SUBSETS.items() for subset in subsets]
    stsb = [data_dir / "stsbenchmark" / "senteval" / f"sts-{split}.csv" for split in ("train", "dev", "test")]
    sick = [data_dir / "sick" / f"SICK_{split}.txt" for split in ("train", "trial", "test_annotated")]
    for path in sts + stsb + sick:
        if not path.is_file():
            raise data.CorpusError(f"--sts-corpus: missing {path} (the README's \"Data\" section lists the layout)")
    sentences = [s for path in sts for line in data.read_lines(path) for s in line.split("\t")[:2]]
    sentences += [s for path in stsb for s1, s2, _ in data.load_stsb(path) for s in (s1, s2)]
    sentences += [s for path in sick for s1, s2, _ in data.load_sick(path) for s in (s1, s2)]
    return [s.strip() for s in sentences if s.strip()]


# ----------------------------------------------------------------------------
# 5. The command line


# The official scripts (yym6472/ConSERT, scripts/*-base.sh), stage by stage. A two-stage strategy runs its NLI
# stage into OUT/stage1, then the contrastive stage on the corpus from there (its best dev checkpoint, with
# --eval-data, as the official code saves only that one). Every command-line flag below overrides its entry.
#   strategy      stage     views                             lr     epochs  encoder dropout  early stopping
#   unsup         corpus    feature cutoff 0.2 + shuffle      5e-7   10      off              10 evaluations
#   sup           NLI       (none: the classifier only)       2e-5   1       on               -
#   joint         NLI       none + token cutoff 0.1           2e-5   1       on               -
#   sup-unsup     NLI, then sup as above; corpus: none + feature cutoff 0.1, 5e-7, 25 epochs, on, 10 evaluations
#   joint-unsup   NLI, then joint as above; corpus: none + shuffle, 5e-7, 25 epochs, on, 10 evaluations
CORPUS_VIEWS = {"unsup": (("feature_cutoff", 0.2), ("shuffle", 0.0)),
                "sup-unsup": (("none", 0.0), ("feature_cutoff", 0.1)),
                "joint-unsup": (("none", 0.0), ("shuffle", 0.0))}
NLI_VIEWS = (("none", 0.0), ("token_cutoff", 0.1))


@dataclass
class Stage:
    """One call of the training loop: "unsup" (contrastive on the corpus) or "sup"/"joint" (on NLI pairs)."""

    kind: str
    views: tuple[tuple[str, float], tuple[str, float]]
    lr: float
    epochs: int
    steps: int | None
    dropout: bool  # BERT's own dropout during this stage
    patience: int  # evaluations without a better dev score before stopping (0: never)


def stages(args: argparse.Namespace) -> list[Stage]:
    """The stages of args.strategy with the official settings above, where the command line does not say otherwise."""
    result = []
    for kind in args.strategy.split("-"):
        if kind == "unsup":
            second = args.strategy != "unsup"  # stage 2 of sup-unsup / joint-unsup
            views = pick_views(((args.view1, args.rate1), (args.view2, args.rate2)), CORPUS_VIEWS[args.strategy])
            result.append(Stage(kind, views, args.lr, args.epochs or (25 if second else 10), args.steps,
                                dropout_on(args.encoder_dropout, official=second, views=views),
                                10 if args.patience is None else args.patience))
        else:
            views = pick_views(((args.nli_view1, args.nli_rate1), (args.nli_view2, args.nli_rate2)), NLI_VIEWS)
            result.append(Stage(kind, views, args.nli_lr, args.nli_epochs, args.nli_steps,
                                dropout_on(args.nli_encoder_dropout, official=True, views=views), args.nli_patience))
    return result


def pick_views(given, official) -> tuple[tuple[str, float], tuple[str, float]]:
    """Each view as --viewN/--rateN give it, else the official view and rate (a view named without a rate: 0.2)."""
    chosen = []
    for (name, rate), (official_name, official_rate) in zip(given, official):
        default_rate = official_rate if name is None else 0.2
        chosen.append((name or official_name, default_rate if rate is None else rate))
    return tuple(chosen)


def dropout_on(setting: str, official: bool, views) -> bool:
    """--encoder-dropout on/off, or auto: the official setting, and always on when a view is the encoder's own dropout."""
    if setting != "auto":
        return setting == "on"
    return official or "simcse" in [name for name, _ in views]


def make_parser() -> train.ArgumentParser:
    p = train.ArgumentParser(
        description="Fine-tune a sentence encoder with ConSERT (arXiv:2105.11741): contrastive learning between two "
                    "views of each sentence made at the embedding layer, optionally fused with NLI supervision (§3.4). "
                    "Every default is the official scripts' (see the table at the top of consert.py's command-line "
                    "section): unsupervised, feature cutoff 0.2 + token shuffle, dropout off, temperature 0.1, "
                    "batch 96, lr 5e-7, 10 epochs. The author later found lr 2e-5 with temperature 0.05 better.",
        formatter_class=train.HelpFormatter,
    )
    src = p.add_argument_group("data")
    src.add_argument("--corpus", help="UTF-8 text file, one unlabelled sentence per line")
    src.add_argument("--sts-corpus", metavar="DATA_DIR",
                     help="instead of --corpus: every sentence of STS12-16, STS-b and SICK in DATA_DIR (official set)")
    src.add_argument("--nli", help="NLI pairs for the supervised strategies: .jsonl (premise, hypothesis, label) "
                                   "or a SICK file")
    src.add_argument("--strategy", default="unsup", choices=["unsup", "sup", "joint", "sup-unsup", "joint-unsup"],
                     help="unsup: contrastive on --corpus. With --nli (§3.4): sup = NLI classifier only; joint = "
                          "classifier + weighted contrastive on the NLI sentences; sup-unsup / joint-unsup = that, "
                          "into OUT/stage1, then contrastive on --corpus")
    src.add_argument("--bad-lines", default="error", choices=["error", "skip", "replace"],
                     help="what to do with input lines that are not UTF-8")
    src.add_argument("--max-length", type=int, default=64, help="tokens per sentence, longer ones are truncated")
    src.add_argument("--bucketing", action="store_true",
                     help="batches of similar length (faster) instead of the official plain shuffled batches; the "
                          "batch decides the negatives, so this changes what is learnt")
    aug = p.add_argument_group("the contrastive stage on the corpus (unsup, and stage 2 of sup-unsup / joint-unsup)")
    aug.add_argument("--view1", choices=VIEW_NAMES, help="first view (default: the strategy's official, see above)")
    aug.add_argument("--rate1", type=float, help="cutoff / span / dropout rate of view 1 (default: official, else 0.2)")
    aug.add_argument("--view2", choices=VIEW_NAMES, help="second view (default: the strategy's official)")
    aug.add_argument("--rate2", type=float, help="cutoff / span / dropout rate of view 2 (default: official, else 0.2)")
    aug.add_argument("--lr", type=float, default=5e-7, help="AdamW learning rate (published; the author later: 2e-5)")
    aug.add_argument("--epochs", type=int, help="passes over the corpus (default: 10 for unsup, 25 for a stage 2; "
                                                "ignored when --steps is given)")
    aug.add_argument("--steps", type=int, help="optimiser steps (default: --epochs passes of corpus size / batch size)")
    aug.add_argument("--encoder-dropout", default="auto", choices=["auto", "on", "off"],
                     help="BERT's own dropout; auto: off for unsup (official --no_dropout) unless a view is simcse, "
                          "on in a stage 2 (official)")
    aug.add_argument("--patience", type=int, help="with --eval-data: stop after this many evaluations without a better "
                                                  "dev score (default: 10, official; 0: never)")
    nli = p.add_argument_group("the NLI stage (sup, joint, and stage 1 of sup-unsup / joint-unsup)")
    nli.add_argument("--nli-view1", choices=VIEW_NAMES, help="joint: first view (default: none, official)")
    nli.add_argument("--nli-rate1", type=float, help="joint: rate of view 1 (default: official, else 0.2)")
    nli.add_argument("--nli-view2", choices=VIEW_NAMES, help="joint: second view (default: token_cutoff, official)")
    nli.add_argument("--nli-rate2", type=float, help="joint: rate of view 2 (default: 0.1, official)")
    nli.add_argument("--nli-lr", type=float, default=2e-5, help="AdamW learning rate")
    nli.add_argument("--nli-epochs", type=int, default=1, help="passes over --nli (ignored when --nli-steps is given)")
    nli.add_argument("--nli-steps", type=int, help="optimiser steps (default: --nli-epochs passes)")
    nli.add_argument("--nli-encoder-dropout", default="auto", choices=["auto", "on", "off"],
                     help="BERT's own dropout; auto = on (official)")
    nli.add_argument("--nli-patience", type=int, default=0,
                     help="with --eval-data: early stopping as --patience (0: never, as the official scripts)")
    nli.add_argument("--nli-features", default="u,v,|u-v|,max(u,v)^2", choices=list(NLI_FEATURES),
                     help="the classifier's input: the official scripts' (--concatenation_sent_max_square), or the "
                          "paper's and SBERT's u,v,|u-v|")
    both = p.add_argument_group("both stages")
    both.add_argument("--model", default=None,
                      help="Hugging Face BERT: a local folder or a Hub id such as bert-base-uncased "
                           "(default: the shipped all-MiniLM-L6-v2)")
    both.add_argument("--batch-size", type=int, default=96,
                      help="sentences (or NLI pairs) per step; under torchrun the global batch, split over the processes")
    both.add_argument("--temperature", type=float, default=0.1, help="NT-Xent temperature (§5.4)")
    both.add_argument("--adv-norm", type=float, default=1.0, help="per-token length of the adversarial perturbation")
    both.add_argument("--cl-weight", type=float, default=0.15, help="factor on the contrastive loss (official cl_rate)")
    both.add_argument("--local-negatives", action="store_true",
                      help="under torchrun: contrast each process's share of the batch only (default: all processes')")
    train.add_run_arguments(both, out="runs/consert")
    ev = p.add_argument_group("model selection (contrastive training degrades late: keep the best dev checkpoint)")
    ev.add_argument("--eval-data", default=None,
                    help="data folder with stsbenchmark/: log STS-b dev Spearman, keep the best encoder in OUT/best")
    ev.add_argument("--eval-every", type=int, default=200, help="steps between evaluations (official: 200)")
    ev.add_argument("--eval-pooling", default="mean", choices=["mean", "last2-mean"],
                    help="mean of the last layer, or the average of the mean-pooled last two layers (the official "
                         "evaluation); evaluation only, the saved model always uses plain mean pooling")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = make_parser()
    args = p.parse_args(argv)
    kinds = args.strategy.split("-")
    if "unsup" in kinds and bool(args.corpus) == bool(args.sts_corpus):
        p.error(f"--strategy {args.strategy} needs exactly one of --corpus and --sts-corpus")
    if kinds != ["unsup"] and not args.nli:
        p.error(f"--strategy {args.strategy} needs --nli")
    for view1, view2, dropout in (("view1", "view2", "encoder_dropout"), ("nli_view1", "nli_view2", "nli_encoder_dropout")):
        views = (getattr(args, view1), getattr(args, view2))
        if views == ("adversarial", "adversarial"):
            p.error("only one view can be adversarial")
        if getattr(args, dropout) == "off" and "simcse" in views:
            p.error("the simcse view is the encoder's own dropout: it needs the encoder's dropout on (or auto)")
    train.check_arguments(p, args, positive=("lr", "nli_lr", "temperature"),
                          at_least_one=("epochs", "steps", "nli_epochs", "nli_steps", "batch_size", "eval_every"),
                          ratios=("rate1", "rate2", "nli_rate1", "nli_rate2"))
    if (args.patience or 0) < 0 or args.nli_patience < 0:
        p.error("--patience and --nli-patience must be 0 or more")
    if args.max_length < 2:
        p.error(f"--max-length must be at least 2: [CLS] and [SEP] (got {args.max_length})")
    return args


def make_loader(stage: Stage, inputs: list, encoder: SentenceEncoder, args: argparse.Namespace, device: torch.device,
                rank: int = 0, world: int = 1) -> torch.utils.data.DataLoader:
    """Plain shuffled batches, as the official DataLoader(shuffle=True) gives them: the batch decides which
    sentences are each other's negatives. With --bucketing, batches of similar length (by the pair's length for NLI)."""
    if stage.kind == "unsup":
        dataset, collate = SentenceDataset(inputs, encoder.tokenizer, encoder.max_length), collate_sentences
        lengths = data.token_lengths(encoder.tokenizer, inputs, encoder.max_length)
    else:
        dataset, collate = NLIDataset(inputs, encoder.tokenizer, encoder.max_length), collate_nli
        lengths = (data.token_lengths(encoder.tokenizer, [p for p, _, _ in inputs], encoder.max_length)
                   + data.token_lengths(encoder.tokenizer, [h for _, h, _ in inputs], encoder.max_length))
    return data.make_loader(dataset, lengths, collate, encoder.bert.cfg.pad_token_id, args.batch_size, args.seed,
                            device, args.bucketing, args.workers, rank, world)


def run_stage(stage: Stage, model_dir: str | Path, out: Path, resume: bool, inputs: list, args: argparse.Namespace,
              device: torch.device) -> None:
    """One call of the shared training loop."""
    encoder = SentenceEncoder.from_pretrained(model_dir, pooling="mean", max_length=args.max_length)
    encoder.bert.mlm_head = None  # a checkpoint's masked-LM head is not used here (and DDP wants no idle weights)
    if not stage.dropout:
        switch_off_dropout(encoder)
    objective = ConSERTLoss(encoder, stage.views, args.temperature, args.cl_weight, args.adv_norm,
                            nli_classes=0 if stage.kind == "unsup" else len(data.NLI_LABELS), joint=stage.kind == "joint",
                            local_negatives=args.local_negatives, nli_features=args.nli_features)
    if not args.plain and not args.bucketing:  # length buckets hold almost no padding: packing would cost (fast.py)
        objective = fast.consert(objective)  # the same parameters and numbers, computed faster
    rank, world = train.init_distributed()
    loader = make_loader(stage, inputs, encoder, args, device, rank, world)
    steps = stage.steps or stage.epochs * len(loader.batch_sampler)
    eval_fn = None
    if args.eval_data:
        from evaluate import stsb_dev_spearman

        # the same weights, pooled as --eval-pooling says
        eval_fn = lambda enc: stsb_dev_spearman(SentenceEncoder(enc.bert, enc.tokenizer, args.eval_pooling,
                                                                enc.max_length), args.eval_data)
    # The official optimiser: AdamW (eps 1e-6, weight decay 0.01), 10% linear warm-up then linear decay, clip 1.0.
    settings = train.TrainSettings(out=out, steps=steps, lr=stage.lr, weight_decay=0.01, adam_eps=1e-6,
                                   warmup_ratio=0.1, schedule="linear", grad_clip=1.0, amp=args.amp,
                                   save_every=args.save_every, eval_every=args.eval_every, eval_fn=eval_fn,
                                   keep_best=eval_fn is not None, patience=stage.patience if eval_fn else 0,
                                   resume=resume)
    what = "sentences" if stage.kind == "unsup" else "NLI pairs"
    views = " + ".join(f"{name} {rate:g}" if name not in ("none", "shuffle", "simcse") else name for name, rate in stage.views)
    if rank == 0:
        print(f"ConSERT {stage.kind}: {len(inputs)} {what}, {steps} steps of {args.batch_size} at lr {stage.lr:g}"
              f"{f', views {views}' if stage.kind != 'sup' else ''}, encoder dropout {'on' if stage.dropout else 'off'}"
              f", on {world} x {device}{' (plain path)' if args.plain else ''}; saving to {out}")
    progress = train.train(encoder, objective, loader, settings, device)
    if progress["best"] is not None and rank == 0:
        print(f"best STS-b dev Spearman {progress['best']:.2f}: encoder saved to {out / 'best'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    device = train.device_for(args.device)
    # read every input first: bad input stops the run before any model is loaded or any file is written
    if args.eval_data:
        from evaluate import missing_file

        if problem := missing_file("stsb-dev", Path(args.eval_data)):
            raise data.CorpusError(f"--eval-data: {problem}")
    kinds = args.strategy.split("-")  # e.g. "joint-unsup": joint on NLI, then contrastive on the corpus
    nli = data.read_nli(args.nli, args.bad_lines) if kinds != ["unsup"] else None
    corpus = None
    if "unsup" in kinds:
        corpus = sts_corpus(args.sts_corpus) if args.sts_corpus else data.read_corpus(args.corpus, args.bad_lines)
    train.check_out_folder(out, args.resume, args.overwrite)
    train.init_distributed()
    torch.manual_seed(args.seed)
    model_dir = args.model or default_model_path()
    folders = [out / "stage1", out] if len(kinds) == 2 else [out]
    for stage, folder in zip(stages(args), folders):
        if folder != out and train.finished(folder):
            print(f"stage 1 ({stage.kind}) already finished in {folder}; continuing with stage 2")
        else:
            resume = args.resume and (folder / "checkpoint").exists()
            run_stage(stage, model_dir, folder, resume, corpus if stage.kind == "unsup" else nli, args, device)
        model_dir = folder / "best" if (folder / "best").exists() else folder / "model"
    if train.world_rank() == 0:
        print(f"done: encoder saved to {out / 'model'} (mean pooling)")
    return 0


if __name__ == "__main__":
    train.run_cli(main)
