"""Continued masked-language modelling (MLM): BERT's own pre-training task (Devlin et al. 2019, arXiv:1810.04805,
§3.1 "Task #1: Masked LM"), run on the target corpus. The TSDAE paper (arXiv:2104.06979, §6, fig. 2) compares it with
TSDAE as the pre-training step before supervised training; this is that baseline.

    "the cat sat on the mat" --mask 15% of the tokens--> "the cat [MASK] on the mat"
        --BERT--> one state per token --MLM head--> P(token) at each masked position: predict "sat"

Unlike TSDAE there is no sentence vector and no bottleneck: each masked token is predicted from the states of the
whole (damaged) sentence, so nothing asks the encoder to gather the sentence into one vector.

Read top to bottom:
  1. the masking (§3.1, app. A.1)    mask_tokens: choose 15% of the tokens; 80% [MASK], 10% random, 10% unchanged
  2. the training items              MaskedDataset: each sentence's masks drawn from a generator of (seed, epoch, i)
  3. the loss (§3.1)                 MLMLoss: cross-entropy at the masked positions, the checkpoint's MLM head
  4. the command                     main: commands/experiment.py's steps, then train.train; make_parser, parse_args

    python baselines/mlm.py --corpus FILE --model DIR --steps N --out runs/mlm
    python baselines/mlm.py --corpus FILE --model DIR --random-init ...   # pre-train from scratch (docs/standin.md)

model/ holds the encoder (as TSDAE's and ConSERT's runs do: SentenceEncoder.save_pretrained), not the MLM head; the
head is in checkpoint/ (training_state.pt), which --resume reads. With --random-init (DIR's config.json and tokenizer,
new weights) the run is a pre-training, and model/ is a raw masked-LM checkpoint like the bert-mini stand-in: the
encoder and its MLM head.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

if __name__ == "__main__":  # run as a script: the repository root (model.py, data.py, lib/) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

import data
import train
from commands import experiment
from lib import cli, distributed, weights
from lib.corpus import open_corpus
from lib.errors import UsageError
from model import Bert, BertConfig, MLMHead, SentenceEncoder
from speedups import fast

IGNORE = -100  # the label of a position that is not predicted (F.cross_entropy's and transformers' ignore_index)

# ----------------------------------------------------------------------------
# 1. The masking (§3.1; app. A.1 gives the 80/10/10 example)


def special_token_ids(tokenizer: Tokenizer) -> set[int]:
    """The ids of the tokenizer's special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]; RoBERTa's <s>, </s>, ...):
    never chosen for prediction."""
    return {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: Iterable[int], mask_id: int,
                vocab_size: int, rate: float = 0.15,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking. input_ids, attention_mask (B, L), 1 in the mask = real token. Returns (masked_ids, labels),
    both (B, L): labels hold the original id at each chosen position and IGNORE (-100) everywhere else.

    Which tokens: a sentence's ordinary tokens, never [CLS], [SEP], padding or another special token. Of its n
    ordinary tokens, EXACTLY k = max(1, round(rate * n)) are chosen, uniformly at random (round: half to even), as
    BERT's create_pretraining_data.py does ("15% of all WordPiece tokens in each sequence", §3.1; it counts [CLS]
    and [SEP] in n, we do not). transformers' DataCollatorForLanguageModeling instead chooses each token on its own
    with probability `rate`, so a short sentence may get none; here every sentence with an ordinary token has a
    label, and no batch has an empty loss.
    What becomes of a chosen token, each on its own (§3.1): with probability 0.8 [MASK] (mask_id), 0.1 a random id
    of the vocabulary (any of 0 .. vocab_size - 1, as BERT and transformers draw it; it may be the token itself),
    0.1 unchanged. The model must predict the original at all three kinds: it cannot tell which inputs are wrong.
    generator: every random number is drawn from it (None: PyTorch's global generator).
    """
    shape, device = input_ids.shape, input_ids.device
    special = torch.tensor(sorted(special_ids), dtype=input_ids.dtype, device=device)
    ordinary = attention_mask.bool() & ~torch.isin(input_ids, special)  # (B, L): the tokens that may be chosen
    n = ordinary.sum(1)  # (B,)
    k = torch.where(n > 0, (n * rate).round().clamp(min=1), 0).long()  # (B,) k = max(1, round(rate * n))
    # choose k of the n: a random score per position, ordinary positions first, then the k lowest scores
    scores = torch.rand(shape, generator=generator, device=device).masked_fill(~ordinary, 2.0)  # (B, L), 2 > any U(0,1)
    place = scores.argsort(1).argsort(1)  # (B, L): each position's place in its sentence's random order
    chosen = place < k[:, None]  # (B, L): k positions per sentence, all of them ordinary (k <= n)
    # 80% [MASK], 10% a random token, 10% unchanged, drawn for each chosen position
    fate = torch.rand(shape, generator=generator, device=device)  # (B, L)
    random_ids = torch.randint(vocab_size, shape, generator=generator, device=device)  # (B, L)
    masked_ids = torch.where(chosen & (fate < 0.8), mask_id, input_ids)  # (B, L)
    masked_ids = torch.where(chosen & (fate >= 0.8) & (fate < 0.9), random_ids, masked_ids)  # (B, L)
    labels = torch.where(chosen, input_ids, IGNORE)  # (B, L): predict the ORIGINAL token where chosen
    return masked_ids, labels


