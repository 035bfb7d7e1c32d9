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
    assert arms.verdict([1.0, 2.0, 1.5]) == "holds"
    assert arms.verdict([-1.0, -2.0, -1.5]) == "reversed"
    assert arms.verdict([1.0, -0.5, 2.0]) == "within the spread"  # one seed the other way
    assert arms.verdict([0.1, 3.0, 0.2]) == "within the spread"  # all positive, but the mean is below the sd
    assert arms.mean_sd([1.0, 2.0, 3.0]) == "2.00 ± 1.00"


def test_the_claim_lists_every_arm(tmp_path):
    lines = dry_run("pretraining_claim.py", "--out", str(tmp_path / "claim"))
    commands = lines[1:]
    assert lines[0].startswith("60 commands to run")
    assert sum("baselines/mlm.py" in c for c in commands) == 3 and sum(c.startswith("python tsdae.py") for c in commands) == 3
    assert sum("finetune.py" in c for c in commands) == 27 and sum("evaluate.py" in c for c in commands) == 27
    assert sum("--sample 100 " in c for c in commands) == 9 and sum("--sample 1000 " in c for c in commands) == 9


def test_the_claim_table_from_saved_scores(tmp_path, monkeypatch):
    """--summary: the table and the per-seed differences from scores.json files alone, nothing trained."""
    out = tmp_path / "claim"
    score = {"none": 50.0, "mlm": 52.0, "tsdae": 53.0}
    for method in pretraining_claim.PRETRAININGS:
        for k in pretraining_claim.SIZES:
            for seed in (0, 1, 2):
                folder = out / f"ft-{method}-k{k}-s{seed}"
                folder.mkdir(parents=True)
                (folder / "scores.json").write_text(json.dumps({"stsb": score[method] + seed * (method == "tsdae")}))
    pretraining_claim.main(["--out", str(out), "--summary"])
    table = (out / "table.md").read_text()
    assert "| all | 50.00 ± 0.00 | 52.00 ± 0.00 | 54.00 ± 1.00 | +1.00, +2.00, +3.00 | holds |" in table


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
    """--summary of tsdae-ratio: the paper's numbers beside ours, the per-seed differences from the chosen arm, and
    the verdicts, including "cannot tell" where the paper's gap is below our spread."""
    out, argv = tmp_path / "results", ["tsdae-ratio", "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]
    table = ablations.TABLES["tsdae-ratio"]
    ours = {"0.1": [40.0, 44.0, 36.0], "0.3": [45.0, 40.0, 47.0], "0.6": [45.0, 46.0, 47.0], "0.8": [46.0, 47.5, 48.0],
            "0.9": [30.0, 31.0, 35.0]}
    for name, (flags, _) in table.arms.items():
        for seed, test in zip(ablations.SEEDS, ours[name]):
            scores, _ = ablations.arm_commands(table, name, seed, Path("corpus.txt"),
                                               ablations.make_parser().parse_args(argv))
            scores.parent.mkdir(parents=True, exist_ok=True)
            scores.write_text(json.dumps({"stsb": test, "details": {"stsb": {"dev": test + 10}}}))
    ablations.main([*argv, "--summary"])
    text = (out / "tsdae-ratio.md").read_text()
    assert "| **0.6** | 78.77 | 56.00 ± 1.00 | 46.00 ± 1.00 | | |" in text
    assert "| 0.1 | 77.81 | 50.00 ± 4.00 | 40.00 ± 4.00 | +5.00, +2.00, +11.00 | holds |" in text  # told, though the gap is small
    assert "| 0.9 | 75.67 | 42.00 ± 2.65 | 32.00 ± 2.65 | +15.00, +15.00, +12.00 | holds |" in text
    assert "| 0.8 | 77.69 | 57.17 ± 1.04 | 47.17 ± 1.04 | -1.00, -1.50, -1.00 | reversed |" in text
    assert "+0.00, +6.00, +0.00 | within the spread; the paper's gap (1.02) is below our spread (3.46): cannot tell |" in text
    assert json.loads((out / "tsdae-ratio.json").read_text())["arms"]["0.9"]["test"] == [30.0, 31.0, 35.0]


def test_the_figure_is_drawn_from_a_table(tmp_path):
    pytest.importorskip("matplotlib")
    import plot_ablations

    (tmp_path / "tsdae-pooling.json").write_text(json.dumps({"chosen": "cls", "arms": {
        "cls": {"paper": 78.77, "dev": [1, 2, 3], "test": [40.0, 41.0, 42.5]},
        "mean": {"paper": 78.84, "dev": [1, 2, 3], "test": [44.0, 45.0, 43.0]}}}))
    plot_ablations.main(["--results", str(tmp_path), "--out", str(tmp_path / "figures")])
    assert (tmp_path / "figures" / "tsdae-pooling.png").stat().st_size > 5000
