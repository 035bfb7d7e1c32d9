"""Every published table comes from the result files in git: each experiment's --summary rebuilds its tables from
those files alone, byte for byte as they are committed and as the documents quote them, and the verdicts in them
follow the rule docs/ablations.md writes down (here recomputed with scipy, apart from examples/arms.py)."""
import importlib
import importlib.util
import json
import re
import shutil
import statistics
import sys
from pathlib import Path

import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))

import ablations
import arms
import domain_claim
import lab_results
import pretraining_claim
import results

ABLATIONS = ROOT / "docs" / "ablations"
BENCH_RESULTS = ROOT / "bench" / "results"


def test_the_ablation_tables_regenerate_from_their_scores(tmp_path, capsys):
    """`ablations.py all --summary` on the committed scores writes every committed table, its numbers and the
    summary again to the byte, and docs/ablations.md quotes each table and the summary whole."""
    shutil.copytree(ABLATIONS / "scores", tmp_path / "scores")
    ablations.main(["all", "--summary", "--results", str(tmp_path), "--out", str(tmp_path / "runs")])
    capsys.readouterr()
    written = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".md", ".json"))
    assert written == sorted(p.name for p in ABLATIONS.iterdir() if p.suffix in (".md", ".json"))
    document = (ROOT / "docs" / "ablations.md").read_text(encoding="utf-8")
    for name in written:
        assert (tmp_path / name).read_bytes() == (ABLATIONS / name).read_bytes(), f"docs/ablations/{name} is stale"
        if name.endswith(".md"):
            assert (tmp_path / name).read_text(encoding="utf-8").rstrip("\n") in document, \
                f"docs/ablations.md does not quote docs/ablations/{name} as generated"


def test_the_figures_redraw_from_their_numbers(tmp_path, capsys):
    """Each published figure is drawn from numbers in git alone, to the byte (matplotlib is pinned): the ablation
    figures from docs/ablations/TABLE.json, the collapse figure from docs/results/scores/collapse.json."""
    pytest.importorskip("matplotlib")
    import plot_ablations

    plot_ablations.main(["--out", str(tmp_path)])
    shutil.copytree(ROOT / "docs" / "results" / "scores", tmp_path / "scores")
    results.main(["collapse", "--summary", "--results", str(tmp_path), "--out", str(tmp_path / "runs")])
    capsys.readouterr()
    published = [*ABLATIONS.glob("*.png"), ROOT / "docs" / "results" / "collapse.png"]
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(p.name for p in published)
    for figure in published:
        assert (tmp_path / figure.name).read_bytes() == figure.read_bytes(), f"{figure.relative_to(ROOT)} is stale"


def test_the_verdicts_follow_the_written_rule():
    """docs/ablations.md's rule, applied to the scores files with scipy: holds (or reversed) when the mean of the
    per-seed differences is at least 1 point in the paper's direction (or against it) and a two-sided paired t-test
    over the seeds gives p < 0.05; otherwise cannot tell. Every row of every table, dev and test."""
    document = (ROOT / "docs" / "ablations.md").read_text(encoding="utf-8")
    assert "at least 1 point" in document and "p < 0.05" in document  # the rule as the document writes it
    args = ablations.make_parser().parse_args(["all", "--results", str(ABLATIONS)])
    checked = 0
    for key, table in ablations.TABLES.items():
        def scores(name: str) -> list[dict]:
            files = [ablations.arm_commands(table, name, seed, Path("corpus.txt"), args)[0]
                     for seed in ablations.SEEDS[table.method]]
            return [json.loads(f.read_text()) for f in files]

        chosen = scores(table.chosen)
        for name, (_, paper) in table.arms.items():
            if name == table.chosen:
                continue
            row = re.search(rf"^\| {re.escape(name)} \|.*\|$", document.split(f"**{key}**:")[1], re.M).group(0)
            cells = [c.strip() for c in row.strip("|").split("|")]
            chosen_paper = table.arms[table.chosen][1]
            sign = (1 if chosen_paper > paper else -1) if paper is not None else table.ordering[name]
            arm = scores(name)
            for split, said in (("dev", cells[5]), ("test", cells[7])):
                a = [s["details"]["stsb"]["dev"] if split == "dev" else s["stsb"] for s in chosen]
                b = [s["details"]["stsb"]["dev"] if split == "dev" else s["stsb"] for s in arm]
                mean = sign * statistics.mean(x - y for x, y in zip(a, b))
                p = stats.ttest_rel(a, b).pvalue
                expected = "cannot tell" if abs(mean) < 1 or p >= 0.05 else "holds" if mean > 0 else "reversed"
                assert said.startswith(expected), f"{key} {name} {split}: {said}, the rule says {expected}"
                assert f"p {p:.3f}" in said or (p < 0.001 and "p < 0.001" in said), f"{key} {name} {split}: {said}"
                if expected == "cannot tell":
                    assert ("below the minimum effect" in said) == (abs(mean) < 1), f"{key} {name} {split}: {said}"
                checked += 1
    assert checked == 2 * sum(len(t.arms) - 1 for t in ablations.TABLES.values())


