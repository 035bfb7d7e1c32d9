"""TSDAE (Wang, Reimers & Gurevych 2021, arXiv:2104.06979): train a sentence encoder by rebuilding damaged sentences.

    damaged sentence --encoder--> ONE vector --decoder--> the original sentence

The only path from the damaged input to the decoder is the sentence vector (§3.2), so that vector
must carry the sentence's meaning. After training the decoder is thrown away.

Read top to bottom:
  1. the noise (§3.1, app. A tab. 5)     delete_words (the paper's), swap / mask / replace / add
  2. the training pairs                  DenoisingDataset: (damaged, original) token ids
  3. the decoder (§3.2, app. A)          DecoderLayer, TSDAEDecoder: tied to the encoder, sees only the vector
  4. the loss (§3.1)                     TSDAELoss: -log P(original | vector), token by token
  5. what the vector remembers (§3.2)    greedy_decode, beam_decode: rebuild a sentence from its vector
                                         (examples/reconstruct.py); save_decoder, load_decoder
What runs: `--plain` runs these classes as written. By default speedups/fast.py replaces named pieces with
classes that give the same numbers with dropout off (in training, other draws of the dropout masks;
tests/test_fast.py): the encoder's Bert.run_layers and tied word lookup (fast.SparseLookupPackedBert, see
TSDAELoss.memory), TSDAEDecoder.forward, each layer's cross_attn and neg_log_likelihood (each says so below). The
command line is commands/tsdae_train.py's (`python tsdae.py` hands over to it, running it as the script); this file
imports only model.py, data.py and lib/.
"""
from __future__ import annotations

import copy
import random
import re
import runpy
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

import data
from lib import weights
from lib.errors import UsageError
from model import Bert, BertConfig, EncoderLayer, MLMHead, MultiHeadAttention, SentenceEncoder, init_weights

# ----------------------------------------------------------------------------
# 1. Noise (§3.1, app. A tab. 5). Words are the tokenizer's own pre-tokenised words: every function gets the
#    sentence as a list of words, each word a list of token ids, and returns the damaged list. (A word is what
#    the tokenizer splits before its subwords: BERT's WordPiece and byte-level BPE (RoBERTa) split off
#    punctuation too; SentencePiece (XLM-R) splits at spaces only, so "mat." is one word there.)


def words_of(tokenizer: Tokenizer, sentence: str) -> tuple[list[int], list[list[int]], list[int]]:
    """Split '[CLS] w1 w2 ... [SEP]' (RoBERTa: '<s> w1 w2 ... </s>') into (the special tokens before the words,
    the words as lists of token ids, the special tokens after them)."""
    enc = tokenizer.encode(sentence)
    head, words, tail, last = [], [], [], None
    for tid, wid in zip(enc.ids, enc.word_ids):
        if wid is None:
            (tail if words or head else head).append(tid)
        elif wid == last:
            words[-1].append(tid)
        else:
            words.append([tid])
            last = wid
    return head, words, tail


# Exercise 3 (ASSIGNMENTS.md)
def delete_words(words: list[list[int]], ratio: float, rng: random.Random, **_) -> list[list[int]]:
    """Delete each word with probability `ratio`; at least one word always survives (the paper's noise)."""
    kept = [w for w in words if rng.random() >= ratio]
    return kept if kept or not words else [rng.choice(words)]


def swap_words(words: list[list[int]], ratio: float, rng: random.Random, **_) -> list[list[int]]:
    """Pick each word with probability `ratio` and shuffle the picked words among their positions."""
    picked = [i for i in range(len(words)) if rng.random() < ratio]
    moved = picked[:]
    rng.shuffle(moved)
    out = list(words)
    for dst, src in zip(picked, moved):
        out[dst] = words[src]
    return out


def mask_words(words: list[list[int]], ratio: float, rng: random.Random, mask_id: int, **_) -> list[list[int]]:
    """Replace every token of each picked word (probability `ratio`) with the mask token ([MASK], <mask>)."""
    return [[mask_id] * len(w) if rng.random() < ratio else w for w in words]


def replace_words(words: list[list[int]], ratio: float, rng: random.Random, vocab: Sequence[int] = (),
                  **_) -> list[list[int]]:
    """Replace each picked word (probability `ratio`) with one random vocabulary token."""
    return [[rng.choice(vocab)] if rng.random() < ratio else w for w in words]


