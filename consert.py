"""ConSERT (Yan et al. 2021, arXiv:2105.11741): fine-tune a sentence encoder by telling two augmented views of
each sentence apart from the other sentences of the batch.

    sentence --embed--> view 1 (e.g. feature cutoff) --Transformer layers--> mean pool --+
    sentence --embed--> view 2 (e.g. token shuffle)  --Transformer layers--> mean pool --+-- NT-Xent

The views are made AT THE EMBEDDING LAYER (§3.2): the words stay the same; the position ids going into
`Bert.embed`, or its output or (span) the attention mask before `Bert.run_layers`, change (ConSERTLoss.encode,
its make_view).

Read top to bottom:
  1. the views (§3.2)                  shuffle, token / feature cutoff, span, dropout, adversarial (FGV)
  2. the contrastive loss (§3.1)       nt_xent
  3. the objective (§3.1)              ConSERTLoss: encode view 1, encode view 2, NT-Xent
  4. the adversarial view (§3.2)       AdversarialConSERTLoss(ConSERTLoss): FGV, also without labels
  5. NLI supervision (§3.3)            SupervisedConSERTLoss(AdversarialConSERTLoss): sup and joint
  6. its batches                       SentenceDataset, NLIDataset, their collate functions, sentence_keys
Sections are numbered as in the arXiv paper: §3.1 the framework and NT-Xent (eq. 1), §3.2 the views, §3.3 NLI
supervision (eq. 2), §4.1 the set-up, §5.2-§5.5 the studies of views, few-shot, temperature and batch size.
What runs: `--plain` runs these classes on model.Bert. By default they run on speedups/fast.py's PackedBert, whose
run_layers computes the real tokens only (the same numbers with dropout off; in training, other draws of the
dropout masks: tests/test_fast.py); with --bucketing on model.Bert. --micro-batch, --plain or not, runs
speedups/gradcache.py's subclasses.
The command line (the official settings of each strategy, stage by stage) is commands/consert_train.py's: `python
consert.py` hands over to it, and consert_train.build_objective picks the class for each stage.
"""
from __future__ import annotations

import runpy
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

from data import pad, tokenize
from lib.distributed import own_rows
from model import MultiHeadAttention, SentenceEncoder, pool

# ----------------------------------------------------------------------------
# 1. Views (§3.2): how one encoder pass of a sentence differs from an unaugmented one


@dataclass(frozen=True)
class View:
    """One augmentation of an encoder pass: its name (VIEW_NAMES) and, for cutoffs, span and dropout (every view but
    UNRATED_VIEWS), a rate."""

    name: str
    rate: float = 0.0


VIEW_NAMES = (
    "none",            # unaugmented
    "shuffle",         # token shuffle: the position ids of the real tokens permuted
    "token_cutoff",    # whole token rows of the embedding output zeroed
    "feature_cutoff",  # whole feature columns of the embedding output zeroed
    "span",            # one contiguous span kept, the rest masked out
    "dropout",         # random entries of the embedding output zeroed
    "simcse",          # unaugmented too; the encoder's own dropout differs between passes (SimCSE, arXiv:2104.08821)
    "adversarial",     # FGV: the unaugmented pass moved uphill on a loss (AdversarialConSERTLoss)
)
UNRATED_VIEWS = ("none", "shuffle", "simcse", "adversarial")  # the views without a rate: every other takes one


def check_views(views: tuple[View, View], names: Sequence[str] | None = VIEW_NAMES) -> None:
    """The views are among `names`, the ones the objective makes (None: checked before, as the command line's
    choices check them), and at most one is adversarial (both would be the same perturbation)."""
    if names is not None and any(view.name not in names for view in views):
        raise ValueError(f"unknown view in {[view.name for view in views]}; choose from {', '.join(names)}")
    if [view.name for view in views] == ["adversarial", "adversarial"]:
        raise ValueError("only one view can be adversarial: both would be the same perturbation")


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


