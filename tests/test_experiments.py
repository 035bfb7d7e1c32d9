"""The experiment scripts of examples/ (pretraining_claim.py, ablations.py): --dry-run lists every arm, --summary
rebuilds the tables from saved scores alone, and the verdicts read the per-seed differences as they say."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import ablations
import arms
import domain_claim
import pretraining_claim


def dry_run(script: str, *argv) -> list[str]:
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), *argv, "--dry-run"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


@pytest.mark.quick
def test_verdicts():
    """The rule: a mean of at least 1 point and p < 0.05 in a paired t-test over seeds; else cannot tell, why."""
    assert arms.verdict([1.0, 2.0, 1.5]) == "holds (p 0.035)"  # t = 1.5 / (0.5 / sqrt 3) = 5.2 > 4.30
    assert arms.verdict([-1.0, -2.0, -1.5]) == "reversed (p 0.035)"
    # every seed agrees and the mean is above the sd (the old rule's "holds"), but t = 2.6 < 4.30 (2 df)
    assert arms.verdict([3.0, 1.0, 5.0]) == "cannot tell: needs ~5 seeds (p 0.122)"
    # steady seeds, p < 0.001, but a fifth of a point: no effect, and more seeds would not make one
    assert arms.verdict([0.19, 0.20, 0.20]) == "cannot tell: below the minimum effect (p < 0.001)"
    assert arms.verdict([2.0, 40.0, -36.0]).startswith("cannot tell: needs over 30 seeds")
    assert arms.verdict([2.0]) == "cannot tell: needs more seeds"
    assert arms.mean_sd([1.0, 2.0, 3.0]) == "2.00 ± 1.00"


def claim_args(tmp_path, *argv) -> list[str]:
    return ["--out", str(tmp_path / "claim"), "--results", str(tmp_path / "results"), *argv]


def write_sweep(tmp_path, dev: dict[tuple[str, float], float]) -> None:
    """Scores files of the learning-rate sweep: {(method, lr): STS-b dev after fine-tuning}."""
    files, _ = pretraining_claim.sweep(Path("corpus.txt"), Path("pairs.tsv"),
                                       pretraining_claim.make_parser().parse_args(claim_args(tmp_path)))
    for key, scores in files.items():
        scores.parent.mkdir(parents=True, exist_ok=True)
        scores.write_text(json.dumps({"stsb": 50.0, "details": {"stsb": {"dev": dev[key], "test": 50.0}}}))


def test_the_claim_sweeps_then_lists_every_arm(tmp_path):
    """First the learning-rate sweep (both pre-trainings at both rates, seed 0, k = 1000), and nothing else until
    it is done; then every arm at the rate each pre-training's STS-b dev chose (the same rule for both)."""
    lines = dry_run("pretraining_claim.py", *claim_args(tmp_path))
    assert lines[0].startswith("12 commands to run")
    commands = [c for c in lines[1:] if c.startswith("python ")]
    for script in ("baselines/mlm.py", "tsdae.py"):
        pretrainings = [c for c in commands if c.startswith(f"python {script}")]
        assert len(pretrainings) == 2 and {c.split("--lr ")[1].split()[0] for c in pretrainings} == {"5e-05", "0.0001"}
    assert all("--sample 1000 " in c and "--seed 0 " in c for c in commands if "finetune.py" in c)
    assert lines[-1].startswith("the learning-rate sweep is not done yet (4 of 4 scores missing")

    write_sweep(tmp_path, {("mlm", 5e-5): 60.0, ("mlm", 1e-4): 58.0, ("tsdae", 5e-5): 59.0, ("tsdae", 1e-4): 61.0})
    lines = dry_run("pretraining_claim.py", *claim_args(tmp_path))
    assert lines[0].startswith("0 commands to run")
    commands = [c for c in lines[2:] if c.startswith("python ")]
    assert lines[1].startswith("116 commands to run")  # 12 pre-trainings; 54 arms less the sweep's 2,
    # each fine-tune + evaluate
    mlm = [c for c in commands if "baselines/mlm.py" in c]
    assert len(mlm) == 6 and all("--lr 5e-05 " in c for c in mlm)  # the sweep's choice for MLM
    assert sum(c.startswith("python tsdae.py") and "--lr 0.0001 " in c for c in commands) == 6  # and for TSDAE
    assert sum("finetune.py" in c for c in commands) == 52 and sum("evaluate.py" in c for c in commands) == 52
    assert sum("--sample 100 " in c for c in commands) == 18 and sum("--sample 1000 " in c for c in commands) == 16
    assert all(c.split("--json ")[1].startswith(str(tmp_path / "results" / "scores"))
               for c in commands if "evaluate.py" in c)