def add_words(words: list[list[int]], ratio: float, rng: random.Random, vocab: Sequence[int] = (),
              **_) -> list[list[int]]:
    """After each word, with probability `ratio`, insert one random vocabulary token."""
    out = []
    for w in words:
        out.append(w)
        if rng.random() < ratio:
            out.append([rng.choice(vocab)])
    return out


NOISE: dict[str, Callable[..., list[list[int]]]] = {
    "delete": delete_words, "swap": swap_words, "mask": mask_words, "replace": replace_words, "add": add_words,
}


def ordinary_token_ids(tokenizer: Tokenizer) -> list[int]:
    """Vocabulary ids a text can produce, for replace / add noise: not the tokenizer's special tokens ([PAD],
    <s>, <mask>, ...) nor the [unusedN] placeholders that WordPiece vocabularies reserve."""
    special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
    return sorted(i for t, i in tokenizer.get_vocab().items()
                  if i not in special and not re.fullmatch(r"\[unused\d+\]", t))


# ----------------------------------------------------------------------------
# 2. The training pairs


class DenoisingDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> (damaged ids, original ids) of sentence i.

    The noise is drawn from a generator seeded by (seed, epoch, i) (noise_rng): fresh every epoch, yet the same
    however many DataLoader workers or distributed processes there are, and the same after a resume.
    """

    def __init__(self, sentences: Sequence[str], tokenizer: Tokenizer, max_length: int, noise: str = "delete",
                 ratio: float = 0.6, seed: int = 0):
        self.sentences, self.tokenizer, self.max_length = sentences, tokenizer, max_length
        self.noise, self.ratio, self.seed = NOISE[noise], ratio, seed
        self.mask_id = data.special_token_id(tokenizer, "mask")
        self.vocab = ordinary_token_ids(tokenizer) if noise in ("replace", "add") else ()

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, key: tuple[int, int]) -> tuple[list[int], list[int]]:
        epoch, i = key
        head, words, tail = words_of(self.tokenizer, self.sentences[i])
        damaged = self.noise(words, self.ratio, self.noise_rng(epoch, i), mask_id=self.mask_id, vocab=self.vocab)
        join = lambda ws: head + [t for w in ws for t in w] + tail
        return data.truncate(join(damaged), self.max_length), data.truncate(join(words), self.max_length)

    def noise_rng(self, epoch: int, i: int) -> random.Random:
        """The generator of sentence i's noise in `epoch`: new noise every epoch."""
        return random.Random(f"{self.seed}-{epoch}-{i}")


def collate_pairs(items: list[tuple[list[int], list[int]]], pad_id: int = 0,
                  multiple: int = 1) -> dict[str, torch.Tensor]:
    """Pad damaged and original ids separately, each to its own longest (rounded up to `multiple`)."""
    damaged_ids, damaged_mask = data.pad([d for d, _ in items], pad_id, multiple)
    original_ids, original_mask = data.pad([o for _, o in items], pad_id, multiple)
    return {"damaged_ids": damaged_ids, "damaged_mask": damaged_mask,
            "original_ids": original_ids, "original_mask": original_mask}