def augment(x: torch.Tensor, attention_mask: torch.Tensor, view: View) -> tuple[torch.Tensor, torch.Tensor]:
    """The embedding output x (B, L, d) and the attention mask (B, L) under `view` (shuffle acts before, on the
    position ids; none, simcse and adversarial change nothing here)."""
    if view.name == "token_cutoff":
        return token_cutoff(x, attention_mask, view.rate), attention_mask
    if view.name == "feature_cutoff":
        return feature_cutoff(x, attention_mask, view.rate), attention_mask
    if view.name == "dropout":
        return embedding_dropout(x, attention_mask, view.rate), attention_mask
    if view.name == "span":
        return x, span_mask(attention_mask, view.rate)
    return x, attention_mask


def fgv_perturbation(loss: torch.Tensor, embedding_output: torch.Tensor, norm: float) -> torch.Tensor:
    """Adversarial view, Fast Gradient Value (§3.2): r = norm * g / ||g|| per token, g = d loss / d embedding output.
    Added to the embedding output, r moves every token by `norm` in the direction that raises `loss` fastest
    (to first order). Padding rows have g = 0 and get r = 0. r is a constant: no gradient flows through it."""
    (g,) = torch.autograd.grad(loss, embedding_output, retain_graph=True)  # (B, L, d)
    return norm * g / (g.norm(dim=-1, keepdim=True) + 1e-10)  # (B, L, d); 1e-10 as in the official code


# ----------------------------------------------------------------------------
# 2. The contrastive loss (§3.1): NT-Xent, as the official code computes it


# Exercise 8 (ASSIGNMENTS.md)
def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float, same: torch.Tensor | None = None) -> torch.Tensor:
    """NT-Xent (§3.1, eq. 1). z1, z2: (N, d), row i of both = two views of sentence i. With unit vectors r_k (the
    2N rows of z1 and z2), sim(a, b) = r_a . r_b / temperature, and p(k) = item k's other view:

        loss_k = -log( exp sim(k, p(k)) / sum over the 2N-1 items j != k of exp sim(k, j) )      (eq. 1)
        loss   = mean of loss_k over view 1's rows + mean over view 2's rows   (the official code sums both;
                 the paper's L_con, the mean over all 2N, is half of it)

    same: (N, N) bool, True where sentences i and j are identical (default: only i = j). A copy of a sentence
    is left out of its candidates: it is no negative of itself."""
    N = len(z1)
    r = F.normalize(torch.cat([z1, z2]).float(), dim=-1)  # (2N, d), unit length: dot product = cosine
    sim = r @ r.T / temperature  # (2N, 2N)
    positive = torch.arange(2 * N, device=r.device).roll(N)  # p(k): row i of view 1 <-> row i of view 2
    if same is None:
        same = torch.eye(N, dtype=torch.bool, device=r.device)
    # (2N, 2N): the item itself (j = k, eq. 1's 1[k != i]), and copies of its sentence in either view (not in eq. 1:
    # this repository's, docs/differences.md)
    left_out = same.repeat(2, 2)
    left_out[torch.arange(2 * N, device=r.device), positive] = False  # ... but p(k) stays a candidate
    per_item = F.cross_entropy(sim.masked_fill(left_out, float("-inf")), positive, reduction="none")  # (2N,) loss_k
    return per_item[:N].mean() + per_item[N:].mean()


# ----------------------------------------------------------------------------
# 3. The objective (§3.1): two views of every sentence of the batch, then NT-Xent between them


def switch_off_dropout(encoder: SentenceEncoder) -> None:
    """The official unsupervised runs (--no_dropout) set every dropout of BERT to 0, so the views are the
    only randomness. Only the modules change: the saved config keeps the checkpoint's dropout values."""
    for module in encoder.bert.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if isinstance(module, MultiHeadAttention):
            module.dropout_p = 0.0


