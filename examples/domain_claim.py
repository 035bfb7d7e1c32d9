"""TSDAE's headline claim in miniature (arXiv:2104.06979 §5, tab. 2 and 3): trained on a domain's own unlabelled
text, is TSDAE ahead of masked-LM, SimCSE and ConSERT on that domain's task, while it trails them on general STS?

    {raw bert-mini | all-MiniLM-L6-v2} --{TSDAE | MLM | SimCSE | ConSERT}, the 10,236 TwitterPara sentences-->
        TwitterPara AP and STS-b test Spearman at fixed steps (a learning curve), seeds 0-4

The corpus is the unique sentences of TwitterPara's two test files, without their labels: the paper's domain
setting is transductive too (§4). TwitterPara has no dev split, so nothing is chosen on it: the steps are fixed
here in advance, every arm is scored at each of them, and no checkpoint is picked.

Every arm trains batches of 8 sentences at a constant learning rate (so that step s of a run is the same whatever
its length, and a curve grows by resuming with a larger --steps), each with its paper's settings:
  tsdae    delete 0.6, CLS pooling, lr 3e-5 (app. B); from all-MiniLM-L6-v2 its own mean pooling
  mlm      baselines/mlm.py, lr 5e-5, mean pooling (§5.2)
  simcse   consert.py with the dropout view twice (SimCSE), lr 5e-5 (the TSDAE paper's SimCSE, app. B),
           temperature 0.05 (SimCSE's), mean pooling
  consert  consert.py with its official views (token shuffle, feature cutoff 0.2), lr and temperature as SimCSE's
           so that the two contrastive arms differ only in their views, mean pooling
Departures, all for the same budget and a curve that resumes: batch 8 for every arm (the paper's SimCSE: 512;
ConSERT: 96), a constant lr (ConSERT's official schedule warms up and decays over the run: consert.py --schedule
constant), and 30,000 steps at most (the length of the paper's tuning runs, app. A) where its final models train
100,000.

    python examples/domain_claim.py --dry-run       # every command, and the cost estimate
    python examples/domain_claim.py                 # run what is not done yet (resumable), then the tables
    python examples/domain_claim.py --summary       # the tables and the figure from the saved scores, no training

Each point is a run folder under --out (the weights; not kept in git) and a scores file under --results
(RESULTS/scores/START-METHOD-sSEED-stepSTEP.json, kept in git): its TwitterPara AP, STS-b dev and test, the
training loss, and the seconds its training took from the point before. A point whose scores file exists is never
run again; a stopped one resumes from its run's checkpoint. The tables go to stdout and RESULTS/table.md, the figure
to RESULTS/curves.png; the verdicts follow examples/arms.py's rule (docs/ablations.md, "How to read a verdict").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import arms
from arms import gather, mean_sd, per_seed, publish, training, verdict
from lib import cli
from lib.run import read_progress
from lib.weights import default_model_path
from results import twitter_sentences

METHODS = ("tsdae", "mlm", "simcse", "consert")
NAMES = {"raw": "no training", "tsdae": "TSDAE", "mlm": "MLM", "simcse": "SimCSE", "consert": "ConSERT"}
STARTS = {"standin": "raw bert-mini stand-in", "minilm": "all-MiniLM-L6-v2 checkpoint"}
STEPS = {"standin": (500, 1000, 2000, 5000, 10000, 20000, 30000), "minilm": (150, 500, 1000, 2000, 5000, 10000)}
METRICS = {"twitterpara": "TwitterPara AP", "stsb": "STS-b test Spearman"}
# Seconds per training step of 8 and per evaluation on 2 CPU cores, the estimate before a run: the stand-in's from
# table.md's measured cost line, all-MiniLM-L6-v2's guessed from its one-thread line (each scores file keeps the
# measured "seconds").
STEP_COST = {("standin", "tsdae"): 0.24, ("standin", "mlm"): 0.13, ("standin", "simcse"): 0.19,
             ("standin", "consert"): 0.17, ("minilm", "tsdae"): 0.35, ("minilm", "mlm"): 0.2,
             ("minilm", "simcse"): 0.3, ("minilm", "consert"): 0.3}
EVAL_COST = {"standin": 25, "minilm": 45}
MIN_SEEDS = 3  # a verdict, and the README's row of a method, at the last step with this many seeds or more


def make_parser() -> argparse.ArgumentParser:
    p = arms.make_parser(__doc__, out="runs/domain", results="docs/domain_claim")
    p.add_argument("--starts", nargs="+", choices=list(STARTS), default=list(STARTS),
                   help="the checkpoints the arms start from (--model: the stand-in's folder)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                   help="seeds of every arm (five: at three the rule left TSDAE against masked-LM at 'needs ~5 seeds')")
    p.add_argument("--up-to", type=int, help="train no point beyond this step in this call (the tables read all)")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                   help="train only these arms in this call (the tables read all)")
    p.add_argument("--threads", type=int, default=2,
                   help="CPU threads per training (1: two calls with different --seeds can share 2 cores; the cost "
                        "line reads the 2-thread runs)")
    return p


# ----------------------------------------------------------------------------
# The points: each a training to a fixed step (resuming the arm's run) and its evaluation


def flags(start: str, method: str, corpus: Path, seed: int) -> tuple[str, list[str]]:
    """(the script, its flags but --steps) of one arm: the settings of the docstring's table."""
    common = ["--corpus", str(corpus), "--batch-size", "8", "--seed", str(seed)]
    if method == "tsdae":
        return "tsdae.py", common + ["--lr", "3e-5", "--pooling", "cls" if start == "standin" else "mean"]
    if method == "mlm":
        return "baselines/mlm.py", common + ["--lr", "5e-5", "--pooling", "mean"]
    views = ["--view1", "simcse", "--view2", "simcse"] if method == "simcse" else []  # consert: the official views
    return "consert.py", common + [*views, "--lr", "5e-5", "--temperature", "0.05", "--optimizer", "pytorch",
                                   "--schedule", "constant"]