def test_the_claim_table_from_saved_scores(tmp_path):
    """--summary: the sweep's choice, then the table and the per-seed differences from the scores files alone,
    with the verdicts on test and on dev; nothing trained."""
    argv = claim_args(tmp_path, "--seeds", "0", "1", "2")
    write_sweep(tmp_path, {("mlm", 5e-5): 40.0, ("mlm", 1e-4): 60.0, ("tsdae", 5e-5): 61.0, ("tsdae", 1e-4): 40.0})
    args = pretraining_claim.make_parser().parse_args(argv)
    rates = {"none": None, "mlm": 1e-4, "tsdae": 5e-5}
    score = {"none": 50.0, "mlm": 52.0, "tsdae": 53.0}
    for seed in (0, 1, 2):
        for method in pretraining_claim.PRETRAININGS:
            start, _ = pretraining_claim.pretraining(method, rates[method], seed, Path("corpus.txt"), args)
            for k in pretraining_claim.SIZES:
                scores = Path(args.results) / "scores" \
                    / f"{pretraining_claim.pretrained(method, rates[method], args)}" \
                    f"-k{k}-lr5e-05-s{seed}.json"
                test = score[method] + seed * (method == "tsdae") * (k == "all")
                dev = test - seed * (method == "tsdae") * (k == "all")  # dev: TSDAE 1 above MLM in every seed
                scores.write_text(json.dumps({"stsb": test, "details": {"stsb": {"dev": dev, "test": test}}}))
    pretraining_claim.main([*argv, "--summary"])
    table = (tmp_path / "results" / "table.md").read_text()
    # the chosen rates' sweep arms are their seed 0, k = 1000 arms (rewritten below: dev 52 and 53)
    assert "| MLM | 0.0001 | 52.00 | yes |" in table and "| TSDAE | 5e-05 | 53.00 | yes |" in table
    assert "| MLM | 5e-05 | 40.00 |  |" in table
    assert "| all | 50.00 ± 0.00 | 52.00 ± 0.00 | 54.00 ± 1.00 | +1.00, +2.00, +3.00 (mean +2.00) | " \
           "cannot tell: needs " \
           "~4 seeds (p 0.074); dev: holds (p < 0.001) | +3.00, +4.00, +5.00 (mean +4.00) | holds (p 0.020); " \
           "dev: holds (p < 0.001) |" in table
    assert "at lr 0.0001 (MLM) and 5e-05 (TSDAE); fine-tuning lr 5e-05)" in table