class ConSERTLoss(nn.Module):
    """ConSERT's unsupervised objective (§3.1): for a batch of unlabelled sentences {input_ids, attention_mask,
    sentence_keys}, cl_weight * NT-Xent(view 1, view 2). The keys number the batch's sentences, equal for identical
    ones (sentence_keys, part 6 below): a copy of a sentence is no negative of it.

    cl_weight: the official code multiplies the contrastive loss by cl_rate = 0.15 in every setting, also
    when it is the only loss; with AdamW a constant factor then matters only through gradient clipping and eps.
    gather(x): the rows the losses compare, x itself (under torchrun, every process's: lib/distributed.py).
    Built on it below: the adversarial view (AdversarialConSERTLoss, part 4) and the NLI supervision
    (SupervisedConSERTLoss, part 5).
    """

    view_names = tuple(name for name in VIEW_NAMES if name != "adversarial")  # the views encode makes

    def __init__(self, encoder: SentenceEncoder, views: tuple[View, View], temperature: float = 0.1,
                 cl_weight: float = 0.15, gather: Callable[[torch.Tensor], torch.Tensor] = own_rows):
        super().__init__()
        check_views(views, self.view_names)
        self.encoder, self.views = encoder, views
        self.temperature, self.cl_weight, self.gather = temperature, cl_weight, gather

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids, mask, keys = batch["input_ids"], batch["attention_mask"], batch["sentence_keys"]
        z1 = self.encode(ids, mask, self.views[0])  # (B, d): view 1 of every sentence (§3.2)
        z2 = self.encode(ids, mask, self.views[1])  # (B, d): view 2
        return self.cl_weight * self.contrastive(z1, z2, keys)  # §3.1

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, view: View) -> torch.Tensor:
        """One encoder pass under `view` (§3.2): embed, make the view, run the layers, pool. (B, d)"""
        x = self.encoder.bert.embed(input_ids, shuffled_positions(attention_mask) if view.name == "shuffle" else None)
        x, attention_mask = self.make_view(x, attention_mask, view)  # (B, L, d): the view is made here
        return self.layers_and_pool(x, attention_mask)

    def make_view(self, x: torch.Tensor, attention_mask: torch.Tensor,
                  view: View) -> tuple[torch.Tensor, torch.Tensor]:
        """The embedding output (B, L, d) and attention mask (B, L) under `view`, as augment makes them."""
        return augment(x, attention_mask, view)

    def layers_and_pool(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The last layer, pooled as the encoder pools (encoder.pooling; commands/consert_train.py builds it with mean
        pooling over the real tokens, as the official training pools). (B, d)"""
        return pool(self.encoder.bert.run_layers(x, attention_mask), attention_mask, self.encoder.pooling)

    def contrastive(self, z1: torch.Tensor, z2: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """NT-Xent over the rows that `gather` gives: this batch's sentences, or under torchrun every process's."""
        z1, z2, keys = self.gather(z1), self.gather(z2), self.gather(keys)  # (N, d), (N, d), (N,)
        return nt_xent(z1, z2, self.temperature, same=keys[:, None] == keys[None, :])


# ----------------------------------------------------------------------------
# 4. The adversarial view (§3.2, FGV): the unaugmented pass, moved uphill on a loss


@dataclass
class UnaugmentedPass:
    """An encoder pass without augmentation: its vectors, and the embedding output they came from."""

    z: torch.Tensor  # (B, d)
    embedding_output: torch.Tensor  # (B, L, d): what the adversarial view perturbs, with its own dropout draw
    attention_mask: torch.Tensor  # (B, L)


class AdversarialConSERTLoss(ConSERTLoss):
    """ConSERTLoss whose views may include the adversarial one, made from an unaugmented pass of the batch; a
    "none" or "simcse" view IS that pass, as in the official code. The paper attacks the supervised loss
    (SupervisedConSERTLoss); on unlabelled sentences the loss attacked is the NT-Xent between the unaugmented pass
    and the other view (this project's extension; with the other view none or simcse, the pass against itself: the
    positives are then equal, and only the negatives' terms move r). adv_norm: the perturbation's length per token."""

    view_names = VIEW_NAMES

    def __init__(self, encoder: SentenceEncoder, views: tuple[View, View], temperature: float = 0.1,
                 cl_weight: float = 0.15, adv_norm: float = 1.0,
                 gather: Callable[[torch.Tensor], torch.Tensor] = own_rows):
        if views[0].name == "adversarial":  # NT-Xent treats its views alike; the adversarial one needs the other first
            views = views[::-1]
        super().__init__(encoder, views, temperature, cl_weight, gather)
        self.adv_norm = adv_norm

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids, mask, keys = batch["input_ids"], batch["attention_mask"], batch["sentence_keys"]
        return self.cl_weight * self.two_views(ids, mask, keys, self.unaugmented(ids, mask))

    def two_views(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keys: torch.Tensor,
                  unaugmented: UnaugmentedPass, attacked: torch.Tensor | None = None) -> torch.Tensor:
        """NT-Xent between the two views of these sentences (§3.1); an adversarial view 2 moved uphill on
        `attacked` (default: the NT-Xent between the unaugmented pass and view 1)."""
        view1, view2 = self.views
        z1 = self.vectors(input_ids, attention_mask, view1, unaugmented)  # (B, d)
        if view2.name != "adversarial":
            return self.contrastive(z1, self.vectors(input_ids, attention_mask, view2, unaugmented), keys)
        if attacked is None:
            attacked = self.contrastive(unaugmented.z, z1, keys)
        return self.contrastive(z1, self.adversarial(unaugmented, attacked), keys)

    def vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, view: View,
                unaugmented: UnaugmentedPass) -> torch.Tensor:
        """The vectors of one view (B, d): the unaugmented pass's for "none" and "simcse"."""
        if view.name in ("none", "simcse"):
            return unaugmented.z
        return self.encode(input_ids, attention_mask, view)

    def unaugmented(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> UnaugmentedPass:
        x = self.encoder.bert.embed(input_ids)  # (B, L, d)
        return UnaugmentedPass(self.layers_and_pool(x, attention_mask), x, attention_mask)

    def adversarial(self, unaugmented: UnaugmentedPass, loss: torch.Tensor) -> torch.Tensor:
        """§3.2, FGV: the unaugmented pass's own embedding output (same dropout draw; the gradient flows through
        it, as in the official code) moved by r uphill on `loss`, through the layers again. (B, d)"""
        r = fgv_perturbation(loss, unaugmented.embedding_output, self.adv_norm)  # (B, L, d)
        return self.layers_and_pool(unaugmented.embedding_output + r, unaugmented.attention_mask)


# ----------------------------------------------------------------------------
# 5. With NLI labels (§3.3): a classifier on the sentence pairs, alone or with the contrastive loss

# The classifier's input for an NLI pair with sentence vectors u, v (§3.3): the paper, like SBERT, uses
# (u, v, |u - v|); every official supervised script adds max(u, v)^2 (--concatenation_sent_max_square).
NLI_FEATURES = ("u,v,|u-v|,max(u,v)^2", "u,v,|u-v|")


def nli_features(u: torch.Tensor, v: torch.Tensor, kind: str) -> torch.Tensor:
    """(B, 4d) or (B, 3d) from u, v (B, d)."""
    parts = [u, v, (u - v).abs()]
    if kind == "u,v,|u-v|,max(u,v)^2":
        parts.append(torch.maximum(u, v).square())
    return torch.cat(parts, dim=-1)


class SupervisedConSERTLoss(AdversarialConSERTLoss):
    """NLI pairs {premise_*, hypothesis_*, labels, premise_keys, hypothesis_keys} (§3.3): the supervised loss,
    softmax cross-entropy of a linear classifier on nli_features(u, v) of the unaugmented vectors u, v of premise
    and hypothesis ("sup"); with joint=True plus cl_weight * (NT-Xent between the premises' two views + the same
    for the hypotheses), the adversarial view (if one) moved uphill on the supervised loss (§3.2). It is an
    AdversarialConSERTLoss for that reason: its two_views, vectors and unaugmented make the joint stage's views."""

    def __init__(self, encoder: SentenceEncoder, views: tuple[View, View], nli_classes: int, joint: bool = False,
                 nli_features: str = NLI_FEATURES[0], temperature: float = 0.1, cl_weight: float = 0.15,
                 adv_norm: float = 1.0, gather: Callable[[torch.Tensor], torch.Tensor] = own_rows):
        super().__init__(encoder, views, temperature, cl_weight, adv_norm, gather)
        self.joint, self.nli_feature_kind = joint, nli_features
        width = (4 if nli_features == NLI_FEATURES[0] else 3) * encoder.bert.cfg.hidden_size
        self.classifier = nn.Linear(width, nli_classes)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        premise = self.unaugmented(batch["premise_ids"], batch["premise_mask"])  # u
        hypothesis = self.unaugmented(batch["hypothesis_ids"], batch["hypothesis_mask"])  # v
        logits = self.classifier(nli_features(premise.z, hypothesis.z, self.nli_feature_kind))  # (B, classes)
        # §3.3, eq. 2: L_ce = CrossEntropy(W f + b, y), f = the features of (u, v); the mean over the pairs
        supervised = F.cross_entropy(self.gather(logits).float(), self.gather(batch["labels"]))
        if not self.joint:
            return supervised
        contrastive = (
            self.two_views(batch["premise_ids"], batch["premise_mask"], batch["premise_keys"], premise, supervised)
            + self.two_views(batch["hypothesis_ids"], batch["hypothesis_mask"], batch["hypothesis_keys"],
                             hypothesis, supervised))
        # §3.3: L_joint = L_ce + alpha L_con, alpha = cl_weight (0.15); L_con here is the premises' NT-Xent plus
        # the hypotheses', each as nt_xent computes it (the official code's, twice the paper's mean over 2N)
        return supervised + self.cl_weight * contrastive


# ----------------------------------------------------------------------------
# 6. The batches the objective reads: unlabelled sentences, or NLI pairs (§3.3), with keys for their copies.
# An item is built from its key (epoch, index) (data.BatchSampler); the collate function pads a batch of items.


class SentenceDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> token ids of sentence i."""

    def __init__(self, sentences: Sequence[str], tokenizer: Tokenizer, max_length: int):
        self.sentences, self.tokenizer, self.max_length = sentences, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, key: tuple[int, int]) -> list[int]:
        return tokenize(self.tokenizer, [self.sentences[key[1]]], self.max_length)[0]


def sentence_keys(items: list[list[int]]) -> torch.Tensor:
    """A number per sentence, equal exactly for identical token sequences (Python's hash of the ids, the same in
    every process): how ConSERT's NT-Xent recognises a sentence's copies in a batch. (N,) int64"""
    return torch.tensor([hash(tuple(ids)) for ids in items], dtype=torch.long)


def collate_sentences(items: list[list[int]], pad_id: int = 0, multiple: int = 1) -> dict[str, torch.Tensor]:
    input_ids, attention_mask = pad(items, pad_id, multiple)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "sentence_keys": sentence_keys(items)}


class NLIDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> (premise ids, hypothesis ids, label id) of pair i (lib.datafiles.read_nli's pairs)."""

    def __init__(self, pairs: list[tuple[str, str, int]], tokenizer: Tokenizer, max_length: int):
        self.pairs, self.tokenizer, self.max_length = pairs, tokenizer, max_length

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, key: tuple[int, int]) -> tuple[list[int], list[int], int]:
        premise, hypothesis, label = self.pairs[key[1]]
        p, h = tokenize(self.tokenizer, [premise, hypothesis], self.max_length)
        return p, h, label


def collate_nli(items: list[tuple[list[int], list[int], int]], pad_id: int = 0,
                multiple: int = 1) -> dict[str, torch.Tensor]:
    premise_ids, premise_mask = pad([p for p, _, _ in items], pad_id, multiple)
    hypothesis_ids, hypothesis_mask = pad([h for _, h, _ in items], pad_id, multiple)
    return {"premise_ids": premise_ids, "premise_mask": premise_mask, "hypothesis_ids": hypothesis_ids,
            "hypothesis_mask": hypothesis_mask, "labels": torch.tensor([label for _, _, label in items]),
            "premise_keys": sentence_keys([p for p, _, _ in items]),
            "hypothesis_keys": sentence_keys([h for _, h, _ in items])}


if __name__ == "__main__":  # python consert.py --corpus ...: the experiment around this method
    runpy.run_module("commands.consert_train", run_name="__main__")  # as `python -m commands.consert_train`