@dataclass
class Point:
    start: str
    method: str  # "raw" for the untrained checkpoint, scored with each pooling the arms use
    seed: int
    step: int
    scores: Path  # RESULTS/scores/START-METHOD-sSEED-stepSTEP.json (raw: START-raw-POOLING.json)
    folder: Path  # the arm's run folder (raw: where its evaluation is written)
    train: tuple[str, list[str]] | None  # the training script and its flags to this step (None for raw)
    evaluate: list[str]

    def commands(self) -> list[list[str]]:
        """Training (decided when it runs: it resumes the arm's run the points before left) and evaluation."""
        script, flags = self.train or (None, [])
        return ([training(script, self.folder, flags)] if script else []) + [self.evaluate]


def model_of(start: str, args: argparse.Namespace) -> str:
    return args.model if start == "standin" else str(default_model_path())


def points(args: argparse.Namespace, corpus: Path) -> list[Point]:
    """Every point of the experiment, in the order they run: per start and seed, all methods at a step before any
    goes to the next, so a stopped experiment has every curve equally far."""
    found, scores = [], Path(args.results) / "scores"
    for start in args.starts:
        model = model_of(start, args)
        for pooling in ("cls", "mean") if start == "standin" else ("mean",):
            folder = Path(args.out) / f"{start}-raw-{pooling}"
            found.append(Point(start, "raw", 0, 0, scores / f"{start}-raw-{pooling}.json", folder, None,
                               evaluation(model, folder, args, "--pooling", pooling)))
        for seed in args.seeds:
            for step in STEPS[start]:
                for method in METHODS:
                    folder = Path(args.out) / f"{start}-{method}-s{seed}"
                    script, arm_flags = flags(start, method, corpus, seed)
                    found.append(Point(start, method, seed, step, scores / f"{start}-{method}-s{seed}-step{step}.json",
                                       folder, (script, ["--model", model, *arm_flags, "--steps", str(step)]),
                                       evaluation(str(folder / "model"), folder, args)))
    return found