# ----------------------------------------------------------------------------
# 2. The training items


class MaskedDataset(torch.utils.data.Dataset):
    """Item (epoch, i) -> (masked ids, labels) of sentence i, as lists of the same length.

    The masks are drawn when the item is built (in the DataLoader, not in the loss), from a generator seeded by
    (seed, epoch, i) (mask_generator), as tsdae.DenoisingDataset seeds its noise: fresh masks every epoch, the same
    however the batches are padded or how many DataLoader workers there are, and the same after a resume.
    """

    def __init__(self, sentences: Sequence[str], tokenizer: Tokenizer, max_length: int, rate: float = 0.15,
                 seed: int = 0):
        self.sentences, self.tokenizer, self.max_length = sentences, tokenizer, max_length
        self.rate, self.seed = rate, seed
        self.mask_id = data.special_token_id(tokenizer, "mask")
        if self.mask_id is None:
            raise UsageError("the model's tokenizer has no mask token ([MASK], <mask>): it cannot be trained by MLM")
        self.special_ids = special_token_ids(tokenizer)
        self.vocab_size = tokenizer.get_vocab_size()  # the random replacements: ids the tokenizer knows

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, key: tuple[int, int]) -> tuple[list[int], list[int]]:
        epoch, i = key
        ids = torch.tensor(data.tokenize(self.tokenizer, [self.sentences[i]], self.max_length))  # (1, L)
        masked_ids, labels = mask_tokens(ids, torch.ones_like(ids), self.special_ids, self.mask_id, self.vocab_size,
                                         self.rate, self.mask_generator(epoch, i))  # (1, L) each
        return masked_ids[0].tolist(), labels[0].tolist()

    def mask_generator(self, epoch: int, i: int) -> torch.Generator:
        """The generator of sentence i's masks in `epoch`: new masks every epoch."""
        return torch.Generator().manual_seed(random.Random(f"{self.seed}-{epoch}-{i}").getrandbits(63))


def collate_masked(items: list[tuple[list[int], list[int]]], pad_id: int = 0,
                   multiple: int = 1) -> dict[str, torch.Tensor]:
    """Pad a batch of items to its longest (rounded up to `multiple`): padding is pad_id in input_ids, 0 in
    attention_mask, IGNORE in labels."""
    input_ids, attention_mask = data.pad([ids for ids, _ in items], pad_id, multiple)  # (B, L) each
    labels, _ = data.pad([labels for _, labels in items], IGNORE, multiple)  # (B, L)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# ----------------------------------------------------------------------------
# 3. The loss (§3.1)


