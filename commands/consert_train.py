"""ConSERT's experiment, around the method of consert.py: the official settings of each strategy, stage by
stage, and the command line (`python consert.py` runs it).

  OFFICIAL, stages     the official scripts' settings (yym6472/ConSERT), with the command line's instead
  OfficialAdamW        the official code's AdamW (--optimizer official; with train.linear_schedule_with_warmup)
  with_flags           a stage's settings with the command line's views, lr, epochs, dropout and patience
  main                 read_inputs (lib/datafiles.py: NLI pairs, the official STS sentences), then each stage:
                       build_encoder, build_objective (contrastive_settings), prepare_stage, then one call of
                       train.train; a lab of the contrastive stage (labs/) runs these steps with its own objective
  datasets, stage_loader, held_out_signals, stage_settings, describe   prepare_stage's pieces
  make_parser, parse_args, check_args   every flag, and the combinations refused (a flag that would change nothing)
"""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root (data.py, train.py, lib/, ...) on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

import data
import train
from commands import experiment
from consert import (NLI_FEATURES, UNRATED_VIEWS, VIEW_NAMES, AdversarialConSERTLoss, ConSERTLoss, NLIDataset,
                     SentenceDataset, SupervisedConSERTLoss, View, check_views, collate_nli, collate_sentences,
                     switch_off_dropout)
from lib import cli, distributed
from lib.corpus import few_shot, open_corpus
from lib.datafiles import NLI_LABELS, read_nli, sts_corpus
from lib.run import finished
from lib.selection import HeldOut
from model import Bert, SentenceEncoder
from speedups import fast, gradcache


@dataclass(frozen=True)
class Stage:
    """One call of the training loop: "unsup" (contrastive on the corpus) or "sup" / "joint" (on NLI pairs)."""

    kind: str
    views: tuple[View, View]
    lr: float
    epochs: int
    dropout: bool  # BERT's own dropout during this stage
    patience: int  # evaluations without a better dev score before stopping (0: never)
    steps: int | None = None  # instead of epochs


# The official scripts (yym6472/ConSERT, scripts/*-base.sh; the paper's set-up, §4.1), stage by stage. A two-stage
# strategy runs its NLI stage into OUT/stage1, then the contrastive stage on the corpus from there (its best/
# checkpoint when the stage evaluated, as the official code saves only that one). Every command-line flag
# overrides its entry.
NLI_VIEWS = (View("none"), View("token_cutoff", 0.1))  # joint's (sup makes no views: its loss is the classifier's)
OFFICIAL = {
    "unsup": [Stage("unsup", (View("feature_cutoff", 0.2), View("shuffle")), lr=5e-7, epochs=10, dropout=False,
                    patience=10)],
    "sup": [Stage("sup", NLI_VIEWS, lr=2e-5, epochs=1, dropout=True, patience=0)],
    "joint": [Stage("joint", NLI_VIEWS, lr=2e-5, epochs=1, dropout=True, patience=0)],
    "sup-unsup": [Stage("sup", NLI_VIEWS, lr=2e-5, epochs=1, dropout=True, patience=0),
                  Stage("unsup", (View("none"), View("feature_cutoff", 0.1)), lr=5e-7, epochs=25, dropout=True,
                        patience=10)],
    "joint-unsup": [Stage("joint", NLI_VIEWS, lr=2e-5, epochs=1, dropout=True, patience=0),
                    Stage("unsup", (View("none"), View("shuffle")), lr=5e-7, epochs=25, dropout=True, patience=10)],
}