def evaluation(model: str, folder: Path, args: argparse.Namespace, *more: str) -> list[str]:
    return [sys.executable, "evaluate.py", "--model", model, "--tasks", "twitterpara,stsb", "--data-dir", args.data,
            "--json", str(folder / "eval.json"), *more]


def run_points(todo: list[Point], dry_run: bool, threads: int = 2) -> None:
    """The cost estimate, then each point: train (resuming the arm's run from its checkpoint), evaluate, and its
    scores file written from the run folder (arms.gather) with the step its training started from and the seconds it
    took; a failed command stops the script (rerun to resume)."""
    at = {p.folder: checkpoint_step(p.folder) for p in todo if p.train}  # where each arm's run stands
    cost = 0.0
    for p in todo:
        cost += EVAL_COST[p.start]
        if p.train:
            cost += STEP_COST[(p.start, p.method)] * (p.step - at[p.folder])
            at[p.folder] = p.step
    print(f"{len(todo)} points to score, about {cost / 60:.0f} minutes on 2 CPU cores")
    for p in todo:
        seconds, from_step = 0.0, checkpoint_step(p.folder)
        for command in p.commands():
            shown = "python " + " ".join(command[1:])
            if dry_run:
                print(shown)
                continue
            print(f"[{time.strftime('%H:%M:%S')}] {shown}", flush=True)
            t0 = time.perf_counter()
            if subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": str(threads)}).returncode != 0:
                raise SystemExit(f"error: this point failed: {shown} (rerun the script to resume)")
            seconds = seconds or time.perf_counter() - t0  # the training's (the first command's) seconds
        if not dry_run:
            record = gather(p.folder)
            if p.train:
                record.update(step=p.step, from_step=from_step, seconds=round(seconds, 1), threads=threads)
            p.scores.parent.mkdir(parents=True, exist_ok=True)
            p.scores.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def checkpoint_step(folder: Path) -> int:
    """The step an arm's run stands at, where its next training resumes: its checkpoint's, 0 without one (a run
    whose checkpoint is gone trains from the start)."""
    state = read_progress(folder / "checkpoint")
    return state.step if state else 0


# ----------------------------------------------------------------------------
# The tables and the figure


def load(all_points: list[Point]) -> dict[tuple[str, str, int], dict[int, dict]]:
    """{(start, method, step): {seed: scores}} of the points scored; raw under each method at step 0 (TSDAE's
    pooling for TSDAE, mean for the others)."""
    found: dict[tuple[str, str, int], dict[int, dict]] = {}
    for p in all_points:
        if p.scores.exists() and p.method != "raw":
            found.setdefault((p.start, p.method, p.step), {})[p.seed] = json.loads(p.scores.read_text())
    for p in all_points:
        if p.scores.exists() and p.method == "raw":
            raw = json.loads(p.scores.read_text())
            pooling = raw["eval"]["pooling"]
            for method in METHODS:
                if pooling == ("cls" if p.start == "standin" and method == "tsdae" else "mean"):
                    found[(p.start, method, 0)] = {-1: raw}  # no seed: scored once
    return found


def values(found: dict, start: str, method: str, step: int, seeds: list[int], metric: str) -> list[float]:
    """The metric of the seeds scored at a point (at step 0, the untrained checkpoint's one score)."""
    runs = found.get((start, method, step), {})
    return [score(r, metric) for s, r in runs.items() if step == 0 or s in seeds]


def score(scores: dict, metric: str, split: str = "test") -> float:
    if metric == "stsb" and split == "dev":
        return scores["eval"]["details"]["stsb"]["dev"]
    return scores["eval"][metric]