def test_the_claim_table_regenerates_from_its_scores(tmp_path, capsys):
    """pretraining_claim.py --summary from the committed scores gives the committed table; with no scores in git
    (the claim not yet rerun) no table is published either."""
    published = ROOT / "docs" / "pretraining_claim"
    if not (published / "scores").is_dir():
        assert not (published / "table.md").exists(), "a published claim table without its scores in git"
        return
    shutil.copytree(published / "scores", tmp_path / "scores")
    pretraining_claim.main(["--summary", "--results", str(tmp_path), "--out", str(tmp_path / "runs")])
    capsys.readouterr()
    assert (tmp_path / "table.md").read_bytes() == (published / "table.md").read_bytes()


def test_the_domain_claim_regenerates_from_its_scores(tmp_path, capsys):
    """domain_claim.py --summary from the committed scores gives the committed table and figure, to the byte
    (matplotlib is pinned), and README.md and EXPERIMENTS.md quote the table."""
    published = ROOT / "docs" / "domain_claim"
    shutil.copytree(published / "scores", tmp_path / "scores")
    domain_claim.main(["--summary", "--results", str(tmp_path), "--out", str(tmp_path / "runs")])
    capsys.readouterr()
    assert (tmp_path / "table.md").read_bytes() == (published / "table.md").read_bytes(), \
        "docs/domain_claim/table.md is stale"
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "curves.png").read_bytes() == (published / "curves.png").read_bytes(), \
            "docs/domain_claim/curves.png is stale"


@pytest.mark.parametrize("script, folder, tables", [(results, "results", results.EXPERIMENTS),
                                                    (lab_results, "labs", list(lab_results.LABS))])
def test_the_readme_and_lab_tables_regenerate_from_their_scores(script, folder, tables, tmp_path, capsys):
    """`results.py all --summary` and `lab_results.py all --summary` on the committed scores write each committed
    table of docs/results and docs/labs to the byte."""
    published = ROOT / "docs" / folder
    shutil.copytree(published / "scores", tmp_path / "scores")
    script.main(["all", "--summary", "--results", str(tmp_path), "--out", str(tmp_path / "runs")])
    capsys.readouterr()
    for name in tables:
        assert (tmp_path / f"{name}.md").read_bytes() == (published / f"{name}.md").read_bytes(), \
            f"docs/{folder}/{name}.md is stale"


def test_the_same_score_table_regenerates_from_its_scores(tmp_path, capsys):
    """same_score.py --summary from the committed scores.json gives the committed table (LABS.md, lab 5)."""
    import same_score

    published = ROOT / "docs" / "labs" / "same_score"
    shutil.copy(published / "scores.json", tmp_path / "scores.json")
    same_score.main(["--summary", "--results", str(tmp_path)])
    capsys.readouterr()
    assert (tmp_path / "table.md").read_bytes() == (published / "table.md").read_bytes()


def test_lab_5s_verdicts_stand_without_seed_2_or_seed_3():
    """LABS.md, lab 5: seeds 2 and 3 score alike at 300 steps; dropping either leaves both comparisons reversed on
    test and dev by the rule (mean at least 1 point against, p < 0.05), recomputed with scipy."""
    def score(arm: str, seed: int, split: str) -> float:
        found = json.loads((ROOT / "docs" / "labs" / "scores" / f"{arm}-s{seed}.json").read_text())
        return found["eval"]["stsb"] if split == "test" else found["eval"]["details"]["stsb"]["dev"]

    assert lab_results.seeds_of("lab5") == tuple(range(8))
    for baseline, arm in lab_results.LABS["lab5"][0]:
        for dropped in (2, 3):
            seeds = [s for s in range(8) if s != dropped]
            for split in ("test", "dev"):
                a, b = [score(arm, s, split) for s in seeds], [score(baseline, s, split) for s in seeds]
                assert statistics.mean(x - y for x, y in zip(a, b)) <= -1 and stats.ttest_rel(a, b).pvalue < 0.05


def quoted_tables(document: str) -> list[tuple[str, str, str]]:
    """(path, command, the text between the marker lines) of every table a document quotes."""
    return re.findall(r"<!-- ([\w/.-]+\.md): (.*?) -->\n(.*?)<!-- end -->", document, re.S)