def test_the_claim_summary_says_what_is_missing(tmp_path):
    """In a fresh clone (no scores yet) --summary ends at once, in one line saying what is missing, and writes
    nothing; with some scores, the table and a line naming the arms still to run."""
    command = [sys.executable, "examples/pretraining_claim.py", "--summary", *claim_args(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == (f"the learning-rate sweep is not done yet (4 of 4 scores missing in "
                             f"{tmp_path / 'results' / 'scores'}): python examples/pretraining_claim.py runs it, then "
                             "the arms at the chosen rates (--dry-run: its commands and cost)\n")
    assert not (tmp_path / "results" / "table.md").exists()
    write_sweep(tmp_path, {("mlm", 5e-5): 60.0, ("mlm", 1e-4): 58.0, ("tsdae", 5e-5): 59.0, ("tsdae", 1e-4): 61.0})
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and "| 100 | (not all arms done) |" in result.stdout
    assert "not done yet: none-k100-lr5e-05 seeds 0, 1, 2, 3, 4, 5; none-k1000-lr5e-05 seeds 0, 1, 2, 3, 4, 5;" \
        in result.stdout
    assert "mlm-lr5e-05-steps2000-k1000-lr5e-05 seeds 1, 2, 3, 4, 5;" in result.stdout  # seed 0: the sweep's


def test_the_ablations_list_every_arm_once(tmp_path):
    lines = dry_run("ablations.py", "all", "--out", str(tmp_path / "ablations"), "--results", str(tmp_path / "results"))
    commands = lines[1:]
    tsdae = {c.split("--out ")[1].split()[0] for c in commands if c.startswith("python tsdae.py")}
    consert = {c.split("--out ")[1].split()[0] for c in commands if c.startswith("python consert.py")}
    # TSDAE: 5 noises at 0.3 (delete 0.3 is also tab. 6's), ratios 0.1, 0.6, 0.8, 0.9, mean and max pooling, untied
    assert len(tsdae) == 12 * len(ablations.SEEDS["tsdae"])
    # ConSERT: 9 view pairs, 10 temperature arms (0.1 at 2e-5 is the official pair), 3 batch sizes, 3 few-shot sizes
    assert len(consert) == (9 + 9 + 3 + 3) * len(ablations.SEEDS["consert"])
    assert sum("--few-shot 100 --upsample" in c for c in commands) == 3
    assert len(lines) - 1 == 2 * (len(tsdae) + len(consert))  # each arm: train, then evaluate
    # a finished arm (its scores saved) is listed as done, and its commands are not planned again
    args = ablations.make_parser().parse_args(["all", "--out", str(tmp_path / "ablations"),
                                               "--results", str(tmp_path / "results")])
    scores, _ = ablations.arm_commands(ablations.TABLES["tsdae-tying"], "untied", 1, Path("corpus.txt"), args)
    scores.parent.mkdir(parents=True)
    scores.write_text("{}")
    again = dry_run("ablations.py", "all", "--out", str(tmp_path / "ablations"), "--results", str(tmp_path / "results"))
    assert again[:2] == ["1 arms done (never run again):", str(scores)] \
        and again[2].startswith(f"{len(lines) - 3} commands")


def test_a_dry_run_piped_into_head_ends_without_a_traceback(tmp_path):
    result = subprocess.run(f"{sys.executable} examples/ablations.py all --dry-run --out {tmp_path} "
                            f"--results {tmp_path} | head -1",
                            shell=True, capture_output=True, text=True, timeout=120, cwd=ROOT)
    arms = 12 * len(ablations.SEEDS["tsdae"]) + 24 * len(ablations.SEEDS["consert"])
    assert result.stdout.startswith(f"{2 * arms} commands to run") and result.stderr == ""  # train, evaluate


def test_an_ablation_table_from_saved_scores(tmp_path, monkeypatch):
    """--summary of tsdae-ratio: the paper's numbers beside ours, the per-seed differences from the chosen arm on
    dev and on test, the verdicts of each split by the rule, and the rows where the splits disagree marked."""
    monkeypatch.setattr(ablations, "SEEDS", {**ablations.SEEDS, "tsdae": (0, 1, 2)})  # the scores below: 3 seeds
    out, argv = tmp_path / "results", ["tsdae-ratio", "--out", str(tmp_path / "runs"),
                                       "--results", str(tmp_path / "results")]
    table = ablations.TABLES["tsdae-ratio"]
    ours = {"0.1": [40.0, 44.0, 36.0], "0.3": [45.0, 40.0, 47.0], "0.6": [45.0, 46.0, 47.0], "0.8": [46.0, 47.5, 48.0],
            "0.9": [30.0, 31.0, 35.0]}
    dev = {"0.1": [40.0, 44.0, 36.0], "0.3": [45.0, 40.0, 47.0], "0.6": [45.0, 46.0, 47.0], "0.8": [46.0, 47.5, 48.0],
           "0.9": [44.5, 45.0, 46.0]}  # 0.9: 0.5 to 1 point below 0.6 on dev, 12 to 15 on test
    for name, (flags, _) in table.arms.items():
        for seed, test, d in zip(ablations.SEEDS["tsdae"], ours[name], dev[name]):
            scores, _ = ablations.arm_commands(table, name, seed, Path("corpus.txt"),
                                               ablations.make_parser().parse_args(argv))
            scores.parent.mkdir(parents=True, exist_ok=True)
            scores.write_text(json.dumps({"stsb": test, "details": {"stsb": {"dev": d}}}))
    ablations.main([*argv, "--summary"])
    text = (out / "tsdae-ratio.md").read_text()
    assert "| **0.6** | 78.77 | 46.00 ± 1.00 | 46.00 ± 1.00 | | | | |" in text
    # every seed in the paper's order, mean 6 > sd 4.6 (the old rule's "holds"), but t = 2.3: p 0.15
    # (scipy.stats.ttest_1samp)
    assert ("| 0.1 | 77.81 | 40.00 ± 4.00 | 40.00 ± 4.00 | +5.00, +2.00, +11.00 (mean +6.00) | "
            "cannot tell: needs ~5 seeds "
            "(p 0.151) |") in text
    assert ("| 0.9 | 75.67 | 45.17 ± 0.76 | 32.00 ± 2.65 | +0.50, +1.00, +1.00 (mean +0.83) | cannot tell: below the "
            "minimum effect (p 0.038) | +15.00, +15.00, +12.00 (mean +14.00) | "
            "holds (p 0.005) (**differs from dev**) |") in text
    assert ("| -1.00, -1.50, -1.00 (mean -1.17) | reversed (p 0.020) | -1.00, -1.50, -1.00 (mean -1.17) | reversed "
            "(p 0.020) |") in text  # 0.8
    assert "| +0.00, +6.00, +0.00 (mean +2.00) | cannot tell: needs ~15 seeds (p 0.423) |" in text  # 0.3
    assert json.loads((out / "tsdae-ratio.json").read_text())["arms"]["0.9"]["test"] == [30.0, 31.0, 35.0]


def test_the_figure_is_drawn_from_a_table(tmp_path):
    pytest.importorskip("matplotlib")
    import plot_ablations

    (tmp_path / "tsdae-pooling.json").write_text(json.dumps({"chosen": "cls", "arms": {
        "cls": {"paper": 78.77, "dev": [1, 2, 3], "test": [40.0, 41.0, 42.5]},
        "mean": {"paper": 78.84, "dev": [1, 2, 3], "test": [44.0, 45.0, 43.0]}}}))
    plot_ablations.main(["--results", str(tmp_path), "--out", str(tmp_path / "figures")])
    assert (tmp_path / "figures" / "tsdae-pooling.png").stat().st_size > 5000


def test_the_readme_runs_list_every_arm(tmp_path):
    """results.py all --dry-run: each experiment's commands, seeds 0-2, every evaluation into its run folder."""
    lines = dry_run("results.py", "all", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"))
    commands = [c for c in lines if c.startswith("python ")]
    assert [c.split()[0] for c in lines if not c.startswith("python ")] == ["17", "20", "16", "1", "13", "2", "4"]
    assert sum("--heldout" in c and "--eval-data" in c for c in commands) == 2  # heldout: TSDAE and ConSERT
    assert sum(c.startswith("python consert.py") and "--eval-data" in c for c in commands) == 4  # mini's 3, heldout
    assert sum(c.startswith("python finetune.py") for c in commands) == 6  # labels: from TSDAE and from MiniLM
    assert all(f"--json {tmp_path / 'runs'}" in c for c in commands if c.startswith("python evaluate.py"))
    assert {c.split("--seed ")[1].split()[0] for c in commands
            if "--seed " in c and "similarities" not in c} == {"0", "1", "2"}


def test_the_readme_runs_gather_and_summarise(tmp_path, capsys):
    """A run folder's JSON files and log become the arm's scores file; --summary with scores missing names them
    and writes nothing, and with them all writes the table."""
    import results

    folder = tmp_path / "runs" / "raw-minilm-twitter"
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps({"model": "/somewhere", "twitterpara": 70.0, "details": {
        "twitterpara": {"url_ap": 75.0, "pit_ap": 65.0}}}))
    assert arms.gather(folder) == {"eval": {"twitterpara": 70.0,
                                            "details": {"twitterpara": {"url_ap": 75.0, "pit_ap": 65.0}}}}
    (folder / "log.jsonl").write_text("".join(json.dumps({"step": i, "loss": 10.0 - i, "grad_norm": 1.0 + i}) + "\n"
                                              for i in range(1, 11)) + json.dumps({"step": 5, "eval": 2.0}) + "\n"
                                      + json.dumps({"step": 10, "eval": 3.0}) + "\n")
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "progress.json").write_text(  # lower is better: a loss
        json.dumps({"steps": 10, "step": 10, "best": 2.0, "done": True}))
    assert arms.gather(folder)["loss"] == {"first": 9.0, "last": 0.0, "final": 0.0, "steps": 10}
    assert arms.gather(folder)["smallest_grad_norm"] == 2.0 and arms.gather(folder)["eval_last"] == 3.0
    assert arms.gather(folder)["best_step"] == 5

    argv = ["twitter", "--summary", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]
    results.main(argv)
    assert "twitter: no scores yet for raw-minilm-twitter, tsdae-twitter-s0," in capsys.readouterr().out
    assert not (tmp_path / "results" / "twitter.md").exists()
    scores = tmp_path / "results" / "scores"
    scores.mkdir(parents=True)
    for arm, ap in (("raw-minilm-twitter", 70.0), *((f"{m}-twitter-s{s}", ap + s)
                                                    for m, ap in (("tsdae", 60.0), ("consert", 80.0))
                                                    for s in range(3))):
        scores.joinpath(f"{arm}.json").write_text(json.dumps({"eval": {"twitterpara": ap, "details": {"twitterpara": {
            "url_ap": ap + 1, "pit_ap": ap - 1}}},
            **({"loss": {"first": 10.0, "last": 7.125}} if "s" in arm[-2:] else {})}))
    results.main(argv)
    table = (tmp_path / "results" / "twitter.md").read_text()
    assert "| all-MiniLM-L6-v2 as shipped | 70.00 | 71.00 | 69.00 |  |" in table
    assert "| + ConSERT, 50 x 96 at lr 2e-5, temperature 0.05 | 80.00 / 81.00 / 82.00 (81.00 ± 1.00) |" in table
    assert "| 10 -> 7.1 / 10 -> 7.1 / 10 -> 7.1 |" in table


def test_the_labs_list_every_arm_once_and_summarise(tmp_path, capsys):
    """labs.py all --dry-run: 13 arms over seeds 0-2 (lab 5's over 0-7), shared arms run once; --summary writes a lab's
    table from the scores files alone: each seed, mean ± sd, the per-seed difference and its verdicts on test and
    dev."""
    import lab_results as labs

    lines = dry_run("lab_results.py", "all", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"))
    assert lines[0].startswith("118 commands to run")  # (13 arms x 3 seeds + lab 5's 4 arms x 5 more)
    # x (train, evaluate)
    assert sum("labs/shared_dropout.py" in c for c in lines) == 3 \
        and sum("/simcse-s" in c and "--out" in c for c in lines) == 3
    argv = ["lab3", "--summary", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]
    labs.main(argv)
    assert "lab3: no scores yet for simcse-s0" in capsys.readouterr().out
    for arm, test, loss in (("simcse", 42.0, 0.0176), ("shared", 39.0, 0.0004)):
        for seed in labs.SEEDS:
            path = tmp_path / "results" / "scores" / f"{arm}-s{seed}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"eval": {"stsb": test - seed / 10, "details": {
                "stsb": {"dev": test + 10}, "align-uniform": {"alignment": 0.39, "uniformity": -3.0}}},
                "loss": {"final": loss}}))
    labs.main(argv)
    table = (tmp_path / "results" / "lab3.md").read_text()
    assert "| STS-b test, simcse | 42.00 | 41.90 | 41.80 | 41.90 ± 0.10 | |" in table
    assert "| STS-b test, shared - simcse | -3.00 | -3.00 | -3.00 | -3.00 ± 0.00 | " \
           "reversed (p < 0.001); dev: reversed " \
           "(p < 0.001) |" in table
    assert "| final training loss (the mean of the last 10% of the steps), shared | 0.0004 | 0.0004 | 0.0004 | " \
           "0.0004 ± 0.0000 | |" in table