def curve_table(found: dict, start: str, metric: str, seeds: list[int]) -> str:
    """Markdown: one row per step, one column per method, the metric's mean ± sd over the seeds scored (n)."""
    lines = ["| step | " + " | ".join(NAMES[m] for m in METHODS) + " |", "| --- |" + " --- |" * len(METHODS)]
    for step in (0, *STEPS[start]):
        cells = []
        for method in METHODS:
            scored = values(found, start, method, step, seeds, metric)
            cells.append("" if not scored else mean_sd(scored) + ("" if step == 0 else f" (n {len(scored)})"))
        if any(cells):
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def last_step(found: dict, start: str, seeds: list[int], methods: tuple[str, ...] = METHODS
              ) -> tuple[int, list[int]] | None:
    """The last step at which each of `methods` has at least MIN_SEEDS of the same seeds scored, and those seeds."""
    for step in reversed(STEPS[start]):
        common = [s for s in seeds if all(s in found.get((start, m, step), {}) for m in methods)]
        if len(common) >= MIN_SEEDS:
            return step, common
    return None


def verdict_table(found: dict, start: str, seeds: list[int]) -> str:
    """TSDAE - each other method at the last step both reached with MIN_SEEDS seeds or more, per seed, on TwitterPara
    AP and STS-b test, with the verdict (and, for STS-b, the verdict on dev)."""
    lines = ["| TSDAE - | at step (seeds) | TwitterPara AP per seed (mean) | verdict | STS-b test per seed (mean) "
             "| verdict (test; dev) |", "| --- | --- | --- | --- | --- | --- |"]
    for other in METHODS[1:]:
        if (last := last_step(found, start, seeds, ("tsdae", other))) is None:
            continue
        step, common = last
        row = [NAMES[other], f"{step} ({', '.join(map(str, common))})"]
        for metric in METRICS:
            test = [score(found[(start, "tsdae", step)][s], metric) - score(found[(start, other, step)][s], metric)
                    for s in common]
            shown = verdict(test)
            if metric == "stsb":
                dev = [score(found[(start, "tsdae", step)][s], metric, "dev")
                       - score(found[(start, other, step)][s], metric, "dev") for s in common]
                shown += f"; dev: {verdict(dev)}"
            row += [per_seed(test), shown]
        lines.append("| " + " | ".join(row) + " |")
    if len(lines) == 2:
        return f"(no method has {MIN_SEEDS} seeds at a step TSDAE reached: no verdict)"
    return "\n".join(lines)


def cost_line(found: dict, start: str) -> str:
    """The measured seconds per training step of each method: the median over its 2-thread points of their training's
    seconds over their steps (a point that only reloaded a finished run, or ran beside other work, moves it little);
    a method with none, over its 1-thread points (two runs side by side on the 2 cores), marked so."""
    parts = []
    for method in METHODS:
        for threads in (2, 1):
            timed = [r["seconds"] / (r["step"] - r["from_step"]) for (s, m, step), runs in found.items()
                     if s == start and m == method and step for r in runs.values() if r.get("threads", 2) == threads]
            if timed:
                per_step = statistics.median(timed)
                parts.append(f"{NAMES[method]} {per_step:.3f} s ({10000 * per_step / 60:.0f} min per 10,000 steps)"
                             + (" at one thread beside another run" if threads == 1 else ""))
                break
    return "Measured training time per step of 8 on 2 CPU cores: " + "; ".join(parts) + "." if parts else ""


