"""What the two ConSERT labs share: their command line and their run, consert_train.main's steps for --strategy
unsup with the contrastive stage trained by the lab's objective (a subclass of consert.ConSERTLoss)."""
from __future__ import annotations

import argparse
from pathlib import Path

import train
from commands import consert_train, experiment
from consert import VIEW_NAMES, ConSERTLoss, check_views


def parse_args(argv: list[str] | None, objective_class: type[ConSERTLoss]) -> argparse.Namespace:
    """`python consert.py`'s flags (the views `objective_class` makes among the choices), checked as
    consert_train.parse_args checks them, for --strategy unsup and this objective alone."""
    p = consert_train.make_parser(tuple(dict.fromkeys((*VIEW_NAMES, *objective_class.view_names))))
    args = consert_train.check_args(p, p.parse_args(argv))
    name = objective_class.__name__
    if args.strategy != "unsup":
        p.error(f"{name} is a lab of the contrastive stage: --strategy unsup only (got {args.strategy})")
    (stage,) = consert_train.stages(args)
    try:
        check_views(stage.views, objective_class.view_names)
    except ValueError as e:
        p.error(f"{name}: {e}")
    if args.micro_batch or "adversarial" in [view.name for view in stage.views]:
        p.error(f"{name} is a lab of ConSERTLoss itself: not with --micro-batch (the cached gradient chunks "
                "ConSERT's own objective) nor the adversarial view")
    return args


def main(argv: list[str] | None, objective_class: type[ConSERTLoss]) -> int:
    """consert_train.main's steps for its one contrastive stage, trained by `objective_class`."""
    args = parse_args(argv, objective_class)
    (stage,) = consert_train.stages(args)
    _, corpus, device, world = consert_train.read_inputs(args, [stage])
    encoder = consert_train.build_encoder(stage, args.model, args)
    objective = objective_class(encoder, stage.views, **consert_train.contrastive_settings(args, world))
    loader, run = consert_train.prepare_stage(stage, objective, corpus, Path(args.out), args, argv, device)
    state = train.train(encoder, objective, loader, run, device)
    experiment.say_best(state, args.eval_task, run.out)
    experiment.say_done(run.out, "mean pooling")
    return 0
