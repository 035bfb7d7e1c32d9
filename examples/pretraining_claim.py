"""The TSDAE paper's pre-training claim in miniature (arXiv:2104.06979 §6, fig. 2): is TSDAE a better step before
labelled training than continued masked-language modelling (MLM) on the same text, or than nothing?

    raw bert-mini --{none | MLM | TSDAE}, the same unlabelled sentences, the same steps-->
                  --CoSENT on k STS-b train pairs, k in {100, 1000, all}--> STS-b test Spearman, seeds 0-5

The unlabelled sentences are the STS12-16, STS-b and SICK sentences (lib.datafiles.sts_corpus) without any STS-b
dev or test sentence: the scored sentences stay unseen by every step. The paper fine-tunes on its domain tasks
(AskUbuntu, CQADupStack, TwitterPara, SciDocs); this is the same regime on the data here, not its numbers.
Fine-tuning and evaluation pool by the mean in every arm (TSDAE pre-trains with mean pooling too; app. A, tab. 7
finds mean and CLS equal), so the arms differ only in what pre-training did to the weights.

Each pre-training gets its learning rate by one rule, the same for both: a sweep over LEARNING_RATES (MLM's 5e-5 is
the paper's for its MLM baseline, §5.2), each tried at seed 0 and k = 1000, and the one with the best STS-b dev
Spearman after fine-tuning is the pre-training's rate for every seed. The sweep runs first; test never chooses.

    python examples/pretraining_claim.py --dry-run          # every command, and the cost estimate
    python examples/pretraining_claim.py                    # run what is not done yet (resumable), then the table
    python examples/pretraining_claim.py --summary          # the table from the saved scores, no training

Each arm is a run folder under --out (the weights; not kept in git) and a scores file under --results
(RESULTS/scores/ARM-sSEED.json, kept in git: a fresh clone rebuilds the table from them); an arm whose scores file
exists is never run again, and an arm stopped half-way resumes from its checkpoint. The tables (the sweep, then the
claim) go to stdout and RESULTS/table.md; the verdicts follow examples/arms.py's rule (docs/ablations.md, "How to
read a verdict").
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import arms
from arms import mean_sd, per_seed, publish, run_plan, training, verdict
from lib import cli, run
from lib.corpus import normalise_whitespace
from lib.datafiles import load_stsb, sts_corpus

PRETRAININGS = ("none", "mlm", "tsdae")
SIZES = {"100": 100, "1000": 1000, "all": None}  # k labelled STS-b train pairs (all: 5,749)
EPOCHS = {"100": 20, "1000": 3, "all": 1}  # 140, 189 and 360 steps of 16
# Seconds per arm on 2 CPU cores (measured on this project's machine; the estimate before a run).
LEARNING_RATES = (5e-5, 1e-4)  # the sweep of each pre-training's learning rate
SWEEP_SEED, SWEEP_K = 0, "1000"  # where the sweep fine-tunes and reads STS-b dev
COST = {"pretrain": 250, "finetune-100": 32, "finetune-1000": 45, "finetune-all": 85, "evaluate": 11}


def make_parser() -> argparse.ArgumentParser:
    p = arms.make_parser(__doc__, out="runs/claim", results="docs/pretraining_claim")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5],
                   help="seeds of every arm (0-4, then 5: at five the rule projected six for TSDAE - MLM at k = 100)")
    p.add_argument("--steps", type=int, default=2000, help="pre-training steps of 8 sentences (MLM and TSDAE alike)")
    p.add_argument("--mlm-lr", type=float, help="MLM's pre-training learning rate (default: the sweep's choice)")
    p.add_argument("--tsdae-lr", type=float, help="TSDAE's pre-training learning rate (default: the sweep's choice)")
    p.add_argument("--lr", type=float, default=5e-5,
                   help="fine-tuning learning rate: the top of BERT's grid (arXiv:1810.04805 §A.3), "
                        "for a 4-layer model")
    return p


# ----------------------------------------------------------------------------
# The arms: each a list of commands and the file that says it is done


def prepare_data(data: Path, out: Path) -> tuple[Path, Path]:
    """OUT/corpus.txt: the unlabelled sentences without STS-b dev and test ones; OUT/stsb_train.tsv: the labelled
    STS-b train pairs with a header, as finetune.py reads them."""
    corpus, labelled = out / "corpus.txt", out / "stsb_train.tsv"
    if corpus.exists() and labelled.exists():
        return corpus, labelled
    unseen = {normalise_whitespace(s) for split in ("dev", "test")
              for path in (data / "stsbenchmark" / f"sts-{split}.csv",
                           data / "stsbenchmark" / "senteval" / f"sts-{split}.csv")
              for s1, s2, _ in load_stsb(path) for s in (s1, s2)}
    sentences = [s for s in sts_corpus(data) if normalise_whitespace(s) not in unseen]
    out.mkdir(parents=True, exist_ok=True)
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    rows = load_stsb(data / "stsbenchmark" / "sts-train.csv")
    labelled.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in rows),
                        encoding="utf-8")
    print(f"{corpus}: {len(sentences)} unlabelled sentences; {labelled}: {len(rows)} labelled pairs")
    return corpus, labelled


def pretrained(method: str, lr: float | None, args: argparse.Namespace) -> str:
    """The name of a pre-training and its settings ("none", "mlm-lr5e-05-steps2000", ...): a run with other
    settings is another arm, with other files."""
    return method if method == "none" else f"{method}-lr{lr:g}-steps{args.steps}"


def pretraining(method: str, lr: float | None, seed: int, corpus: Path,
                args: argparse.Namespace) -> tuple[Path, list[tuple[str, list[str]]]]:
    """(the model the fine-tuning starts from, the (kind, command) that makes it)."""
    if method == "none":
        return Path(args.model), []
    folder = Path(args.out) / f"{pretrained(method, lr, args)}-s{seed}"
    script = "tsdae.py" if method == "tsdae" else "baselines/mlm.py"
    pooling = ["--pooling", "mean"] if method == "tsdae" else []
    flags = ["--corpus", str(corpus), "--model", args.model, "--steps", str(args.steps), "--batch-size", "8",
             "--lr", str(lr), "--seed", str(seed), *pooling]
    return folder / "model", [] if run.finished(folder) else [("pretrain", training(script, folder, flags))]


def fine_tuning(method: str, lr: float | None, k: str, seed: int, start: Path, labelled: Path,
                args: argparse.Namespace) -> tuple[Path, list[tuple[str, list[str]]]]:
    """(the scores file of the arm, the (kind, command)s that make it: fine-tune, then STS-b dev and test)."""
    arm = f"{pretrained(method, lr, args)}-k{k}-lr{args.lr:g}"
    folder = Path(args.out) / f"ft-{arm}-s{seed}"
    scores = Path(args.results) / "scores" / f"{arm}-s{seed}.json"
    if scores.exists():
        return scores, []
    sample = ["--sample", str(SIZES[k])] if SIZES[k] else []
    flags = ["--pairs", str(labelled), "--model", str(start), "--pooling", "mean", *sample, "--epochs",
             str(EPOCHS[k]), "--lr", str(args.lr), "--seed", str(seed)]
    evaluation = [sys.executable, "evaluate.py", "--model", str(folder / "model"), "--tasks", "stsb", "--data-dir",
                  args.data, "--json", str(scores)]
    return scores, [(f"finetune-{k}", training("finetune.py", folder, flags)), ("evaluate", evaluation)]


def sweep(corpus: Path, labelled: Path, args: argparse.Namespace) -> tuple[dict, list[tuple[str, list[str]]]]:
    """The learning-rate sweep: ({(method, lr): its scores file}, the commands still to run)."""
    files, plan = {}, []
    for method in PRETRAININGS[1:]:
        for lr in LEARNING_RATES:
            start, commands = pretraining(method, lr, SWEEP_SEED, corpus, args)
            files[(method, lr)], more = fine_tuning(method, lr, SWEEP_K, SWEEP_SEED, start, labelled, args)
            plan += commands + more if more else []
    return files, plan


def dev_score(scores: Path) -> float:
    return json.loads(scores.read_text())["details"]["stsb"]["dev"]


def chosen_rates(files: dict[tuple[str, float], Path], args: argparse.Namespace) -> dict[str, float | None] | None:
    """Each pre-training's learning rate: the one given, else the sweep's best STS-b dev; None while the sweep is
    not done."""
    given = {"none": None, "mlm": args.mlm_lr, "tsdae": args.tsdae_lr}
    if any(given[method] is None and not scores.exists() for (method, _), scores in files.items()):
        return None
    return {method: lr if lr is not None or method == "none" else
            max(LEARNING_RATES, key=lambda rate: dev_score(files[(method, rate)])) for method, lr in given.items()}


def sweep_table(files: dict[tuple[str, float], Path], rates: dict[str, float | None]) -> str:
    lines = [f"| pre-training | lr | STS-b dev after fine-tuning (k = {SWEEP_K}, seed {SWEEP_SEED}) | chosen |",
             "| --- | --- | --- | --- |"]
    for (method, lr), scores in files.items():
        lines.append(f"| {'MLM' if method == 'mlm' else 'TSDAE'} | {lr:g} | {dev_score(scores):.2f} | "
                     f"{'yes' if rates[method] == lr else ''} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# The table


def table(results: dict[tuple[str, str], list[dict]], seeds: list[int]) -> str:
    """Markdown: per k the three arms' STS-b test (mean ± sd over the seeds), then the per-seed test differences
    TSDAE - MLM and TSDAE - none with their verdicts on test and on dev."""
    lines = ["| labelled pairs k | none | MLM | TSDAE | TSDAE - MLM per seed (mean) | verdict (test; dev) "
             "| TSDAE - none per seed (mean) | verdict (test; dev) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k in SIZES:
        if not all(len(results.get((method, k), [])) == len(seeds) for method in PRETRAININGS):
            lines.append(f"| {k} | (not all arms done) | | | | | | |")
            continue
        test = {method: [s["stsb"] for s in results[(method, k)]] for method in PRETRAININGS}
        dev = {method: [s["details"]["stsb"]["dev"] for s in results[(method, k)]] for method in PRETRAININGS}
        row = [k] + [mean_sd(test[method]) for method in PRETRAININGS]
        for other in ("mlm", "none"):
            differences = [t - o for t, o in zip(test["tsdae"], test[other])]
            on_dev = verdict([t - o for t, o in zip(dev["tsdae"], dev[other])])
            row += [per_seed(differences), f"{verdict(differences)}; dev: {on_dev}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def missing(results_files: dict[tuple[str, str, int], Path]) -> str:
    """The arms without a scores file, one line: each arm and its missing seeds."""
    absent: dict[str, list[str]] = {}
    arms = sorted(results_files.items(),
                  key=lambda item: (PRETRAININGS.index(item[0][0]), list(SIZES).index(item[0][1])))
    for (_, _, seed), scores in arms:
        if not scores.exists():
            absent.setdefault(scores.name.rsplit("-s", 1)[0], []).append(str(seed))
    return "; ".join(f"{arm} seeds {', '.join(seeds)}" for arm, seeds in absent.items())


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    os.chdir(ROOT)
    out, results_dir = Path(args.out), Path(args.results)
    corpus, labelled = (out / "corpus.txt", out / "stsb_train.tsv") if args.dry_run or args.summary else \
        prepare_data(Path(args.data), out)
    sweep_files, plan = sweep(corpus, labelled, args)
    if not args.summary:
        run_plan(plan, COST, args.dry_run)
    rates = chosen_rates(sweep_files, args)
    if rates is None:
        print(f"the learning-rate sweep is not done yet ({sum(not f.exists() for f in sweep_files.values())} of "
              f"{len(sweep_files)} scores missing in {results_dir / 'scores'}): python examples/pretraining_claim.py "
              "runs it, then the arms at the chosen rates (--dry-run: its commands and cost)")
        return 0
    plan, results_files = [], {}
    for seed in args.seeds:
        starts = {}
        for method in PRETRAININGS:
            starts[method], commands = pretraining(method, rates[method], seed, corpus, args)
            plan += commands
        for method in PRETRAININGS:
            for k in SIZES:
                results_files[(method, k, seed)], commands = fine_tuning(method, rates[method], k, seed, starts[method],
                                                                         labelled, args)
                plan += commands
    if not args.summary:
        run_plan(plan, COST, args.dry_run)
    if args.dry_run:
        return 0
    results = {}
    for (method, k, seed), scores in results_files.items():
        if scores.exists():
            results.setdefault((method, k), []).append(json.loads(scores.read_text()))
    text = (f"The learning rates, chosen on STS-b dev:\n\n{sweep_table(sweep_files, rates)}\n\n"
            f"STS-b test Spearman x 100, mean ± sd over seeds {', '.join(map(str, args.seeds))} ({args.steps} "
            f"pre-training steps of 8 sentences at lr {rates['mlm']:g} (MLM) and {rates['tsdae']:g} (TSDAE); "
            f"fine-tuning lr {args.lr:g}):\n\n" + table(results, args.seeds))
    print(text)
    if len(results) < len(PRETRAININGS) * len(SIZES) or any(len(r) < len(args.seeds) for r in results.values()):
        print(f"not done yet: {missing(results_files)}")
    publish(results_dir / "table.md", text)
    return 0


if __name__ == "__main__":
    cli.run(main)
