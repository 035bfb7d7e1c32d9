"""The experiment scripts of examples/ (pretraining_claim.py, ablations.py): --dry-run lists every arm, --summary
rebuilds the tables from saved scores alone, and the verdicts read the per-seed differences as they say."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import ablations  # noqa: E402
import arms  # noqa: E402
import pretraining_claim  # noqa: E402


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


def test_the_claim_lists_every_arm(tmp_path):
    lines = dry_run("pretraining_claim.py", "--out", str(tmp_path / "claim"), "--results", str(tmp_path / "results"))
    commands = lines[1:]
    assert lines[0].startswith("100 commands to run")  # seeds 0-4
    mlm = [c for c in commands if "baselines/mlm.py" in c]
    assert len(mlm) == 5 and all("--lr 5e-05 " in c for c in mlm)  # the paper's MLM lr (§5.2)
    assert sum(c.startswith("python tsdae.py") and "--lr 0.0001 " in c for c in commands) == 5
    assert sum("finetune.py" in c for c in commands) == 45 and sum("evaluate.py" in c for c in commands) == 45
    assert sum("--sample 100 " in c for c in commands) == 15 and sum("--sample 1000 " in c for c in commands) == 15
    assert all(c.split("--json ")[1].startswith(str(tmp_path / "results" / "scores")) for c in commands if "evaluate.py" in c)


def test_the_claim_table_from_saved_scores(tmp_path):
    """--summary: the table and the per-seed differences from the scores files alone, nothing trained."""
    results = tmp_path / "results"
    argv = ["--out", str(tmp_path / "claim"), "--results", str(results), "--seeds", "0", "1", "2"]
    score = {"none": 50.0, "mlm": 52.0, "tsdae": 53.0}
    for seed in (0, 1, 2):
        for method in pretraining_claim.PRETRAININGS:
            start, _ = pretraining_claim.pretraining(method, seed, Path("corpus.txt"),
                                                     pretraining_claim.make_parser().parse_args(argv))
            for k in pretraining_claim.SIZES:
                scores, _ = pretraining_claim.fine_tuning(method, k, seed, start, Path("pairs.tsv"),
                                                          pretraining_claim.make_parser().parse_args(argv))
                scores.parent.mkdir(parents=True, exist_ok=True)
                scores.write_text(json.dumps({"stsb": score[method] + seed * (method == "tsdae") * (k == "all")}))
    pretraining_claim.main([*argv, "--summary"])
    table = (results / "table.md").read_text()
    assert "| all | 50.00 ± 0.00 | 52.00 ± 0.00 | 54.00 ± 1.00 | +1.00, +2.00, +3.00 | cannot tell: needs ~4 seeds " \
           "(p 0.074) | +3.00, +4.00, +5.00 | holds (p 0.020) |" in table
    assert "(TSDAE); fine-tuning lr 5e-05)" in table and "at lr 5e-05 (MLM) and 0.0001 (TSDAE)" in table


def test_the_claim_summary_says_what_is_missing(tmp_path):
    """In a fresh clone (no scores yet) --summary ends at once, in one line saying what is missing, and writes
    nothing; with some scores, the table and a line naming the arms still to run."""
    command = [sys.executable, "examples/pretraining_claim.py", "--summary", "--results", str(tmp_path / "results")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == (f"no scores yet in {tmp_path / 'results' / 'scores'}: all 45 are missing (3 pre-trainings "
                             "x 3 sizes k x 5 seeds); python examples/pretraining_claim.py makes them (--dry-run: its "
                             "commands and cost)\n")
    assert not (tmp_path / "results").exists()
    (tmp_path / "results" / "scores").mkdir(parents=True)
    (tmp_path / "results" / "scores" / "none-k100-lr5e-05-s0.json").write_text(json.dumps({"stsb": 40.0}))
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0 and "| 100 | (not all arms done) |" in result.stdout
    assert "not done yet: none-k100-lr5e-05 seeds 1, 2, 3, 4; none-k1000-lr5e-05 seeds 0, 1, 2, 3, 4;" in result.stdout


def test_the_ablations_list_every_arm_once(tmp_path):
    lines = dry_run("ablations.py", "all", "--out", str(tmp_path / "ablations"), "--results", str(tmp_path / "results"))
    commands = lines[1:]
    tsdae = {c.split("--out ")[1].split()[0] for c in commands if c.startswith("python tsdae.py")}
    consert = {c.split("--out ")[1].split()[0] for c in commands if c.startswith("python consert.py")}
    # TSDAE: 5 noises at 0.3 (delete 0.3 is also tab. 6's), ratios 0.1, 0.6, 0.8, 0.9, mean and max pooling, untied
    assert len(tsdae) == 12 * 3
    # ConSERT: 9 view pairs, 10 temperature arms (0.1 at 2e-5 is the official pair), 3 batch sizes, 3 few-shot sizes
    assert len(consert) == (9 + 9 + 3 + 3) * 3
    assert sum("--few-shot 100 --upsample" in c for c in commands) == 3
    assert len(lines) - 1 == 2 * (len(tsdae) + len(consert))  # each arm: train, then evaluate
    # a finished arm (its scores saved) is listed as done, and its commands are not planned again
    args = ablations.make_parser().parse_args(["all", "--out", str(tmp_path / "ablations"),
                                               "--results", str(tmp_path / "results")])
    scores, _ = ablations.arm_commands(ablations.TABLES["tsdae-tying"], "untied", 1, Path("corpus.txt"), args)
    scores.parent.mkdir(parents=True)
    scores.write_text("{}")
    again = dry_run("ablations.py", "all", "--out", str(tmp_path / "ablations"), "--results", str(tmp_path / "results"))
    assert again[:2] == ["1 arms done (never run again):", str(scores)] and again[2].startswith("214 commands")


def test_a_dry_run_piped_into_head_ends_without_a_traceback(tmp_path):
    result = subprocess.run(f"{sys.executable} examples/ablations.py all --dry-run --out {tmp_path} --results {tmp_path} | head -1",
                            shell=True, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.stdout.startswith("216 commands to run") and result.stderr == ""


def test_an_ablation_table_from_saved_scores(tmp_path):
    """--summary of tsdae-ratio: the paper's numbers beside ours, the per-seed differences from the chosen arm on
    dev and on test, the verdicts of each split by the rule, and the rows where the splits disagree marked."""
    out, argv = tmp_path / "results", ["tsdae-ratio", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]
    table = ablations.TABLES["tsdae-ratio"]
    ours = {"0.1": [40.0, 44.0, 36.0], "0.3": [45.0, 40.0, 47.0], "0.6": [45.0, 46.0, 47.0], "0.8": [46.0, 47.5, 48.0],
            "0.9": [30.0, 31.0, 35.0]}
    dev = {"0.1": [40.0, 44.0, 36.0], "0.3": [45.0, 40.0, 47.0], "0.6": [45.0, 46.0, 47.0], "0.8": [46.0, 47.5, 48.0],
           "0.9": [44.5, 45.0, 46.0]}  # 0.9: 0.5 to 1 point below 0.6 on dev, 12 to 15 on test
    for name, (flags, _) in table.arms.items():
        for seed, test, d in zip(ablations.SEEDS, ours[name], dev[name]):
            scores, _ = ablations.arm_commands(table, name, seed, Path("corpus.txt"),
                                               ablations.make_parser().parse_args(argv))
            scores.parent.mkdir(parents=True, exist_ok=True)
            scores.write_text(json.dumps({"stsb": test, "details": {"stsb": {"dev": d}}}))
    ablations.main([*argv, "--summary"])
    text = (out / "tsdae-ratio.md").read_text()
    assert "| **0.6** | 78.77 | 46.00 ± 1.00 | 46.00 ± 1.00 | | | | |" in text
    # every seed in the paper's order, mean 6 > sd 4.6 (the old rule's "holds"), but t = 2.3: p 0.15 (scipy.stats.ttest_1samp)
    assert "| 0.1 | 77.81 | 40.00 ± 4.00 | 40.00 ± 4.00 | +5.00, +2.00, +11.00 | cannot tell: needs ~5 seeds (p 0.151) |" \
           in text
    assert ("| 0.9 | 75.67 | 45.17 ± 0.76 | 32.00 ± 2.65 | +0.50, +1.00, +1.00 | cannot tell: below the minimum effect "
            "(p 0.038) | +15.00, +15.00, +12.00 | holds (p 0.005) (**differs from dev**) |") in text
    assert "| -1.00, -1.50, -1.00 | reversed (p 0.020) | -1.00, -1.50, -1.00 | reversed (p 0.020) |" in text  # 0.8
    assert "| +0.00, +6.00, +0.00 | cannot tell: needs ~15 seeds (p 0.423) |" in text  # 0.3
    assert json.loads((out / "tsdae-ratio.json").read_text())["arms"]["0.9"]["test"] == [30.0, 31.0, 35.0]


def test_the_figure_is_drawn_from_a_table(tmp_path):
    pytest.importorskip("matplotlib")
    import plot_ablations

    (tmp_path / "tsdae-pooling.json").write_text(json.dumps({"chosen": "cls", "arms": {
        "cls": {"paper": 78.77, "dev": [1, 2, 3], "test": [40.0, 41.0, 42.5]},
        "mean": {"paper": 78.84, "dev": [1, 2, 3], "test": [44.0, 45.0, 43.0]}}}))
    plot_ablations.main(["--results", str(tmp_path), "--out", str(tmp_path / "figures")])
    assert (tmp_path / "figures" / "tsdae-pooling.png").stat().st_size > 5000