# ---------------------------------------------------------------- the domain claim (examples/domain_claim.py)


def test_the_domain_claim_lists_every_point_with_its_papers_settings(tmp_path):
    """--dry-run: the untrained checkpoint once per pooling, then per seed every method at each fixed step before
    any goes further; each arm with its paper's settings, at batch 8 and a constant lr."""
    lines = dry_run("domain_claim.py", "--starts", "standin", "--out", str(tmp_path / "runs"), "--results",
                    str(tmp_path / "results"))
    steps, seeds = domain_claim.STEPS["standin"], domain_claim.make_parser().parse_args([]).seeds
    assert seeds == [0, 1, 2, 3, 4]
    assert lines[0].startswith(f"{2 + len(seeds) * len(steps) * 4} points to score")
    trainings = [line for line in lines if "evaluate.py" not in line][1:]
    assert len(trainings) == len(seeds) * len(steps) * 4 and all("--batch-size 8" in line for line in trainings)
    assert [line.split()[1] for line in trainings[:4]] == ["tsdae.py", "baselines/mlm.py", "consert.py", "consert.py"]
    assert "--lr 3e-5 --pooling cls --steps 500 " in trainings[0] and "--lr 5e-5 --pooling mean" in trainings[1]
    assert "--view1 simcse --view2 simcse --lr 5e-5 --temperature 0.05" in trainings[2]
    assert "--view1" not in trainings[3] and all("--schedule constant" in line for line in trainings[2:4])
    assert [int(line.split("--steps ")[1].split()[0]) for line in trainings[::4]] == list(steps) * len(seeds)
    raw = [line for line in lines if "bert-mini-mlm --tasks" in line]
    assert len(raw) == 2 and "--pooling cls" in raw[0] and "--pooling mean" in raw[1]