class OfficialAdamW(torch.optim.Optimizer):
    """The AdamW that the official ConSERT code runs (transformers' old AdamW with correct_bias=False): Adam's
    moments without their bias correction, and the weight decay applied after the update. With steady gradients
    the un-corrected step at step t is (1 - b1^t) / sqrt(1 - b2^t) times PyTorch's bias-corrected one: 3.16x at
    t = 1, rising to about 6.6x around step 12, then fading toward 1 as t grows (3.2x at step 100, 1.26x at
    1000). For reproducing the official numbers (--optimizer official; train.TrainSettings.optimizer_fn)."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0})

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)  # m = b1 m + (1 - b1) g
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)  # v = b2 v + (1 - b2) g^2
                p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-group["lr"])  # p -= lr m / (sqrt(v) + eps)
                p.add_(p, alpha=-group["lr"] * group["weight_decay"])  # p -= lr wd p


def stages(args: argparse.Namespace) -> list[Stage]:
    """The stages of args.strategy: the official settings, with what the command line says instead."""
    return [with_flags(stage, args, "" if stage.kind == "unsup" else "nli_") for stage in OFFICIAL[args.strategy]]


def with_flags(stage: Stage, args: argparse.Namespace, prefix: str) -> Stage:
    flag = lambda name: getattr(args, prefix + name)
    views = []
    for i, official in enumerate(stage.views, start=1):
        name, rate = flag(f"view{i}"), flag(f"rate{i}")
        # a view named without a rate gets 0.2 if it takes one (cutoffs, span, dropout, a lab's: consert.View)
        default_rate = official.rate if name is None else 0.0 if name in UNRATED_VIEWS else 0.2
        views.append(View(name or official.name, default_rate if rate is None else rate))
    dropout = stage.dropout or "simcse" in [view.name for view in views]  # simcse's view IS the dropout
    dropout = dropout if flag("encoder_dropout") == "auto" else flag("encoder_dropout") == "on"
    return replace(stage, views=tuple(views), lr=flag("lr") or stage.lr, epochs=flag("epochs") or stage.epochs,
                   steps=flag("steps"), dropout=dropout, patience=stage.patience if flag("patience") is None
                   else flag("patience"))


# ----------------------------------------------------------------------------
# The run: the strategy's stages, each a call of train.train


def main(argv: list[str] | None = None) -> int:
    """A ConSERT run: each stage of --strategy, one call of the shared loop, from the encoder the stage before left
    (its best/ with an evaluation). A lab of the contrastive stage (labs/, LABS.md) is its own entry point: these
    steps with its own objective."""
    args = parse_args(argv)
    plan = stages(args)  # e.g. joint-unsup: joint on NLI, then contrastive on the corpus
    nli, corpus, device, world = read_inputs(args, plan)
    out, model_dir = Path(args.out), args.model
    for stage, folder in zip(plan, [out / "stage1", out] if len(plan) == 2 else [out]):
        if folder != out and finished(folder):
            print(f"stage 1 ({stage.kind}) already finished in {folder}; continuing with stage 2")
        else:  # one stage: one call of the training loop, from the encoder the stage before left
            encoder = build_encoder(stage, model_dir, args)
            objective = build_objective(stage, encoder, args, world)
            loader, run = prepare_stage(stage, objective, corpus if stage.kind == "unsup" else nli, folder, args, argv,
                                        device)
            state = train.train(encoder, objective, loader, run, device)
            experiment.say_best(state, args.eval_task, folder)
        model_dir = folder / "best" if (folder / "best").exists() else folder / "model"
    experiment.say_done(out, "mean pooling")
    return 0


def read_inputs(args: argparse.Namespace, plan: list[Stage]) -> tuple[list | None, Sequence[str] | None,
                                                                      torch.device, int]:
    """The NLI pairs (if a stage trains on them), the corpus (if one is contrastive), the device and the number of
    processes: bad input stops the run here, before a model is loaded or a file written."""
    nli = read_nli(args.nli, args.bad_lines) if plan[0].kind != "unsup" else None
    corpus = None
    if plan[-1].kind == "unsup":
        corpus = sts_corpus(args.sts_corpus) if args.sts_corpus else open_corpus(args.corpus, args.bad_lines)
    device = experiment.check_run(args)
    _, world = distributed.init()  # once, for every stage
    torch.manual_seed(args.seed)
    return nli, corpus, device, world


def prepare_stage(stage: Stage, objective: ConSERTLoss, inputs: Sequence, folder: Path, args: argparse.Namespace,
                  argv: list[str] | None, device: torch.device) -> tuple[torch.utils.data.DataLoader,
                                                                         train.TrainSettings]:
    """One stage's batches (its `inputs` but --heldout's) and settings, said in the stage's first line."""
    trained, kept_out = experiment.hold_out(inputs, args, "lines" if stage.kind == "unsup" else "NLI pairs")
    if stage.kind == "unsup" and args.few_shot:  # §5.3: N sentences of the corpus, upsampled to its size or not
        trained = few_shot(trained, args.few_shot, seed=args.seed, upsample=args.upsample)
    loader = stage_loader(stage, trained, objective.encoder, args, device)
    heldout = held_out_signals(stage, kept_out, objective, args, device)
    resume = args.resume and (folder / "checkpoint").exists()
    run = stage_settings(stage, folder, resume, loader, args, argv, inputs, heldout)
    experiment.say_start(describe(stage, trained), run, objective, args, device)
    return loader, run


