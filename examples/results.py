"""The README's own runs, each table one command, its scores kept in git (docs/results/scores/) and its table
written from them alone: the same way docs/ablations/ and docs/pretraining_claim/ publish theirs.

  mini      the Results rows: ConSERT and TSDAE from the raw bert-mini stand-in, STS-b dev and test, seeds 0-2
  topics    TSDAE and ConSERT adapting all-MiniLM-L6-v2 to examples/topics.txt: neighbours on their topic, STS-b
  labels    then your labels: fine-tuning on examples/topics_pairs.tsv, scored on examples/topics_test.tsv
  collapse  the cosines of random and paraphrase pairs, raw and after each method: a table and its figure (.png)
  twitter   TSDAE and ConSERT adapting all-MiniLM-L6-v2 to the TwitterPara test sentences (transductive, TSDAE §4)
  minilm    the shipped all-MiniLM-L6-v2 on every task of evaluate.py --tasks all, and its alignment and uniformity
  heldout   does the label-free held-out signal (--heldout) track STS-b dev? TSDAE and ConSERT from bert-mini

    python examples/results.py all --dry-run      # every command, and the cost estimate
    python examples/results.py topics             # run what is not done yet (resumable), then its table
    python examples/results.py all --summary      # every table from the saved scores, no training

Each table goes to docs/results/NAME.md (collapse's figure beside it, collapse.png) and into the documents that
quote it (examples/arms.py: publish); tests/test_published.py rebuilds each from the scores in git and compares. A
run's weights stay under --out (not kept in git).
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
import heldout_vs_dev
import plot_similarities
from arms import gather, mean_sd, publish, run_plan, training
from lib import cli, run
from lib.datafiles import sts_corpus
from lib.weights import default_model_path

SEEDS = (0, 1, 2)
EXPERIMENTS = ("mini", "topics", "labels", "collapse", "twitter", "minilm", "heldout")
TOPICS = ["--corpus", "examples/topics.txt"]
LABELS = ["--labels", "examples/topics_labels.txt"]
TEST_SET = "sts:examples/topics_test.tsv,pairs:examples/topics_test.tsv"
# Seconds per command on 2 CPU cores (measured on this project's machine; the estimate before a run).
COST = {"consert-mini": 160, "tsdae-mini": 55, "tsdae-topics": 60, "consert-topics": 58, "finetune": 20,
        "evaluate": 12, "neighbours": 4, "collapse": 110, "tsdae-twitter": 100, "consert-twitter": 90,
        "evaluate-twitter": 40, "evaluate-all": 90, "align-uniform": 153, "heldout-tsdae": 299,
        "heldout-consert": 314, "heldout": 2}


def make_parser() -> argparse.ArgumentParser:
    p = arms.make_parser(__doc__, out="runs/results", results="docs/results")
    p.add_argument("experiment", choices=[*EXPERIMENTS, "all"], help="which table")
    return p


# ----------------------------------------------------------------------------
# The arms: each a few commands into OUT/ARM, then one scores file RESULTS/scores/ARM.json gathered from them


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def evaluation(model: str, tasks: str, into: Path, args: argparse.Namespace, *flags: str) -> list[str]:
    return python("evaluate.py", "--model", model, "--tasks", tasks, "--data-dir", args.data, "--json", str(into),
                  *flags)


def arms_of(experiment: str, args: argparse.Namespace) -> dict[str, list[tuple[str, list[str]]]]:
    """{arm name: its (kind, command)s}; an arm writes into OUT/ARM/ and arms.gather reads what it left there."""
    out, mini, minilm = Path(args.out), args.model, default_model_path()
    found: dict[str, list[tuple[str, list[str]]]] = {}
    if experiment == "mini":
        for pooling in ("mean", "cls"):
            found[f"raw-mini-{pooling}"] = [("evaluate", evaluation(
                mini, "stsb", out / f"raw-mini-{pooling}" / "eval.json", args, "--pooling", pooling))]
        for seed in SEEDS:
            c, t = out / f"consert-mini-s{seed}", out / f"tsdae-mini-s{seed}"
            found[c.name] = [] if run.finished(c) else [("consert-mini", training("consert.py", c, [
                "--model", mini, "--sts-corpus", args.data, "--lr", "2e-5", "--temperature", "0.05", "--optimizer",
                "pytorch", "--steps", "300", "--eval-data", args.data, "--eval-every", "50", "--seed", str(seed)]))]
            found[c.name] += [("evaluate", evaluation(str(c / "best"), "stsb", c / "eval.json", args)),
                              ("evaluate", evaluation(str(c / "best"), "stsb", c / "eval-last2.json", args,
                                                      "--pooling", "last2-mean"))]
            found[t.name] = [] if run.finished(t) else [("tsdae-mini", training("tsdae.py", t, [
                "--corpus", str(out / "sts_sentences.txt"), "--model", mini, "--steps", "516", "--lr", "1e-4",
                "--seed", str(seed)]))]
            found[t.name] += [("evaluate", evaluation(str(t / "model"), "stsb", t / "eval.json", args))]
    elif experiment == "topics":
        raw = out / "raw-minilm"
        found[raw.name] = [("neighbours", python("examples/neighbours.py", *TOPICS, *LABELS,
                                                 "--json", str(raw / "neighbours.json"))),
                           ("evaluate", evaluation(minilm, "stsb", raw / "eval.json", args))]
        for seed in SEEDS:
            t, c = out / f"tsdae-topics-s{seed}", out / f"consert-topics-s{seed}"
            commands = {
                t: ("tsdae-topics", training("tsdae.py", t, [*TOPICS, "--pooling", "mean", "--epochs", "10",
                                                             "--seed", str(seed)])),
                c: ("consert-topics", training("consert.py", c, [
                    *TOPICS, "--lr", "2e-5", "--temperature", "0.05", "--batch-size", "32", "--epochs", "20",
                    "--optimizer", "pytorch", "--seed", str(seed)]))}
            for folder, command in commands.items():
                found[folder.name] = ([] if run.finished(folder) else [command]) + [
                    ("neighbours", python("examples/neighbours.py", "--model", str(folder / "model"), *TOPICS, *LABELS,
                                          "--json", str(folder / "neighbours.json"))),
                    ("evaluate", evaluation(str(folder / "model"), "stsb", folder / "eval.json", args))]
    elif experiment == "labels":
        found["labels-minilm"] = [("evaluate", evaluation(minilm, TEST_SET, out / "labels-minilm" / "eval.json", args))]
        for seed in SEEDS:
            tsdae = out / f"tsdae-topics-s{seed}" / "model"  # the topics experiment's run
            found[f"labels-tsdae-s{seed}"] = [("evaluate", evaluation(
                str(tsdae), TEST_SET, out / f"labels-tsdae-s{seed}" / "eval.json", args))]
            for name, start in ((f"finetuned-tsdae-s{seed}", str(tsdae)), (f"finetuned-minilm-s{seed}", minilm)):
                folder = out / name
                found[name] = ([] if run.finished(folder) else [("finetune", training("finetune.py", folder, [
                    "--pairs", "examples/topics_pairs.tsv", "--model", start, "--epochs", "3",
                    "--seed", str(seed)]))]) \
                    + [("evaluate", evaluation(str(folder / "model"), TEST_SET, folder / "eval.json", args))]
    elif experiment == "collapse":
        models = [f"{mini}:raw bert-mini", f"{out / 'consert-mini-s0' / 'best'}:ConSERT",
                  f"{out / 'tsdae-mini-s0' / 'model'}:TSDAE"]  # the mini experiment's seed 0
        found["collapse"] = [("collapse", python(
            "examples/plot_similarities.py", "--model", *models, "--data-dir", args.data, "--out",
            str(out / "collapse" / "similarities.png"), "--json", str(out / "collapse" / "similarities.json")))]
    elif experiment == "twitter":
        raw = out / "raw-minilm-twitter"
        found[raw.name] = [("evaluate-twitter", evaluation(minilm, "twitterpara", raw / "eval.json", args))]
        corpus = ["--corpus", str(out / "twitter_sentences.txt")]
        for seed in SEEDS:
            t, c = out / f"tsdae-twitter-s{seed}", out / f"consert-twitter-s{seed}"
            commands = {
                t: ("tsdae-twitter", training("tsdae.py", t, [*corpus, "--pooling", "mean", "--steps", "150", "--lr",
                                                              "3e-5", "--seed", str(seed)])),
                c: ("consert-twitter", training("consert.py", c, [
                    *corpus, "--steps", "50", "--batch-size", "96", "--lr", "2e-5", "--temperature", "0.05",
                    "--optimizer", "pytorch", "--seed", str(seed)]))}
            for folder, command in commands.items():
                found[folder.name] = ([] if run.finished(folder) else [command]) + [
                    ("evaluate-twitter", evaluation(str(folder / "model"), "twitterpara", folder / "eval.json", args))]
    elif experiment == "minilm":
        found["minilm"] = [("evaluate-all", evaluation(minilm, "all", out / "minilm" / "eval.json", args)),
                           ("align-uniform", evaluation(minilm, "align-uniform", out / "minilm" / "align.json", args))]
    elif experiment == "heldout":  # one run each; the held-out lines are left out of training (--heldout)
        common = ["--corpus", str(out / "sts_sentences.txt"), "--model", mini, "--eval-data", args.data]
        t, c = out / "heldout-tsdae", out / "heldout-consert"
        commands = {
            t: ("heldout-tsdae", training("tsdae.py", t, [*common, "--steps", "400", "--lr", "1e-4",
                                                          "--heldout", "1000", "--eval-every", "25"])),
            c: ("heldout-consert", training("consert.py", c, [
                *common, "--lr", "2e-5", "--temperature", "0.05", "--optimizer", "pytorch", "--steps", "300",
                "--heldout", "960", "--eval-every", "20", "--patience", "0"]))}
        for folder, command in commands.items():
            found[folder.name] = ([] if run.finished(folder) else [command]) + [
                ("heldout", python("examples/heldout_vs_dev.py", str(folder), "--json", str(folder / "heldout.json")))]
    return found


# ----------------------------------------------------------------------------
# The tables


def band(values: list[float], digits: int = 2) -> str:
    """Each seed, then mean ± sd: '95.2 / 94.6 / 95.2 (95.0 ± 0.3)'."""
    return f"{' / '.join(f'{v:.{digits}f}' for v in values)} ({mean_sd(values, digits)})"


def table(experiment: str, scores: dict[str, dict]) -> str:
    """Markdown: an experiment's table from its arms' scores ({arm: its scores file})."""
    seeds = [f"s{seed}" for seed in SEEDS]

    def of(arm: str, *keys: str) -> list[float]:
        found = []
        for name in [arm] if arm in scores else [f"{arm}-{s}" for s in seeds]:
            value = scores[name]
            for key in keys:
                value = value[key]
            found.append(value)
        return found

    if experiment == "mini":
        test, dev = ("eval", "details", "stsb", "test"), ("eval", "details", "stsb", "dev")
        steps = ", ".join(str(s) for s in of("consert-mini", "best_step"))
        rows = [("raw bert-mini (mean)", "raw-mini-mean", test, dev),
                (f"ConSERT, best dev checkpoint (steps {steps} of 300)", "consert-mini", test, dev),
                ("same, `last2-mean` pooling (the official evaluation)", "consert-mini",
                 ("eval-last2", *test[1:]), ("eval-last2", *dev[1:])),
                ("raw bert-mini (CLS)", "raw-mini-cls", test, dev),
                ("TSDAE, 516 x 8 steps at lr 1e-4 (CLS)", "tsdae-mini", test, dev)]
        lines = ["| model (pooling) | STS-b dev | STS-b test |", "| --- | --- | --- |"]
        for name, arm, t, d in rows:
            lines.append(f"| {name} | {mean_sd(of(arm, *d))} | {mean_sd(of(arm, *t))} |")
    elif experiment == "topics":
        lines = ["| model | 3 nearest neighbours on their topic, % | STS-b test | "
                 "decoder / contrastive loss, first -> last |",
                 "| --- | --- | --- | --- |"]
        lines.append(f"| all-MiniLM-L6-v2 as shipped | {of('raw-minilm', 'neighbours', 'agreement')[0]:.1f} | "
                     f"{of('raw-minilm', 'eval', 'stsb')[0]:.2f} | |")
        for name, arm in (("TSDAE, 10 epochs, mean pooling", "tsdae-topics"), ("ConSERT, 20 epochs", "consert-topics")):
            first, last = of(arm, "loss", "first"), of(arm, "loss", "last")
            lines.append(f"| {name} | {band(of(arm, 'neighbours', 'agreement'), 1)} | "
                         f"{band(of(arm, 'eval', 'stsb'))} | "
                         + " / ".join(f"{a:.2g} -> {b:.2g}" for a, b in zip(first, last)) + " |")
    elif experiment == "labels":
        lines = ["| model | Spearman | AP |", "| --- | --- | --- |"]
        for name, arm in (("all-MiniLM-L6-v2 as shipped", "labels-minilm"), ("after TSDAE", "labels-tsdae"),
                          ("after TSDAE, then fine-tuned on the 175 pairs", "finetuned-tsdae"),
                          ("fine-tuned on the 175 pairs without TSDAE", "finetuned-minilm")):
            spearman = of(arm, "eval", "sts:examples/topics_test.tsv")
            ap = of(arm, "eval", "pairs:examples/topics_test.tsv")
            shown = [band(v) if len(v) > 1 else f"{v[0]:.2f}" for v in (spearman, ap)]
            lines.append(f"| {name} | {shown[0]} | {shown[1]} |")
    elif experiment == "twitter":
        lines = ["| model | TwitterPara AP (mean of URL, PIT) | URL AP | PIT AP | loss, first -> last |",
                 "| --- | --- | --- | --- | --- |"]
        for name, arm in (("all-MiniLM-L6-v2 as shipped", "raw-minilm-twitter"),
                          ("+ TSDAE, 150 x 8 at lr 3e-5, mean pooling", "tsdae-twitter"),
                          ("+ ConSERT, 50 x 96 at lr 2e-5, temperature 0.05", "consert-twitter")):
            cells = [of(arm, "eval", "twitterpara"), of(arm, "eval", "details", "twitterpara", "url_ap"),
                     of(arm, "eval", "details", "twitterpara", "pit_ap")]
            loss = "" if arm == "raw-minilm-twitter" else \
                " / ".join(f"{a:.2g} -> {b:.2g}" for a, b in zip(of(arm, "loss", "first"), of(arm, "loss", "last")))
            lines.append("| " + " | ".join([name, *(band(v) if len(v) > 1 else f"{v[0]:.2f}" for v in cells), loss])
                         + " |")
    elif experiment == "minilm":
        lines = ["| task | score | details |", "| --- | --- | --- |"]
        for result in (scores["minilm"]["eval"], scores["minilm"]["align"]):
            for task, score in result.items():
                if not isinstance(score, (int, float)):  # details, skipped, pooling, split
                    continue
                details = ", ".join(f"{name} {value:,}" if isinstance(value, int) else f"{name} {value:.2f}"
                                    for name, value in result["details"].get(task, {}).items())
                lines.append(f"| {task} | {score:.2f} | {details} |")
            lines += [f"| {task} | not scored: its data files are missing | |" for task in result.get("skipped", {})]
    elif experiment == "heldout":
        lines = ["| run | evaluations | best STS-b dev (step) | signal | first -> last | Spearman with dev | "
                 "its lowest at step | dev there |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for name, arm in (("TSDAE, 400 x 8", "heldout-tsdae"), ("ConSERT, 300 x 96", "heldout-consert")):
            found = scores[arm]["heldout"]["evaluations"]
            best = max(found, key=lambda r: r["eval"])
            head = [name, str(len(found)), f"{best['eval']:.2f} ({best['step']})"]
            for signal, rho, step, there, first, last in heldout_vs_dev.signals(found):
                lines.append("| " + " | ".join([*head, signal, f"{first:.2f} -> {last:.2f}", f"{rho:.2f}", str(step),
                                                 f"{there:.2f}"]) + " |")
                head = ["", "", ""]
    else:
        lines = ["| model | random pairs, mean cosine | paraphrases, mean cosine | alignment | uniformity |",
                 "| --- | --- | --- | --- | --- |"]
        for label, r in scores["collapse"]["similarities"].items():
            lines.append(f"| {label} | {r['random']:.2f} | {r['paraphrase']:.2f} | {r['alignment']:.2f} | "
                         f"{r['uniformity']:.2f} |")
    return "\n".join(lines)


def twitter_sentences(data: Path) -> list[str]:
    """The unique sentences of the two TwitterPara test files (URL corpus columns 1-2, PIT test.data columns 3-4),
    in order of first appearance."""
    found: dict[str, None] = {}
    for line in (data / "twitterpara" / "Twitter_URL_Corpus_test.txt").read_text(encoding="utf-8").splitlines():
        found.update(dict.fromkeys(s.strip() for s in line.split("\t")[:2]))
    for line in (data / "twitterpara" / "test.data").read_text(encoding="utf-8").splitlines():
        found.update(dict.fromkeys(s.strip() for s in line.split("\t")[2:4]))
    return [s for s in found if s]


def prepare(args: argparse.Namespace) -> None:
    """The unlabelled corpora: OUT/sts_sentences.txt, the STS12-16, STS-b and SICK sentences (89,192 lines, STS-b
    dev and test among them, as the official ConSERT corpus: TSDAE's in the mini experiment); OUT/twitter_sentences.txt,
    the TwitterPara test sentences."""
    for name, sentences in (("sts_sentences.txt", sts_corpus), ("twitter_sentences.txt", twitter_sentences)):
        corpus = Path(args.out) / name
        if not corpus.exists():
            corpus.parent.mkdir(parents=True, exist_ok=True)
            corpus.write_text("\n".join(sentences(Path(args.data))) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    os.chdir(ROOT)
    scores_dir = Path(args.results) / "scores"
    for experiment in EXPERIMENTS if args.experiment == "all" else (args.experiment,):
        found = arms_of(experiment, args)
        files = {arm: scores_dir / f"{arm}.json" for arm in found}
        if not args.summary:
            if not args.dry_run:
                prepare(args)
            run_plan([c for arm, commands in found.items() if not files[arm].exists() for c in commands], COST,
                     args.dry_run)
            if args.dry_run:
                continue
            scores_dir.mkdir(parents=True, exist_ok=True)
            for arm, path in files.items():
                if not path.exists():
                    path.write_text(json.dumps(gather(Path(args.out) / arm), indent=2) + "\n", encoding="utf-8")
        absent = [arm for arm, path in files.items() if not path.exists()]
        if absent:
            print(f"{experiment}: no scores yet for {', '.join(absent)} "
                  f"(python examples/results.py {experiment} makes them)")
            continue
        scores = {arm: json.loads(path.read_text()) for arm, path in files.items()}
        text = table(experiment, scores)
        print(f"{experiment}:\n{text}\n")
        publish(Path(args.results) / f"{experiment}.md", text)
        if experiment == "collapse":  # its figure, from the same scores
            try:
                plot_similarities.draw(scores["collapse"]["similarities"], Path(args.results) / "collapse.png")
            except ImportError:
                print("collapse: its figure needs matplotlib, which is not installed (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    cli.run(main)