def write_point(results: Path, name: str, twitter: float, stsb: float, dev: float, **more) -> None:
    scores = results / "scores" / f"{name}.json"
    scores.parent.mkdir(parents=True, exist_ok=True)
    scores.write_text(json.dumps({"eval": {"pooling": "cls" if "raw-cls" in name else "mean", "twitterpara": twitter,
                                           "stsb": stsb, "details": {"stsb": {"dev": dev}}}, **more}))


def test_the_domain_claim_tables_from_saved_scores(tmp_path, capsys):
    """--summary: per metric the curve (mean ± sd over the seeds scored, n), the untrained checkpoint at step 0 with
    each method's pooling, the verdict of TSDAE against each method at the last step both reached with three seeds
    (MIN_SEEDS) or more, and the measured seconds per step (the median over the 2-thread points)."""
    assert domain_claim.MIN_SEEDS == 3
    results = tmp_path / "results"
    write_point(results, "standin-raw-cls", 50.0, 15.0, 30.0)
    write_point(results, "standin-raw-mean", 60.0, 33.0, 50.0)
    for seed in (0, 1, 2, 3):
        for method, base in (("tsdae", 70.0), ("mlm", 65.0), ("simcse", 66.0), ("consert", 69.5)):
            for step, from_step in ((500, 0), (1000, 500), (2000, 1000)):
                if step == 1000 and (seed == 3 or method == "consert"):
                    continue  # step 1000 has seeds 0-2 only, and no ConSERT
                if step == 2000 and (seed > 1 or method not in ("tsdae", "mlm")):
                    continue  # step 2000: TSDAE and MLM, two seeds (too few for a verdict)
                seconds = 1000.0 if (method, seed, step) == ("tsdae", 0, 500) else 0.1 * (step - from_step)
                # three of MLM's points ran side by side, one thread each, 9 times slower: not in the cost
                threads = 1 if (method, seed, step) in (("mlm", 0, 500), ("mlm", 0, 1000), ("mlm", 1, 1000)) else 2
                write_point(results, f"standin-{method}-s{seed}-step{step}", base + seed + step / 1000,
                            40.0 - seed + (5.0 if (method, step) == ("mlm", 1000) else 0.0), 45.0, step=step,
                            from_step=from_step, seconds=seconds * (9 if threads == 1 else 1), threads=threads)
    domain_claim.main(["--summary", "--starts", "standin", "--results", str(results), "--out", str(tmp_path / "runs")])
    capsys.readouterr()
    table = (results / "table.md").read_text()
    assert "| 0 | 50.00 | 60.00 | 60.00 | 60.00 |" in table  # TSDAE's CLS, the others' mean
    assert "| 500 | 72.00 ± 1.29 (n 4) | 67.00 ± 1.29 (n 4) | 68.00 ± 1.29 (n 4) | 71.50 ± 1.29 (n 4) |" in table
    assert "| 1000 | 72.00 ± 1.00 (n 3) | 67.00 ± 1.00 (n 3) | 68.00 ± 1.00 (n 3) |  |" in table
    assert "| 2000 | 72.50 ± 0.71 (n 2) | 67.50 ± 0.71 (n 2) |  |  |" in table
    assert "| MLM | 1000 (0, 1, 2) | +5.00, +5.00, +5.00 (mean +5.00) | holds (p < 0.001) | -5.00, -5.00, -5.00 " \
           "(mean -5.00) | reversed (p < 0.001); dev: cannot tell: below the minimum effect (p 1.000) |" in table
    assert "| ConSERT | 500 (0, 1, 2, 3) | +0.50, +0.50, +0.50, +0.50 (mean +0.50) | cannot tell: below the minimum " \
           "effect (p < 0.001) |" in table  # ConSERT's last step with three seeds
    assert "TSDAE 0.100 s (17 min per 10,000 steps); MLM 0.100 s" in table  # the median; the 1-thread points left out
    summary = (results / "summary.md").read_text()  # the README's: each method at its own last step with 3 seeds
    assert "| untrained (CLS / mean pooling) | 0 | 50.00 / 60.00 | 15.00 / 33.00 |" in summary
    assert "| TSDAE | 1000 (0, 1, 2) | 72.00 ± 1.00 | 39.00 ± 1.00 |" in summary
    assert "| ConSERT | 500 (0, 1, 2, 3) | 71.50 ± 1.29 | 38.50 ± 1.29 |" in summary
    assert (results / "curves.png").exists() or importlib.util.find_spec("matplotlib") is None