def describe(stage: Stage, trained: Sequence) -> str:
    """What a stage trains, for its first line: its items, views and the encoder's dropout."""
    views = " + ".join(f"{v.name} {v.rate:g}" if v.rate else v.name for v in stage.views)
    return (f"ConSERT {stage.kind}: {len(trained)} {'sentences' if stage.kind == 'unsup' else 'NLI pairs'}"
            f"{f', views {views}' if stage.kind != 'sup' else ''}, encoder dropout {'on' if stage.dropout else 'off'}")


def build_encoder(stage: Stage, model_dir: str | Path | None, args: argparse.Namespace) -> SentenceEncoder:
    """The encoder of this stage, mean-pooled as the official training pools, its own dropout on or off."""
    # the official code's tokens per sentence: min(n, --max-length) + 3, of which 2 special (Transformer.py)
    # speedups/fast.py's PackedBert unless --plain or --bucketing (length buckets hold almost no padding: packing
    # would cost): the same parameters, and the same numbers with dropout off
    encoder = experiment.load_encoder(model_dir, pooling="mean", max_length=args.max_length + 3,
                                      bert_class=Bert if args.plain or args.bucketing else fast.PackedBert)
    if not stage.dropout:
        switch_off_dropout(encoder)
    return encoder


def build_objective(stage: Stage, encoder: SentenceEncoder, args: argparse.Namespace, world: int) -> ConSERTLoss:
    """The stage's objective: ConSERTLoss (unsup), AdversarialConSERTLoss (unsup with an adversarial view) or
    SupervisedConSERTLoss (sup, joint); with --micro-batch the cached gradient's (speedups/gradcache.py). The
    encoder's PackedBert or Bert is build_encoder's choice."""
    common = contrastive_settings(args, world)
    chunks = {"micro_batch": args.micro_batch} if args.micro_batch else {}
    if stage.kind != "unsup":  # §3.3
        supervised = gradcache.ChunkedSupervisedConSERTLoss if args.micro_batch else SupervisedConSERTLoss
        return supervised(encoder, stage.views, len(NLI_LABELS), joint=stage.kind == "joint",
                          nli_features=args.nli_features, adv_norm=args.adv_norm, **chunks, **common)
    if "adversarial" in [view.name for view in stage.views]:
        return AdversarialConSERTLoss(encoder, stage.views, adv_norm=args.adv_norm, **common)
    if args.micro_batch:
        return gradcache.ChunkedConSERTLoss(encoder, stage.views, **chunks, **common)
    return ConSERTLoss(encoder, stage.views, **common)


def contrastive_settings(args: argparse.Namespace, world: int) -> dict:
    """Every objective's temperature, weight and negatives: under torchrun every process's batch (and NLI pairs)
    (--local-negatives: each process's own)."""
    gather = distributed.gather_with_local_grad if world > 1 and not args.local_negatives else distributed.own_rows
    return dict(temperature=args.temperature, cl_weight=args.cl_weight, gather=gather)


def datasets(stage: Stage, inputs: Sequence, encoder: SentenceEncoder) -> tuple[torch.utils.data.Dataset, Callable]:
    """The stage's data set and collate function: sentences (unsup) or NLI pairs."""
    if stage.kind == "unsup":
        return SentenceDataset(inputs, encoder.tokenizer, encoder.max_length), collate_sentences
    return NLIDataset(inputs, encoder.tokenizer, encoder.max_length), collate_nli