def summary(found: dict, args: argparse.Namespace) -> str:
    """The README's table: per start, the untrained checkpoint and each method at the last step it reached with
    MIN_SEEDS seeds or more (its verdicts against TSDAE: the table's), on both metrics."""
    lines = []
    for start in args.starts:
        last = {m: last_step(found, start, args.seeds, (m,)) for m in METHODS}
        if not any(last.values()):
            continue
        lines += ([f"| from the {STARTS[start]} | step of 8 sentences (seeds) | TwitterPara AP | STS-b test |",
                   "| --- | --- | --- | --- |"] if not lines else [f"| **from the {STARTS[start]}** | | | |"])
        untrained = [mean_sd(values(found, start, "tsdae", 0, [], metric)) for metric in METRICS]
        if start == "standin":  # the untrained checkpoint under both poolings the arms use
            untrained = [f"{c} / {mean_sd(values(found, start, 'mlm', 0, [], metric))}" for c, metric in
                         zip(untrained, METRICS)]
        lines.append(f"| untrained{' (CLS / mean pooling)' if start == 'standin' else ''} | 0 | {untrained[0]} | "
                     f"{untrained[1]} |")
        for method, (step, seeds) in ((m, at) for m, at in last.items() if at):
            cells = [mean_sd(values(found, start, method, step, seeds, metric)) for metric in METRICS]
            lines.append(f"| {NAMES[method]} | {step} ({', '.join(map(str, seeds))}) | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) or f"(no method has {MIN_SEEDS} seeds at a step yet)"


def text_of(found: dict, args: argparse.Namespace) -> str:
    parts = []
    for start in args.starts:
        if not any(s == start for s, _, step in found if step):
            parts.append(f"### From the {STARTS[start]}: not run yet "
                         f"(python examples/domain_claim.py --starts {start})")
            continue
        parts.append(f"### From the {STARTS[start]}")
        for metric, name in METRICS.items():
            parts += [f"{name} x 100, mean ± sd over the seeds scored (n):",
                      curve_table(found, start, metric, args.seeds)]
        parts += [verdict_table(found, start, args.seeds), cost_line(found, start)]
    return "\n\n".join(part for part in parts if part)


def figure(found: dict, args: argparse.Namespace, path: Path) -> None:
    """RESULTS/curves.png: per start, TwitterPara AP and STS-b test against steps, one line per method (the seeds'
    mean, a band of ± one sd), the untrained checkpoint at step 0."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("the figure needs matplotlib (pip install matplotlib): skipped")
        return
    starts = [start for start in args.starts if any(s == start for s, _, step in found if step)]
    if not starts:
        return
    fig, axes = plt.subplots(len(starts), 2, figsize=(11, 4 * len(starts)), squeeze=False, dpi=100)
    for row, start in enumerate(starts):
        for col, (metric, name) in enumerate(METRICS.items()):
            ax = axes[row][col]
            for index, method in enumerate(METHODS):
                color = f"C{index}"  # a method keeps its colour in every panel
                steps, means, sds = [], [], []
                for step in (0, *STEPS[start]):
                    if scored := values(found, start, method, step, args.seeds, metric):
                        steps.append(max(step, 50))  # step 0 drawn at 50 on the log axis
                        means.append(statistics.mean(scored))
                        sds.append(statistics.stdev(scored) if len(scored) > 1 else 0.0)
                if len(steps) > 1:  # a method not trained from this start: no line
                    ax.plot(steps, means, marker="o", color=color, label=NAMES[method])
                    ax.fill_between(steps, [m - s for m, s in zip(means, sds)], [m + s for m, s in zip(means, sds)],
                                    color=color, alpha=0.2)
            ax.set_xscale("log")
            ax.set_xticks([50, *STEPS[start]], ["0", *(f"{s // 1000}k" if s >= 1000 else str(s) for s in STEPS[start])])
            ax.minorticks_off()
            ax.tick_params(axis="x", labelsize=8)  # 20k and 30k lie close on the log axis
            ax.set_xlabel("training steps of 8 sentences (log scale; untrained at 0)")
            ax.set_ylabel(f"{name} x 100")
            ax.set_title(f"{name}, from the {STARTS[start]}")
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    os.chdir(ROOT)
    corpus = Path(args.out) / "twitter_sentences.txt"
    if not (args.dry_run or args.summary or corpus.exists()):
        corpus.parent.mkdir(parents=True, exist_ok=True)
        corpus.write_text("\n".join(twitter_sentences(Path(args.data))) + "\n", encoding="utf-8")
    everything = points(args, corpus)
    if not args.summary:
        run_points([p for p in everything if not p.scores.exists() and (args.up_to is None or p.step <= args.up_to)
                    and p.method in ("raw", *args.methods)], args.dry_run, args.threads)
    if args.dry_run:
        return 0
    found = load(everything)
    text = text_of(found, args)
    print(text)
    publish(Path(args.results) / "table.md", text)
    publish(Path(args.results) / "summary.md", summary(found, args))
    figure(found, args, Path(args.results) / "curves.png")
    return 0


if __name__ == "__main__":
    cli.run(main)