# ----------------------------------------------------------------------------
# 3. The decoder (§3.2, app. A)


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the sentence vector, feed-forward (post-LN, like BERT).

    The self-attention, feed-forward and their LayerNorms ARE the given encoder layer's modules (the same
    Parameter objects: tied, app. A). Cross-attention and its LayerNorm have no encoder counterpart: they are new.
    """

    def __init__(self, enc_layer: EncoderLayer, cfg: BertConfig,
                 cross_attention_class: type[MultiHeadAttention] = MultiHeadAttention):
        super().__init__()
        self.self_attn, self.self_attn_norm = enc_layer.attn, enc_layer.attn_norm
        self.cross_attn = cross_attention_class(cfg)
        self.cross_attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.ffn, self.ffn_norm = enc_layer.ffn, enc_layer.ffn_norm
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.cross_attn.apply(init_weights)

    # Exercise 4 (ASSIGNMENTS.md)
    def forward(self, x: torch.Tensor, memory: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        """x: (B, L, d) decoder states; memory: (B, 1, d), the sentence vector; causal: (L, L) bool, True where
        position t may see position t' (t' <= t); with MPNet the float mask of Bert.self_attention_mask. (These
        are --plain's shapes: the default run's fast.PackedDecoder passes the kept positions' rows, (N, d).)"""
        x = self.self_attn_norm(x + self.dropout(self.self_attn(x, causal)))  # (B, L, d)
        # §3.2: keys and values come only from the sentence vector s, a memory of length 1:
        #   CrossAttn(x) = softmax(x W_q (s W_k)^T / sqrt(d_head)) (s W_v + b_v) W_o + b_o
        #                = (s W_v + b_v) W_o + b_o at every position, since a softmax over one key is 1
        #   (in training attention dropout makes that 1 a 0 or 1 / (1 - p) per position and head; the default
        #   run's fast.SentenceVectorAttention computes just that, dropout included)
        x = self.cross_attn_norm(x + self.dropout(self.cross_attn(x, memory=memory)))  # (B, L, d)
        return self.ffn_norm(x + self.dropout(self.ffn(x)))  # (B, L, d)


class PreNormDecoderLayer(DecoderLayer):
    """DecoderLayer for pre-LayerNorm encoders (ModernBERT's, model.PreNormEncoderLayer): each block
    reads LN(x) and adds its output to x, the cross-attention's too."""

    def forward(self, x: torch.Tensor, memory: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.self_attn(self.self_attn_norm(x), causal))  # (B, L, d)
        x = x + self.dropout(self.cross_attn(self.cross_attn_norm(x), memory=memory))  # (B, L, d)
        return x + self.dropout(self.ffn(self.ffn_norm(x)))  # (B, L, d)


class TSDAEDecoder(nn.Module):
    """Rebuilds a sentence from its vector alone (§3.1-3.2).

    tie=True (the paper's choice, app. A): the embeddings and every per-layer module except cross-attention and its
    LayerNorm are the encoder's own (with MPNet its relative position bias, with ModernBERT its final LayerNorm).
    tie=False: a separate copy, initialised from the same weights.
    LM head: the checkpoint's `cls.predictions` when it has one (the encoder never uses it), else new;
    its projection onto the vocabulary is always the (shared) word-embedding matrix.
    cross_attention_class: the class of each layer's cross_attn (speedups/fast.py's PackedDecoder names another).
    """

    cross_attention_class: type[MultiHeadAttention] = MultiHeadAttention

    def __init__(self, encoder: Bert, tie: bool = True):
        super().__init__()
        cfg = encoder.cfg
        source = encoder if tie else copy.deepcopy(encoder)
        self.embeddings = source.embeddings
        layer_class = PreNormDecoderLayer if cfg.norm_first else DecoderLayer
        self.layers = nn.ModuleList([layer_class(layer, cfg, self.cross_attention_class) for layer in source.layers])
        self.relative_bias, self.final_norm = source.relative_bias, source.final_norm  # MPNet's, ModernBERT's (or None)
        self.lm_head = source.mlm_head if source.mlm_head is not None else MLMHead(cfg)

    def forward(self, input_ids: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, L), memory (B, 1, d): the sentence vector, all the cross-attention reads -> decoder states
        (B, L, d). With keep (B, L) bool, the kept positions' states only, as rows (T, d) in reading order (keep
        holds each sentence's first positions). The default run's fast.PackedDecoder runs the same layers on the
        kept positions' rows alone."""
        L = input_ids.shape[1]
        # causal: position t sees tokens <= t only. No padding mask is needed: pads sit after every
        # real token, so no real position can see one (the reference code passes none either).
        causal = self.self_attention_mask(torch.ones(L, L, dtype=torch.bool, device=input_ids.device).tril())  # (L, L)
        x = self.embeddings(input_ids)  # (B, L, d)
        for layer in self.layers:
            x = layer(x, memory, causal)  # (B, L, d)
        x = self.finish(x)
        return x if keep is None else x[keep]

    def self_attention_mask(self, causal: torch.Tensor) -> torch.Tensor:
        """What the self-attention of every layer gets (model.Bert.self_attention_mask): the causal mask, with
        MPNet its relative position bias added ((h, L, L) float)."""
        return causal if self.relative_bias is None else self.relative_bias(causal)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        """The last layer's states, through ModernBERT's final LayerNorm (model.Bert.finish)."""
        return x if self.final_norm is None else self.final_norm(x)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """states (..., d) -> (..., V): the LM head, projecting onto the word-embedding matrix."""
        return self.lm_head(states, self.embeddings.word.weight)

    def neg_log_likelihood(self, states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """sum over the rows t of -log P(labels_t | states_t) = -log softmax(E g(h_t) + b)[labels_t], h_t = states_t,
        g = the LM head's dense, GELU, LayerNorm (model.MLMHead). states (T, d), labels (T,) -> a scalar.
        The default run gets the same sum from fast.VocabularyCrossEntropy (one (T, V) tensor, not autograd's
        several); `--plain` runs this line."""
        return F.cross_entropy(self.logits(states), labels, reduction="sum")


# ----------------------------------------------------------------------------
# 4. The loss (§3.1)


def batch_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """total / count: the mean over one batch's terms."""
    return total / count


class TSDAELoss(nn.Module):
    """Encoder + tied decoder + reconstruction loss for one batch of (damaged x~, original x) sentences (§3.1):

        L = -(1/T) sum over the batch's sentences x, over their tokens t:  log P(x_t | x_<t, s),
        s = encoder(x~) the sentence vector,  P(. | x_<t, s) = softmax(E g(h_t) + b),  h_t = decoder(x_<t, s)_t
    (g: the LM head's dense, GELU, LayerNorm, as in the reference code; the paper scores h_t against E directly.)

    normalisation="tokens": T = the batch's label tokens (the reference code's choice, sentence-transformers'
        DenoisingAutoEncoderLoss; the default).
    normalisation="sentence": T = the batch's sentences: each sentence's log-likelihood summed over its
        tokens, averaged over sentences (the paper's objective, §3.1).
    Both give every token of a batch the same weight: they differ by one factor per batch, its label tokens over
    its sentences, and a gradient clipped to norm 1 (train.py) loses it: when every step is clipped, the two train
    alike.
    global_mean(total, T): total / T (under torchrun, over every process: lib/distributed.py).
    decoder_class: TSDAEDecoder, or speedups/fast.py's PackedDecoder.
    """

    def __init__(self, encoder: SentenceEncoder, tie: bool = True, normalisation: str = "tokens",
                 global_mean: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = batch_mean,
                 decoder_class: type[TSDAEDecoder] = TSDAEDecoder):
        super().__init__()
        assert normalisation in ("tokens", "sentence")
        self.encoder = encoder
        self.decoder = decoder_class(encoder.bert, tie=tie)  # app. A: tied to the encoder (unless tie=False)
        if not tie:
            encoder.bert.mlm_head = None  # the separate decoder has its own copy; the encoder never used it
        self.normalisation, self.global_mean = normalisation, global_mean

    # Exercise 5 (ASSIGNMENTS.md)
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """batch: damaged_ids, damaged_mask (B, Ld) and original_ids, original_mask (B, Lo), 1 = real token.
        Returns L, the reconstruction loss of the batch (a scalar)."""
        memory = self.memory(batch)  # (B, 1, d): the damaged sentence's vector, all the decoder sees of it
        # teacher forcing: read the original up to t, predict token t+1 ([CLS] a b -> a b [SEP]; RoBERTa: <s>, </s>)
        original, mask = batch["original_ids"], batch["original_mask"]
        decoder_input, labels = original[:, :-1], original[:, 1:]  # (B, L-1) each
        is_label = mask[:, 1:].bool()  # (B, L-1): real tokens to predict, not padding
        states = self.decoder(decoder_input, memory, keep=is_label)  # (T, d): the states that predict a label
        total = self.decoder.neg_log_likelihood(states, labels[is_label])  # sum of -log P(x_t | x_<t, s)
        return self.global_mean(total, self.count(batch))  # L = total / T

    def memory(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """§3.1: the encoder reads the DAMAGED sentence and gives one vector per sentence, s (B, d); §3.2: s is the
        decoder's memory, one position (B, 1, d): the bottleneck. (The default run's encoder is a
        fast.SparseLookupPackedBert: its layers on the real tokens only, its word lookup with a sparse gradient.)"""
        sentence_vec = self.encoder(batch["damaged_ids"], batch["damaged_mask"])  # (B, d)
        return sentence_vec[:, None, :]  # (B, 1, d)

    def count(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """T: how many terms the loss averages, the label tokens or the sentences of the batch."""
        if self.normalisation == "tokens":
            return batch["original_mask"][:, 1:].sum()
        return torch.tensor(len(batch["original_ids"]), device=batch["original_ids"].device)


# ----------------------------------------------------------------------------
# 5. What the vector remembers: the decoder rebuilds a sentence from it alone (§3.2)


@torch.no_grad()
def greedy_decode(decoder: TSDAEDecoder, sentence_vec: torch.Tensor, start_id: int, end_id: int,
                  max_length: int) -> list[int]:
    """The decoder's most likely next token, again and again, from the start token until the end token:
    x_t = argmax P(x_t | x_<t, s). sentence_vec: (1, d), the only thing the decoder sees of the sentence."""
    ids = [start_id]
    while len(ids) < max_length and ids[-1] != end_id:
        states = decoder(torch.tensor([ids], device=sentence_vec.device), sentence_vec[:, None, :])  # (1, t, d)
        logits = decoder.logits(states)  # (1, t, V)
        ids.append(int(logits[0, -1].argmax()))
    return ids


@torch.no_grad()
def beam_decode(decoder: TSDAEDecoder, sentence_vec: torch.Tensor, start_id: int, end_id: int, max_length: int,
                beam: int) -> list[int]:
    """Beam search: keep the `beam` most likely beginnings (sum of log P), extend each by its `beam` most likely
    next tokens, keep the best `beam` again; of the finished sequences (and, at max_length, the unfinished ones)
    the best log P per token wins."""
    beams, finished = [([start_id], 0.0)], []
    while beams and len(beams[0][0]) < max_length:
        ids = torch.tensor([seq for seq, _ in beams], device=sentence_vec.device)  # (k, t)
        memory = sentence_vec[:, None, :].expand(len(beams), -1, -1)  # (k, 1, d): the same vector for every beam
        log_p = decoder.logits(decoder(ids, memory))[:, -1].log_softmax(-1)  # (k, V)
        top = log_p.topk(beam, dim=-1)
        grown = sorted(((seq + [int(t)], score + float(lp)) for (seq, score), lps, ts in zip(beams, *top)
                        for lp, t in zip(lps, ts)), key=lambda b: -b[1])[:beam]
        finished += [b for b in grown if b[0][-1] == end_id]
        beams = [b for b in grown if b[0][-1] != end_id]
    return max(finished + beams, key=lambda b: b[1] / len(b[0]))[0]


# The run folder's decoder/, beside model/ (the encoder): what the decoder has of its own.
#   decoder.safetensors  its parameters not tied to the encoder, by TSDAEDecoder's names: layers.N.cross_attn.*,
#                        layers.N.cross_attn_norm.*, lm_head.* (all of them with --untie)
#   decoder.json         {"objective", "tie", "normalisation", "base_model", "seed", "noise", "noise_ratio",
#                        "corpus"}: how it was made


def save_decoder(objective: TSDAELoss, folder: Path, settings: dict) -> None:
    encoder = {id(p) for n, p in objective.encoder.bert.named_parameters() if not n.startswith("mlm_head.")}
    own = {n: p for n, p in objective.decoder.named_parameters() if id(p) not in encoder}
    with weights.atomic_dir(folder) as tmp:
        weights.write_safetensors(own, tmp / "decoder.safetensors")
        weights.write_json(tmp / "decoder.json", settings)


def load_decoder(run: Path) -> tuple[TSDAELoss, dict]:
    """A trained run's encoder (run/model) and decoder (run/decoder), and the decoder's settings."""
    settings = weights.read_json(run / "decoder" / "decoder.json",
                                    missing=f"{run} holds no decoder/ (a run of tsdae.py from before it kept one?)")
    if settings.get("objective", "TSDAELoss") != "TSDAELoss":
        raise UsageError(f"{run}: its decoder was trained by {settings['objective']}, not by TSDAELoss: it does not "
                         "rebuild a sentence from its vector")
    objective = TSDAELoss(SentenceEncoder.from_pretrained(run / "model"), tie=settings["tie"],
                          normalisation=settings["normalisation"])
    state = weights.read_safetensors(run / "decoder" / "decoder.safetensors")
    own = {n: p for n, p in objective.decoder.named_parameters() if n in state}
    weights.copy_weights(own, state, run / "decoder")  # also: every saved tensor found its parameter
    return objective.eval(), settings


def reconstruct(objective: TSDAELoss, damaged: list[int], beam: int = 1, max_length: int | None = None) -> list[int]:
    """Encode the damaged token ids into one vector, and decode a sentence from that vector alone (at most
    max_length tokens, default the encoder's)."""
    sentence_vec = objective.encoder(torch.tensor([damaged]), torch.ones(1, len(damaged), dtype=torch.long))  # (1, d)
    start, end, length = damaged[0], damaged[-1], max_length or objective.encoder.max_length
    if beam > 1:
        return beam_decode(objective.decoder, sentence_vec, start, end, length, beam)
    return greedy_decode(objective.decoder, sentence_vec, start, end, length)


if __name__ == "__main__":  # python tsdae.py --corpus ...: the experiment around this method
    runpy.run_module("commands.tsdae_train", run_name="__main__")  # as `python -m commands.tsdae_train`