def stage_loader(stage: Stage, inputs: Sequence, encoder: SentenceEncoder, args: argparse.Namespace,
                 device: torch.device) -> torch.utils.data.DataLoader:
    """Plain shuffled batches, as the official DataLoader(shuffle=True) gives them: the batch decides which
    sentences are each other's negatives. With --bucketing, batches of similar length (by the pair's length for NLI);
    plain batches need no tokenisation before the first step."""
    tokenizer, max_length = encoder.tokenizer, encoder.max_length
    if not args.bucketing:
        lengths = None
    elif stage.kind == "unsup":
        lengths = data.token_lengths(tokenizer, inputs, max_length)
    else:
        lengths = (data.token_lengths(tokenizer, [p for p, _, _ in inputs], max_length)
                   + data.token_lengths(tokenizer, [h for _, h, _ in inputs], max_length))
    return experiment.loader(*datasets(stage, inputs, encoder), encoder, args, device, lengths)


def held_out_signals(stage: Stage, kept_out: list, objective: ConSERTLoss, args: argparse.Namespace,
                     device: torch.device) -> HeldOut | None:
    """--heldout N: the kept-out sentences (or NLI pairs) and their sentences (an NLI pair's: its premise and its
    hypothesis)."""
    sentences = kept_out if stage.kind == "unsup" else [s for p, h, _ in kept_out for s in (p, h)]
    return experiment.held_out_signals(objective, *datasets(stage, kept_out, objective.encoder), sentences, args,
                                       device)


def stage_settings(stage: Stage, out: Path, resume: bool, loader: torch.utils.data.DataLoader,
                   args: argparse.Namespace, argv: list[str] | None, inputs: Sequence,
                   heldout: HeldOut | None) -> train.TrainSettings:
    """The official code's recipe, experiment.CONSERT_FIT (eps 1e-6, weight decay 0.01, 10% linear warm-up then
    linear decay, clip 1.0), with its AdamW without bias correction and its warm-up from lr 0 (--optimizer official,
    the default); --optimizer pytorch: the same recipe with PyTorch's AdamW, warm-up from lr / warm-up steps.
    The evaluation the flags ask for, scored with --eval-pooling; the card of the stage's `inputs`."""
    if stage.kind == "unsup":
        lines, corpus = inputs, args.corpus or f"the STS12-16, STS-b and SICK sentences of {args.sts_corpus}"
    else:
        lines, corpus = [f"{p}\t{h}\t{label}" for p, h, label in inputs], f"{args.nli} (NLI pairs)"
    card = cli.model_card("ConSERT", make_parser(), args, argv, lines, pooling="mean", lr=stage.lr,
                          corpus=f"{corpus}, stage {stage.kind} of --strategy {args.strategy}")
    official = args.optimizer == "official"
    recipe = experiment.CONSERT_FIT | (dict(warmup_ratio=0.0, schedule="constant") if args.schedule == "constant"
                                       else {})
    return experiment.settings(
        args, loader, card, heldout, steps=stage.steps, epochs=stage.epochs, lr=stage.lr, out=out, resume=resume,
        eval_pooling=args.eval_pooling, patience=stage.patience, **recipe,
        optimizer_fn=OfficialAdamW if official else None,
        lr_factor_fn=train.linear_schedule_with_warmup if official and args.schedule == "official" else None)


DESCRIPTION = """\
Fine-tune a sentence encoder with ConSERT (arXiv:2105.11741): contrastive learning between two views of each
sentence made at the embedding layer, optionally fused with NLI supervision (§3.3).

The training defaults are the official scripts' (consert_train.OFFICIAL): unsupervised, feature cutoff 0.2 + token
shuffle, dropout off, temperature 0.1, batch 96, lr 5e-7, 10 epochs. Not theirs: --model (the shipped
all-MiniLM-L6-v2), and no model selection without an evaluation (--eval-data, --heldout or a task from your own
file). The author later found lr 2e-5 with temperature 0.05 better."""