def test_the_documents_quote_each_table_as_written():
    """Every table a document quotes between `<!-- PATH: COMMAND -->` and `<!-- end -->` is the file at PATH, to
    the byte, and its command is the one that writes that file; README, EXPERIMENTS and LABS quote their tables so."""
    seen = set()
    for document in arms.DOCUMENTS:
        for path, command, text in quoted_tables((ROOT / document).read_text(encoding="utf-8")):
            assert text == (ROOT / path).read_text(encoding="utf-8"), f"{document} quotes a stale {path}"
            script = {"docs/results": "examples/results.py", "docs/pretraining_claim": "examples/pretraining_claim.py",
                      "docs/domain_claim": "examples/domain_claim.py",
                      "docs/labs": "examples/lab_results.py", "docs/labs/same_score": "examples/same_score.py",
                      "bench/results": f"bench/{bench_script(path)}.py --summary {Path(path).with_suffix('.json')}"}
            assert command.startswith(f"python {script[str(Path(path).parent)]}"), f"{document}: {path} by {command}"
            seen.add((document, path))
    for name in results.EXPERIMENTS:
        assert any(path == f"docs/results/{name}.md" for _, path in seen), f"no document quotes docs/results/{name}.md"
    assert ("examples/EXPERIMENTS.md", "docs/pretraining_claim/table.md") in seen
    assert {("README.md", "docs/domain_claim/summary.md"),
            ("examples/EXPERIMENTS.md", "docs/domain_claim/table.md")} <= seen
    assert {("LABS.md", f"docs/labs/{lab}.md") for lab in lab_results.LABS} <= seen, "LABS.md quotes every lab's table"
    for record in BENCH_RESULTS.glob("*.json"):
        assert any(path == f"bench/results/{record.stem}.md" for _, path in seen), \
            f"no document quotes {record.stem}.md"
    assert {("docs/evaluation.md", "docs/results/minilm.md"), ("docs/evaluation.md", "docs/results/heldout.md")} <= seen


def bench_script(path: str) -> str:
    """The bench script that measured bench/results/NAME[-VARIANT].json: bench/NAME.py."""
    return Path(path).stem.split("-")[0]


@pytest.mark.parametrize("record", sorted(p.name for p in BENCH_RESULTS.glob("*.json")))
def test_the_bench_tables_regenerate_from_their_records(record, tmp_path, capsys):
    """`python bench/NAME.py --summary bench/results/NAME.json` writes the committed bench/results/NAME.md from the
    record in git alone (the speed tables of bench/README.md; each record says the command that measured it)."""
    script = importlib.import_module(bench_script(record))
    shutil.copy(BENCH_RESULTS / record, tmp_path / record)
    assert script.main(["--summary", str(tmp_path / record)]) == 0
    capsys.readouterr()
    assert (tmp_path / record).with_suffix(".md").read_bytes() \
        == (BENCH_RESULTS / record).with_suffix(".md").read_bytes(), \
        f"bench/results/{Path(record).stem}.md is stale"
    assert json.loads((BENCH_RESULTS / record).read_text())["command"].startswith(
        f"python bench/{bench_script(record)}.py")


SETTING = r"(?:lr|temperature|deletion|ratio|cutoff|p <) "  # a number after these is a setting, not a result


def prose_numbers(document: str) -> list[str]:
    """The decimal numbers of a document's prose: outside code blocks, inline code, links and quoted tables, and
    not a setting ("temperature 0.05")."""
    document = re.sub(r"<!-- [\w/.-]+\.md: .*? -->\n.*?<!-- end -->", "", document, flags=re.S)
    document = re.sub(r"```.*?```", "", document, flags=re.S)
    document = re.sub(r"`[^`]*`|\]\([^)]*\)|" + SETTING + r"\d+\.\d+", "", document)
    return re.findall(r"(?<![\w.§:])-?\d+\.\d+(?![\w+]|\.\d)", document)  # not §4.3, arXiv:2104.06979, 3.10+, 2.13.0


def test_the_prose_quotes_the_tables():
    """Each decimal number in the prose of README.md, examples/EXPERIMENTS.md, LABS.md, docs/evaluation.md,
    bench/README.md and docs/ablations.md is a number of a table the document quotes (a result), or a setting written
    the same way in a plain table or in code."""
    for document in ("README.md", "examples/EXPERIMENTS.md", "LABS.md", "docs/evaluation.md", "bench/README.md",
                     "docs/ablations.md"):
        text = (ROOT / document).read_text(encoding="utf-8")
        tables = " ".join(t for _, _, t in quoted_tables(text))
        if document == "docs/ablations.md":  # its tables whole (the test above), without markers;
            # and the raw stand-in's
            tables = " ".join(p.read_text(encoding="utf-8")
                              for p in [*ABLATIONS.glob("*.md"), ROOT / "docs/results/mini.md"])
        settings = " ".join(re.findall(r"```.*?```|`[^`]*`", text, re.S)) + " ".join(
            line for line in text.splitlines() if line.startswith("| ") and "<!--" not in line)
        unquoted = [number for number in prose_numbers(text)
                    if not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", tables + " " + settings)]
        assert not unquoted, f"{document}: {', '.join(unquoted)} in no table it quotes"


def test_a_bench_run_writes_the_record_its_summary_reads(tmp_path, capsys):
    """A (tiny) measuring run of bench/useb_scale.py: --json writes the record and, beside it, the table that
    --summary makes from the record alone."""
    import useb_scale

    record_path = tmp_path / "useb_scale.json"
    assert useb_scale.main(["--pool", "40", "--queries", "4", "--json", str(record_path)]) == 0
    record = json.loads(record_path.read_text())
    assert record["titles"] == 44 and record["encode_seconds"] > 0 and record["scoring_seconds"] > 0
    assert record["command"] == f"python bench/useb_scale.py --pool 40 --queries 4 --json {record_path}"
    assert record_path.with_suffix(".md").read_text() == useb_scale.report(record)
    capsys.readouterr()