def test_a_domain_claim_point_records_the_step_its_training_started_from(tmp_path, capsys):
    """A point's training resumes from its arm's checkpoint, or starts afresh where the checkpoint is gone: its
    scores file says the step it started from, and the estimate counts the steps from there (0.24 s a TSDAE step)."""
    fake = tmp_path / "fake.py"  # trains nothing; the evaluation writes eval.json
    fake.write_text("import sys, pathlib\npathlib.Path(sys.argv[sys.argv.index('--out') + 1], 'eval.json')"
                    ".write_text('{\"twitterpara\": 70.0}')\n")
    folder = tmp_path / "standin-tsdae-s2"
    point = domain_claim.Point("standin", "tsdae", 2, 30000, tmp_path / "scores.json", folder, (str(fake), []),
                               [sys.executable, str(fake), "--out", str(folder)])
    folder.mkdir()
    domain_claim.run_points([point], dry_run=True)
    assert capsys.readouterr().out.startswith("1 points to score, about 120 minutes")  # 30,000 steps: no checkpoint
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "progress.json").write_text(json.dumps({"steps": 30000, "step": 21003}))
    domain_claim.run_points([point], dry_run=True)
    assert capsys.readouterr().out.startswith("1 points to score, about 36 minutes")  # 8997 steps
    domain_claim.run_points([point], dry_run=False, threads=1)
    record = json.loads((tmp_path / "scores.json").read_text())
    assert record["from_step"] == 21003 and record["step"] == 30000 and record["threads"] == 1
    assert record["eval"] == {"twitterpara": 70.0}