def make_parser(view_names: Sequence[str] = VIEW_NAMES, description: str = DESCRIPTION) -> cli.ArgumentParser:
    """Every flag; `view_names`: the views --view1 / --view2 may name, `description` opens --help (a lab's objective
    may make more views, and has its own description: labs/)."""
    p = cli.ArgumentParser(description=description)
    src = p.add_argument_group("data")
    src.add_argument("--corpus", help="UTF-8 text file, one unlabelled sentence per line")
    src.add_argument("--sts-corpus", metavar="DATA_DIR",
                     help="instead of --corpus: every sentence of STS12-16, STS-b and SICK in DATA_DIR (the official "
                          "set, §4.1)")
    src.add_argument("--nli", help="NLI pairs for the supervised strategies: .jsonl (premise, hypothesis, label) "
                                   "or a SICK file")
    src.add_argument("--strategy", default="unsup", choices=list(OFFICIAL),
                     help="unsup: contrastive on --corpus. With --nli (§3.3): sup = NLI classifier only; joint = "
                          "classifier + weighted contrastive on the NLI sentences; sup-unsup / joint-unsup = that, "
                          "into OUT/stage1, then contrastive on --corpus")
    src.add_argument("--few-shot", type=int, metavar="N",
                     help="train on N sentences of the corpus drawn at random (by --seed): §5.3's few-shot study")
    src.add_argument("--upsample", action="store_true",
                     help="with --few-shot: repeat the N sentences up to the corpus's size, each floor or ceil of "
                          "(size / N) times, so an epoch holds as many batches as the full corpus's (the official "
                          "--do_upsampling repeats them int(size / N) times: lib/corpus.few_shot)")
    src.add_argument("--max-length", type=int, default=64,
                     help="the official max_seq_length: a sentence keeps at most max-length + 3 tokens, its two "
                          "special tokens included, so max-length + 1 word pieces (its min(n, max_seq_length) + 3)")
    src.add_argument("--bucketing", action="store_true",
                     help="batches of similar length (faster) instead of the official plain shuffled batches; the "
                          "batch decides the negatives, so this changes what is learnt")
    for prefix, title in (("", "the contrastive stage on the corpus (unsup, and stage 2 of sup-unsup / joint-unsup)"),
                          ("nli-", "the NLI stage (sup, joint, and stage 1 of sup-unsup / joint-unsup)")):
        group = p.add_argument_group(title)
        for i in (1, 2):
            group.add_argument(f"--{prefix}view{i}", choices=view_names,
                               help=f"view {i} (default: the official; " + (
                                   "joint stages only: a sup stage makes no views)" if prefix
                                   else "§5.2 compares pairs)"))
            group.add_argument(f"--{prefix}rate{i}", type=float,
                               help=f"cutoff / span / dropout rate of view {i} (default: the official view's own when "
                                    f"--{prefix}view{i} is not given; a view it names: 0.2)"
                               + (" (joint stages only)" if prefix else ""))
        group.add_argument(f"--{prefix}lr", type=float, help="AdamW learning rate (default: the official)")
        group.add_argument(f"--{prefix}epochs", type=int, help="passes over the data (default: the official; "
                                                                "ignored when the steps are given)")
        group.add_argument(f"--{prefix}steps", type=int, help="optimiser steps (default: the epochs' batches)")
        group.add_argument(f"--{prefix}encoder-dropout", default="auto", choices=["auto", "on", "off"],
                           help="BERT's own dropout; auto: the official (" + ("on in every NLI stage" if prefix else
                                "off for --strategy unsup, on in stage 2 of sup-unsup / joint-unsup")
                                + "), always on when a view is simcse")
        group.add_argument(f"--{prefix}patience", type=int, help="with an evaluation (--eval-data, "
                           "--heldout, a task from your own file): stop after this many evaluations without a better "
                           "score (default: the official; 0: never)")
        if prefix:
            group.add_argument("--nli-features", default=NLI_FEATURES[0], choices=NLI_FEATURES, metavar="FEATURES",
                               help=f"the classifier's input, one of two: {NLI_FEATURES[0]} (the official scripts' "
                                    f"--concatenation_sent_max_square) or {NLI_FEATURES[1]} (the paper's and SBERT's)")
    both = p.add_argument_group("both stages")
    both.add_argument("--model", default=None,
                      help=f"a {cli.checkpoint_families()} checkpoint: a local folder or a Hub id "
                           "such as bert-base-uncased (default: the shipped all-MiniLM-L6-v2)")
    both.add_argument("--batch-size", type=int, default=96,
                      help="sentences (or NLI pairs) per step (§5.5 compares 16-288); under torchrun the global "
                           "batch, split over the processes")
    both.add_argument("--temperature", type=float, default=0.1, help="NT-Xent temperature (§5.4; no stage sup)")
    both.add_argument("--adv-norm", type=float, default=1.0,
                      help="per-token length of the adversarial view's perturbation")
    both.add_argument("--cl-weight", type=float, default=0.15,
                      help="factor on the contrastive loss (official cl_rate; no stage sup)")
    both.add_argument("--optimizer", default="official", choices=["official", "pytorch"],
                      help="official: the official code's AdamW without bias correction, warm-up from lr 0 (its "
                           "numbers); pytorch: PyTorch's bias-corrected AdamW, warm-up from lr/warmup-steps")
    both.add_argument("--schedule", default="official", choices=["official", "constant"],
                      help="official: 10%% linear warm-up, then linear decay to 0 over the run; constant: the peak lr "
                           "from the first step to the last, as TSDAE trains (a run's step s is then the same whatever "
                           "its length: a learning curve resumes with a larger --steps). The warm-up starts from "
                           "lr 0 with --optimizer official, from lr / warm-up steps with pytorch")
    both.add_argument("--micro-batch", type=int, metavar="N",
                      help="encode each batch N sentences at a time with the cached gradient (GradCache, "
                           "arXiv:2101.06983): the whole batch's loss and exact gradient in the encoder memory of N; "
                           "the dropout and views are drawn per chunk (speedups/gradcache.py's classes, --plain or "
                           "not). Not with the adversarial view")
    both.add_argument("--local-negatives", action="store_true",
                      help="under torchrun: each process contrasts its own share of the batch as a batch of its own, "
                           "and DDP sums their gradients (default: every process's sentences are the negatives)")
    cli.add_run_arguments(both, out="runs/consert", inputs="input lines")
    ev = p.add_argument_group("model selection (contrastive training degrades late: keep the best dev checkpoint)")
    cli.add_selection_arguments(ev, eval_every=200, what="official: stsb-dev, every 200 steps")
    ev.add_argument("--eval-pooling", default="mean", choices=["mean", "last2-mean"],
                    help="mean of the last layer, or the average of the mean-pooled last two layers (the official "
                         "evaluation); evaluation only, the saved model always uses plain mean pooling")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, each in its range (check_args)."""
    p = make_parser()
    return check_args(p, p.parse_args(argv))


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """The inputs and views each stage of the strategy needs (the views' names are the parser's choices)."""
    kinds = [stage.kind for stage in OFFICIAL[args.strategy]]
    if "unsup" in kinds and bool(args.corpus) == bool(args.sts_corpus):
        p.error(f"--strategy {args.strategy} needs exactly one of --corpus and --sts-corpus")
    if kinds != ["unsup"] and not args.nli:
        p.error(f"--strategy {args.strategy} needs --nli")

    def given(*names: str) -> list[str]:  # the flags among `names` given on the command line
        return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]

    nli_view_flags = given("nli_view1", "nli_view2", "nli_rate1", "nli_rate2")
    contrastive_flags = given("corpus", "sts_corpus", "lr", "epochs", "steps", "patience", "view1", "view2", "rate1",
                              "rate2")
    contrastive_flags += given("few_shot") + (["--upsample"] if args.upsample else [])
    contrastive_flags += ["--encoder-dropout"] if args.encoder_dropout != "auto" else []
    if "unsup" not in kinds and contrastive_flags:
        p.error(f"--strategy {args.strategy} has no contrastive stage: {', '.join(contrastive_flags)} would change "
                "nothing (its NLI stage takes --nli-lr, --nli-epochs, ...)")
    nli_flags = given("nli", "nli_lr", "nli_epochs", "nli_steps", "nli_patience") + nli_view_flags
    nli_flags += ["--nli-encoder-dropout"] if args.nli_encoder_dropout != "auto" else []
    nli_flags += ["--nli-features"] if args.nli_features != NLI_FEATURES[0] else []
    if kinds == ["unsup"] and nli_flags:
        p.error(f"--strategy unsup has no NLI stage: {', '.join(nli_flags)} would change nothing (--strategy sup, "
                "joint, sup-unsup or joint-unsup train on --nli)")
    if "sup" in kinds and nli_view_flags:
        p.error(f"--strategy {args.strategy}'s NLI stage trains the classifier alone, with no views: "
                f"{', '.join(nli_view_flags)} would change nothing")
    changed = lambda name: getattr(args, name) != p.get_default(name)  # given, with another value than the default
    contrastive_loss = ["--temperature"] * changed("temperature") + ["--cl-weight"] * changed("cl_weight")
    if kinds == ["sup"] and contrastive_loss:
        p.error(f"--strategy sup trains the classifier alone, with no contrastive loss: {', '.join(contrastive_loss)} "
                "would change nothing")
    cli.check_arguments(p, args, positive=("lr", "nli_lr", "temperature"),
                        at_least_one=("epochs", "steps", "nli_epochs", "nli_steps", "batch_size", "eval_every",
                                      "micro_batch"),
                        ratios=("rate1", "rate2", "nli_rate1", "nli_rate2"), not_negative=("patience", "nli_patience"))
    for stage in stages(args):
        names = [view.name for view in stage.views]
        for i, view in enumerate(stage.views, start=1):
            if view.name in UNRATED_VIEWS and view.rate:
                p.error(f"--{'' if stage.kind == 'unsup' else 'nli-'}rate{i} would change nothing: the {view.name} "
                        "view takes no rate (the cutoffs, span and dropout do)")
        try:
            check_views(stage.views, names=None)
        except ValueError as e:
            p.error(str(e))
        if stage.kind == "joint" and set(names) <= {"none", "simcse"}:
            p.error(f"in a joint stage the views {' and '.join(names)} are both the one unaugmented pass "
                    "(consert.AdversarialConSERTLoss.vectors): NT-Xent would compare each vector with itself")
        if not stage.dropout and "simcse" in names:
            p.error("the simcse view is the encoder's own dropout: it needs the encoder's dropout on (or auto)")
        if args.micro_batch and "adversarial" in names and stage.kind != "sup":
            p.error("--micro-batch cannot take the adversarial view: its perturbation is a gradient through the "
                    "whole batch's loss, inside the forward pass")
    adversarial = any(view.name == "adversarial" for stage in stages(args) for view in stage.views
                      if stage.kind != "sup")
    if changed("adv_norm") and not adversarial:
        p.error("--adv-norm would change nothing: no view is adversarial")
    cli.check_selection(p, args)
    selection = given("patience", "nli_patience") + ["--eval-pooling"] * changed("eval_pooling")
    if selection and args.eval_task is None:  # (a task without its data: experiment.check_run says so)
        p.error(f"nothing is evaluated (no --eval-data, --heldout or dev file of your own): {', '.join(selection)} "
                "would change nothing")
    if args.bad_lines != "error" and not (args.corpus or args.nli):
        p.error("--bad-lines would change nothing: --sts-corpus reads the evaluation sets, which are clean")
    if args.plain and args.bucketing:
        p.error("--plain would change nothing: with --bucketing the encoder is model.Bert already (build_encoder)")
    if args.upsample and not args.few_shot:
        p.error("--upsample repeats the sentences of --few-shot N: give --few-shot too")
    if args.few_shot is not None and args.few_shot < 1:
        p.error(f"--few-shot must be at least 1 (got {args.few_shot})")
    if args.max_length < 1:
        p.error(f"--max-length must be at least 1 (got {args.max_length})")
    return args


if __name__ == "__main__":
    cli.run(main)
