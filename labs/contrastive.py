"""What the two ConSERT labs share: their command line and their run, consert_train.main's steps for --strategy
unsup with the contrastive stage trained by the lab's objective (a subclass of consert.ConSERTLoss)."""
from __future__ import annotations

import argparse
from pathlib import Path

import train
from commands import consert_train, experiment
from consert import ConSERTLoss, check_views
from lib import cli


def make_parser(lab: str, objective_class: type[ConSERTLoss]) -> cli.ArgumentParser:
    """`python consert.py`'s flags, the views' choices those `objective_class` makes, under the lab's description
    (its module's docstring) and what the lab accepts of them."""
    names = objective_class.view_names
    among = f"among {', '.join(names)}" if len(names) > 1 else f"both {names[0]}"
    what = (f"The run of `python consert.py FLAGS` for its contrastive stage alone (--strategy unsup: the NLI flags "
            f"below are refused), trained by {objective_class.__name__}: --view1 and --view2 {among}; "
            "not with --micro-batch. consert.py's flags:")
    return consert_train.make_parser(names, description=f"{lab}\n\n{what}")


def parse_args(argv: list[str] | None, objective_class: type[ConSERTLoss], lab: str = "") -> argparse.Namespace:
    """make_parser's flags, checked as consert_train.parse_args checks them, for --strategy unsup and this objective
    alone (whose views leave out the adversarial one: ConSERTLoss.view_names)."""
    p = make_parser(lab, objective_class)
    args, name = p.parse_args(argv), objective_class.__name__
    if args.strategy != "unsup":
        p.error(f"{name} is a lab of the contrastive stage: --strategy unsup only (got {args.strategy})")
    (stage,) = consert_train.stages(consert_train.check_args(p, args))
    try:
        check_views(stage.views, objective_class.view_names)
    except ValueError as e:
        p.error(f"{name}: {e}" + ("" if args.view1 or args.view2 else " (the official views: give --view1, --view2)"))
    if args.micro_batch:
        p.error(f"{name} is a lab of ConSERTLoss itself: not with --micro-batch (the cached gradient chunks "
                "ConSERT's own objective)")
    return args


def main(argv: list[str] | None, objective_class: type[ConSERTLoss], lab: str) -> int:
    """consert_train.main's steps for its one contrastive stage, trained by `objective_class` (`lab`: the lab's
    docstring, for --help)."""
    args = parse_args(argv, objective_class, lab)
    (stage,) = consert_train.stages(args)
    _, corpus, device, world = consert_train.read_inputs(args, [stage])
    encoder = consert_train.build_encoder(stage, args.model, args)
    objective = objective_class(encoder, stage.views, **consert_train.contrastive_settings(args, world))
    loader, run = consert_train.prepare_stage(stage, objective, corpus, Path(args.out), args, argv, device)
    state = train.train(encoder, objective, loader, run, device)
    experiment.say_best(state, args.eval_task, run.out)
    experiment.say_done(run.out, "mean pooling")
    return 0