class MLMLoss(nn.Module):
    """BERT + its masked-LM head + cross-entropy at the masked positions, for one batch of masked sentences (§3.1):

        L = -(1/T) sum over the T chosen positions t of the batch:  log P(x_t | x~),
        x~ the masked sentence,  P(. | x~) = softmax(E LN(GELU(W h_t + b_W)) + b),  h_t = BERT(x~)_t

    E is the word-embedding matrix (the projection onto the vocabulary is tied to it, as in BERT: the same
    Parameter, not a copy). The head (W, b_W, LN, b) is the checkpoint's `cls.predictions` when it has one
    (model.load_bert keeps it as encoder.bert.mlm_head; the encoder itself never uses it), else a new
    model.MLMHead, as tsdae.TSDAEDecoder takes its LM head. The same loss as transformers' BertForMaskedLM(...,
    labels=...).loss: the mean over the positions whose label is not -100.
    """

    def __init__(self, encoder: SentenceEncoder):
        super().__init__()
        self.encoder = encoder
        bert = encoder.bert
        self.head = bert.mlm_head if bert.mlm_head is not None else MLMHead(bert.cfg)
        self.head_from_checkpoint = bert.mlm_head is not None

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """batch: input_ids (already masked), attention_mask and labels, each (B, L). Returns L (a scalar)."""
        bert, labels = self.encoder.bert, batch["labels"]
        states = bert(batch["input_ids"], batch["attention_mask"])  # (B, L, d): every token sees the whole sentence
        chosen = labels != IGNORE  # (B, L): the positions to predict
        # the head acts on each position alone: computing it at the chosen positions only gives the same numbers
        logits = self.head(states[chosen], bert.embeddings.word.weight)  # (T, V) = E LN(GELU(W h + b_W)) + b
        total = F.cross_entropy(logits, labels[chosen], reduction="sum")  # sum over t of -log P(x_t | x~)
        # L = total / T. A batch without a chosen position (every line all special tokens) has L = 0, not 0 / 0
        return total / self.count(batch).clamp(min=1)

    def count(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """T: the masked positions the loss averages over (train.micro_batches weighs each part by its share)."""
        return (batch["labels"] != IGNORE).sum()


# ----------------------------------------------------------------------------
# 4. The command


def main(argv: list[str] | None = None) -> int:
    """An MLM run: the corpus, its masked sentences and MLMLoss (above), then the shared loop."""
    args = parse_args(argv)
    sentences = open_corpus(args.corpus, args.bad_lines)  # where each line is; its text stays on disk
    if distributed.init()[1] > 1:  # under torchrun each process would average its own masked tokens
        raise UsageError("baselines/mlm.py runs on one process; run it without torchrun")
    device = experiment.check_run(args)  # bad input stops the run before a model is loaded or a file written
    card = cli.model_card("MLM", make_parser(), args, argv, sentences, pooling=args.pooling, lr=args.lr)
    torch.manual_seed(args.seed)
    objective = build_objective(args)
    loader = experiment.loader(MaskedDataset(sentences, objective.encoder.tokenizer, objective.encoder.max_length,
                                             rate=args.mask_rate, seed=args.seed), collate_masked, objective.encoder,
                               args, device)
    # AdamW at a constant lr, no weight decay, gradients clipped to norm 1 (BERT clips too): TrainSettings' defaults
    run = experiment.settings(args, loader, card, steps=args.steps, epochs=args.epochs, lr=args.lr,
                              micro_batch=args.micro_batch or 0,
                              save_with_model=head_saver(objective) if args.random_init else None)
    head = "the checkpoint's" if objective.head_from_checkpoint else "a new one (the checkpoint has none)"
    if args.random_init:
        head = "new, as is the encoder (--random-init: random weights of the config)"
    experiment.say_start(f"MLM: {len(sentences)} sentences, MLM head: {head}", run, objective, args, device)
    train.train(objective.encoder, objective, loader, run, device)
    experiment.say_done(run.out, "with its MLM head" if args.random_init else "the MLM head is not saved there")
    return 0


def build_objective(args: argparse.Namespace) -> MLMLoss:
    """MLMLoss on the encoder of --model (--random-init: of its config, with new weights), its BERT built as
    speedups/fast.py's PackedBert (the same parameters, the same numbers with dropout off, no work on padding)
    unless --plain."""
    bert_class = Bert if args.plain else fast.PackedBert
    if args.random_init:
        return MLMLoss(random_encoder(args.model, pooling=args.pooling, max_length=args.max_length,
                                      bert_class=bert_class))
    return MLMLoss(experiment.load_encoder(args.model, pooling=args.pooling, max_length=args.max_length, mlm_head=True,
                                           bert_class=bert_class))


def random_encoder(model: str | None, pooling: str, max_length: int, bert_class: type[Bert] = Bert) -> SentenceEncoder:
    """--random-init: the encoder of --model's config.json and tokenizer with NEW weights and a new MLM head, drawn by
    model.init_weights (BERT's N(0, 0.02); Bert's constructor applies it), from the generator --seed seeded. The
    folder's weights are never read: it may hold none."""
    folder = weights.resolve_model(model or weights.default_model_path())
    cfg = BertConfig.from_dict(weights.read_config(folder))
    positions = cfg.max_position_embeddings - cfg.position_offset
    return SentenceEncoder(bert_class(cfg, with_mlm_head=True), weights.load_tokenizer(folder), pooling,
                           min(max_length, positions), source=folder)


def head_saver(objective: MLMLoss) -> Callable[[Path], None]:
    """--random-init: adds the trained MLM head to model/model.safetensors under the names transformers'
    BertForMaskedLM gives it (cls.predictions.*), so that model/ is a raw masked-LM checkpoint, as the stand-in is:
    a later MLM run from it continues its head, and BertForMaskedLM loads it whole."""
    model_type = objective.encoder.bert.cfg.model_type

    source = objective.encoder.source  # --model's folder: weights, or (from scratch) only a config
    has_weights = source is not None and any((source / f).exists() for f in ("model.safetensors", "pytorch_model.bin"))
    pooler = has_weights and any("pooler." in name for name in weights.read_tensors(source))

    def save(out: Path) -> None:
        path = out / "model" / "model.safetensors"
        head = {weights.hf_name(f"mlm_head.{name}", model_type): p for name, p in objective.head.named_parameters()}
        state = weights.read_safetensors(path)
        if not pooler:  # a *ForMaskedLM source has none, and BertForMaskedLM would call one unexpected
            state = {name: t for name, t in state.items() if not name.startswith("pooler.")}
        weights.write_safetensors({**state, **head}, path)
    return save


def make_parser() -> cli.ArgumentParser:
    p = cli.ArgumentParser(description="Continue BERT's masked-language-model pre-training (arXiv:1810.04805 §3.1) on"
                                       " unlabelled sentences, one per line: the baseline the TSDAE paper compares "
                                       "with (arXiv:2104.06979 §6).")
    p.add_argument("--corpus", required=True, help="UTF-8 text file, one sentence per line")
    p.add_argument("--model", default=None,
                   help=f"a {cli.checkpoint_families()} checkpoint: a local folder or a Hub id; its "
                        "masked-LM head is used when it has one, else a new head is trained (default: the shipped "
                        "all-MiniLM-L6-v2, which has none)")
    p.add_argument("--random-init", action="store_true",
                   help="pre-train from scratch: --model's config.json and tokenizer, new random weights (BERT's "
                        "initialisation) instead of its own; model/ then keeps the MLM head (docs/standin.md)")
    cli.add_length_arguments(p, passes_over="the corpus")
    p.add_argument("--batch-size", type=int, default=8,
                   help="sentences per step, TSDAE's (its paper, app. B), so that both pre-trainings see the same "
                        "sentences per step (BERT pre-trained with 256 sequences, §A.2)")
    p.add_argument("--lr", type=float, default=5e-5,
                   help="AdamW learning rate, the TSDAE paper's for this baseline (arXiv:2104.06979 §5.2; BERT "
                        "pre-trained at 1e-4, §A.2), constant: no warm-up or decay, no weight decay, "
                        "as tsdae.py trains "
                        "(BERT: 10k warm-up steps, linear decay, weight decay 0.01)")
    p.add_argument("--mask-rate", type=float, default=0.15,
                   help="share of each sentence's ordinary tokens to predict (§3.1); of them 80%% become [MASK], "
                        "10%% a random token, 10%% stay")
    p.add_argument("--max-length", type=int, default=75,
                   help="tokens per sentence, longer lines are truncated (tsdae.py's, so both read the same tokens)")
    p.add_argument("--pooling", default="mean", choices=["cls", "mean", "max"],
                   help="the pooling model/ records for sentence-transformers and SentenceEncoder; MLM trains no "
                        "sentence vector, so it changes nothing in training")
    p.add_argument("--micro-batch", type=int, metavar="N",
                   help="forward and backward each batch N sentences at a time, each part weighted by its share of the "
                        "batch's masked tokens, in the memory of N sentences: the same loss and gradient to 1e-5 "
                        "without dropout; with dropout each part draws its own")
    cli.add_run_arguments(p, out="runs/mlm", inputs="corpus lines")
    # no model selection here: the selection flags' values when none is given (commands/experiment.py reads them)
    p.set_defaults(eval_task=None, eval_data=None, heldout=0, eval_every=0, log_alignment=False)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, each in its range; --max-length leaves room for a token to predict."""
    p = make_parser()
    args = cli.parse_args(p, argv, positive=("lr", "mask_rate"),
                          at_least_one=("epochs", "steps", "batch_size", "micro_batch"),
                          ratios=("mask_rate",))
    if args.max_length < 3:
        p.error(f"--max-length must be at least 3: the start token, one token to predict, the end token "
                f"(got {args.max_length})")
    return args


if __name__ == "__main__":
    cli.run(main)
