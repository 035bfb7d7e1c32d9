"""The exercises of ASSIGNMENTS.md: hand out a student copy in one command, grade it in another.

    python course/assignments.py list                           # the exercises, their functions and tests
    python course/assignments.py make-student OUT               # a copy of this repository with every exercise blanked
    python course/assignments.py make-student OUT --only 3 8    # ... with exercises 3 and 8 blanked only
    python course/assignments.py grade 3                        # run exercise 3's tests here (or: --repo OUT)
    python course/assignments.py grade 1 2 3 -x                 # several; other arguments go to pytest
    python course/assignments.py grade 1 2 3 --student OUT      # a student's copy, with the held-back tests too
    python course/assignments.py grade 3 --json results.json    # also write Gradescope's results.json
    python course/assignments.py make-autograder autograder.zip # Gradescope's autograder, to upload as it is

An exercise is a function (or method) of the plain reading path marked, on the line above its `def`, with a
comment `# Exercise N (ASSIGNMENTS.md)`. The student copy keeps its signature and docstring and replaces the
rest of its body with `raise NotImplementedError`. Grading runs the exercise's tests (TESTS below) with pytest;
tests/test_assignments.py checks that each one fails on the student copy and passes on this solution.

Held-back tests (HELD_BACK below) are the cases a student does not see: make-student leaves those test functions
out of the copy (--with-held-back keeps them) and empties HELD_BACK in the copy's assignments.py. `grade --student
DIR` runs them: it copies this repository (the files git tracks) to a temporary folder, puts into it the student's
marked functions of the graded exercises and nothing else of theirs (spliced), and runs TESTS and HELD_BACK there.
A held-back entry names a whole test function (no [parametrisation]): the copy loses all its cases and grading
runs all of them. Each test may run TEST_TIMEOUT seconds (tests/conftest.py): a function that never returns fails.

`--json FILE` scores each exercise 1 when every one of its tests passes and 0 otherwise, in Gradescope's layout
{"score", "tests": [{"name", "score", "max_score", "visibility", "output"}]}, read from pytest's --junitxml report.
The output names each failing public test with its message and each failing held-back test by what it checks.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: this file is course/assignments.py
MARKER = re.compile(r"^\s*# Exercise (\d+) \(ASSIGNMENTS\.md\)\s*$")
# the files exercises live in
SOURCES = ("model.py", "lib/weights.py", "data.py", "tsdae.py", "consert.py", "speedups/gradcache.py", "evaluate.py")

TEST_TIMEOUT = 120  # seconds a grading test may run (tests/conftest.py stops it): a hung exercise scores 0, the rest go on

# Each exercise's tests: they run the plain path, the one the exercises fill in.
TESTS = {
    1: ["tests/test_model.py::test_attention_formula_equals_the_fused_kernel",
        "tests/test_model.py::test_minilm_hidden_states_equal_transformers[plain]"],
    2: ["tests/test_model.py::test_pooling_ignores_padding",
        "tests/test_model.py::test_minilm_encode_equals_sentence_transformers[plain]"],
    3: ["tests/test_tsdae.py::test_deletion_removes_60_percent_and_never_everything",
        "tests/test_tsdae.py::test_deletion_returns_a_new_list_of_survivors_in_order_and_a_random_one_when_all_go",
        "tests/test_tsdae.py::test_noise_is_fresh_each_epoch_and_repeatable"],
    4: ["tests/test_tsdae.py::test_decoder_layer_is_its_three_post_norm_blocks",
        "tests/test_tsdae.py::test_decoder_sees_only_the_cls_vector[plain]",
        "tests/test_tsdae.py::test_loss_and_gradients_equal_sentence_transformers[plain]"],
    5: ["tests/test_tsdae.py::test_loss_is_the_cross_entropy_over_real_label_tokens[plain]",
        "tests/test_tsdae.py::test_loss_and_gradients_equal_sentence_transformers[plain]",
        "tests/test_tsdae.py::test_tiny_model_overfits_16_sentences"],
    6: ["tests/test_consert.py::test_token_cutoff_zeroes_int_n_rate_real_token_rows_and_nothing_else",
        "tests/test_consert.py::test_feature_cutoff_zeroes_int_d_rate_whole_columns_and_nothing_else"],
    7: ["tests/test_consert.py::test_shuffle_permutes_real_positions_and_equals_hf_with_those_position_ids[plain]",
        "tests/test_consert.py::test_views_draw_fresh_randomness_on_every_call"],
    8: ["tests/test_consert.py::test_nt_xent_equals_a_double_loop",
        "tests/test_consert.py::test_nt_xent_is_lower_for_identical_views_than_for_views_shuffled_across_sentences",
        "tests/test_consert.py::test_a_copy_of_a_sentence_in_the_batch_is_not_its_negative"],
    9: ["tests/test_evaluate.py::test_average_precision_hand_cases", "tests/test_evaluate.py::test_average_precision_matches_sklearn",
        "tests/test_evaluate.py::test_query_metrics_and_stable_rerank"],
    10: ["tests/test_consert.py::test_span_keeps_one_contiguous_run_of_the_promised_length[plain]"],
    11: ["tests/test_model.py::test_safetensors_dtypes_round_trip", "tests/test_model.py::test_truncated_safetensors",
         "tests/test_model.py::test_minilm_hidden_states_equal_transformers[plain]"],
    12: ["tests/test_gradcache.py::test_the_cached_gradient_is_the_gradient_of_the_whole_batch",
         "tests/test_gradcache.py::test_the_random_state_goes_on_as_without_chunks"],
}


# Each exercise's held-back tests, with what each checks (shown when it fails, never its cases): left out of the
# student copy, run by `grade --student`. Whole test functions only, none of them in TESTS
# (tests/test_assignments.py checks both).
HELD_BACK = {
    1: {"tests/test_model.py::test_attention_with_fewer_keys_than_queries_and_dropout_on_the_probabilities":
        "attention with fewer keys than queries, and dropout on the probabilities"},
    2: {"tests/test_model.py::test_pooling_equals_a_loop_over_each_sentences_real_tokens":
        "each pooling mode equals a loop over each sentence's real tokens"},
    3: {"tests/test_tsdae.py::test_deletion_keeps_the_survivors_in_order_at_any_ratio":
        "at any ratio from 0 to 1, the survivors keep their order and each word is deleted on its own"},
    4: {"tests/test_tsdae.py::test_decoder_is_causal_and_every_position_reads_the_sentence_vector":
        "no position sees a later token, and every position reads the sentence vector"},
    5: {"tests/test_tsdae.py::test_the_batch_loss_is_its_sentences_losses_weighted_by_their_label_tokens":
        "the batch's loss weighs each sentence by its label tokens (sentence normalisation: equally)"},
    6: {"tests/test_consert.py::test_cutoffs_cut_every_real_token_and_feature_equally_often_at_any_rate":
        "every real token and every feature is cut equally often, at any rate"},
    7: {"tests/test_consert.py::test_shuffle_is_a_uniform_permutation_of_each_sentences_positions":
        "the shuffle is a uniform permutation of each sentence's own positions"},
    8: {"tests/test_consert.py::test_nt_xent_by_hand_on_orthogonal_views_and_its_symmetries":
        "NT-Xent on views worked out by hand, and its symmetries"},
    9: {"tests/test_evaluate.py::test_average_precision_is_the_mean_precision_at_the_positives":
        "AP is the mean of the precisions at the positives",
        "tests/test_evaluate.py::test_rerank_jsonl_by_hand": "the ranking metrics of a small re-ranking file worked out by hand"},
    10: {"tests/test_consert.py::test_span_starts_anywhere_in_the_sentence_equally_often":
         "the span may start anywhere in the sentence, each start equally often"},
    11: {"tests/test_model.py::test_safetensors_by_hand_with_the_bytes_in_another_order_than_the_header":
         "tensors whose bytes lie in another order than the header lists them",
         "tests/test_model.py::test_header_length_past_end_of_file": "a header length past the end of the file"},
    12: {"tests/test_gradcache.py::test_the_replay_of_the_random_state_is_what_makes_it_exact":
         "replaying each chunk's random state is what makes the gradient exact"},
}


def marked_spans(source: str, name: str = "source") -> dict[tuple[int, str], tuple[int, int]]:
    """{(exercise number, Class.function name): (its def line, its last line)} of every marked function of a
    source, in file order (lines 1-based)."""
    marked = {i + 2: int(m.group(1)) for i, line in enumerate(source.splitlines()) if (m := MARKER.match(line))}
    spans = {}
    for node in ast.parse(source).body:
        inside = node.body if isinstance(node, ast.ClassDef) else [node]
        for f in inside:
            if isinstance(f, ast.FunctionDef) and f.lineno in marked:
                qualified = f"{node.name}.{f.name}" if isinstance(node, ast.ClassDef) else f.name
                spans[(marked.pop(f.lineno), qualified)] = (f.lineno, f.end_lineno)
    if marked:
        raise ValueError(f"{name}: an exercise marker must sit right above a def (lines {sorted(marked)})")
    return spans


def marked_functions(repo: Path = ROOT) -> list[tuple[int, Path, str]]:
    """(exercise number, file, Class.function name) of every marked function, in file order."""
    return [(number, repo / name, qualified) for name in SOURCES
            for number, qualified in marked_spans((repo / name).read_text(encoding="utf-8"), name)]


def spliced(reference: str, submitted: str, numbers: set[int], name: str) -> str:
    """The reference source with each function marked with one of `numbers` taken from the submitted source (from
    its def line to its last line): the only code of a submission that grading runs. A submitted file that does
    not parse, or has lost a marked function, gives that exercise a function that says so when called."""
    try:
        theirs, problem = marked_spans(submitted, name), None
    except (SyntaxError, ValueError) as e:
        theirs, problem = {}, f"your {name} does not parse: {str(e).splitlines()[0]}"
    submitted_lines, lines, missing = submitted.splitlines(keepends=True), reference.splitlines(keepends=True), set()
    for (number, qualified), (first, last) in sorted(marked_spans(reference, name).items(), key=lambda kv: -kv[1][0]):
        if number in numbers and (number, qualified) in theirs:
            start, end = theirs[(number, qualified)]
            lines[first - 1 : last] = submitted_lines[start - 1 : end]
        elif number in numbers:
            missing.add(number)
            problem = problem or f"your {name} has no {qualified} right under its '# Exercise {number}' marker"
    return blank("".join(lines), missing, problem) if missing else "".join(lines)


def blank(source: str, numbers: set[int], message: str | None = None) -> str:
    """The source with the body of each function marked with one of `numbers` replaced by `raise NotImplementedError`
    (its signature and docstring kept), whose message is "Exercise N: " and `message` (default: see ASSIGNMENTS.md):
    lib/cli.run knows an unwritten exercise by that start."""
    lines = source.splitlines(keepends=True)
    marked = {i + 2: int(m.group(1)) for i, line in enumerate(lines) if (m := MARKER.match(line))}  # def's line number
    cuts = []  # (first body line, last line, indent, exercise) of each function to blank, 1-based
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and marked.get(node.lineno) in numbers:
            body = node.body
            has_docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str)
            first = body[1].lineno if has_docstring and len(body) > 1 else body[0].lineno
            if has_docstring and len(body) == 1:
                raise ValueError(f"line {node.lineno}: exercise {marked[node.lineno]} has only a docstring")
            indent = " " * body[-1].col_offset
            cuts.append((first, node.end_lineno, indent, marked[node.lineno]))
    for first, last, indent, number in sorted(cuts, reverse=True):  # from the end: line numbers stay valid
        stub = f"{indent}raise NotImplementedError({f'Exercise {number}: ' + (message or 'see ASSIGNMENTS.md')!r})\n"
        lines[first - 1 : last] = [stub]
    return "".join(lines)


def without_functions(source: str, names: set[str]) -> str:
    """The source without its top-level functions called one of `names` (decorators and the blank lines after
    each included), everything else as it is."""
    lines = source.splitlines(keepends=True)
    found = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    if names - set(found):
        raise ValueError(f"no such test function: {', '.join(sorted(names - set(found)))}")
    for node in sorted((found[name] for name in names), key=lambda node: -node.lineno):  # from the end
        first, last = min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno
        while last < len(lines) and not lines[last].strip():
            last += 1
        del lines[first - 1 : last]
    return "".join(lines).rstrip("\n") + "\n"


def without_held_back_list(source: str) -> str:
    """assignments.py with an empty HELD_BACK: the student copy does not list the held-back tests' names."""
    node = next(n for n in ast.parse(source).body
                if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["HELD_BACK"])
    lines = source.splitlines(keepends=True)
    empty = "HELD_BACK: dict[int, dict[str, str]] = {}  # the teacher's copy lists them\n"
    lines[node.lineno - 1 : node.end_lineno] = [empty]
    return "".join(lines)


def repository_files(root: Path = ROOT) -> list[str]:
    """The files of the repository, as git sees them: the tracked ones and the new ones .gitignore does not exclude
    (never a virtual environment, runs/, data/ or caches). A folder that is no git checkout (a student copy
    made by make-student): every file but Python's caches."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True)
    if listed.returncode == 0 and (root / ".git").exists():
        return [name for name in listed.stdout.decode().split("\0") if name and (root / name).is_file()]
    return [str(path.relative_to(root)) for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and not path.name.endswith(".pyc")]


def copy_repository(out: Path) -> None:
    """The repository's files (repository_files) into `out`."""
    for name in repository_files():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, out / name)


def make_student(out: Path, numbers: set[int], with_held_back: bool = False) -> None:
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"error: {out} exists and is not empty")
    copy_repository(out)
    for name in SOURCES:
        path = out / name
        path.write_text(blank(path.read_text(encoding="utf-8"), numbers), encoding="utf-8")
    if with_held_back:
        return
    by_file: dict[str, set[str]] = {}
    for test in (t for tests in HELD_BACK.values() for t in tests):
        path, name = test.split("::")
        by_file.setdefault(path, set()).add(name)
    for path, names in by_file.items():
        (out / path).write_text(without_functions((out / path).read_text(encoding="utf-8"), names), encoding="utf-8")
    script = out / "course" / "assignments.py"
    script.write_text(without_held_back_list(script.read_text(encoding="utf-8")), encoding="utf-8")


def junit_outcomes(report: Path) -> dict[str, str | None]:
    """{test id: None if it passed, else what went wrong} from pytest's --junitxml report; a test file that
    failed to import appears under its module name, with the error's last line."""
    outcomes: dict[str, str | None] = {}
    if not report.is_file():  # pytest stopped before writing it
        return outcomes
    for case in ET.parse(report).getroot().iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "")
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if problem is None:
            why = None
        elif module:
            why = problem.get("message") or problem.tag
        else:  # a file that failed to import: the message says only "collection failure", the text's last line why
            why = re.sub(r"^E\s+", "", ((problem.text or "").strip().splitlines() or [problem.tag])[-1])
        outcomes[f"{module.replace('.', '/')}.py::{name}" if module else name] = why
    return outcomes


def tests_of(number: int, with_held_back: bool) -> list[str]:
    """An exercise's tests, the held-back ones last if asked."""
    return TESTS[number] + (list(HELD_BACK.get(number, {})) if with_held_back else [])


def exercise_results(number: int, outcomes: dict[str, str | None], with_held_back: bool) -> list[dict]:
    """The exercise's entries of Gradescope's results.json: one worth 1 point when all its tests pass (else 0),
    visible, whose output names each failing public test with its message and each failing held-back test by what it
    checks (HELD_BACK), never by its name or its cases; then one entry of 0 points per held-back test, visible only
    once the grades are published (Gradescope's "after_published"), for the student to learn from afterwards."""
    functions = [name for n, _, name in marked_functions() if n == number]
    not_run = "; ".join(f"{name}: {why}" for name, why in outcomes.items() if "::" not in name) or "stopped before it"
    held_back = HELD_BACK.get(number, {})
    failures, hidden, count = [], [], 0
    for test in tests_of(number, with_held_back):
        cases = {k: why for k, why in outcomes.items() if k == test or ("[" not in test and k.startswith(test + "["))}
        for case, why in (cases or {test: f"did not run ({not_run})"}).items():
            count += 1
            if test in held_back:
                hidden.append((test, why))
                if why is not None:
                    reason = "timed out" if "timed out" in why else "failed"
                    failures.append(f"held-back test {reason}: {held_back[test]}")
            elif why is not None:
                failures.append(f"{case}: {why}")
    entries = [{"name": f"Exercise {number}: {', '.join(functions)}", "score": 0.0 if failures else 1.0,
                "max_score": 1.0, "visibility": "visible",
                "output": "\n".join(failures) if failures else f"all {count} tests passed"}]
    for test, why in dict(hidden).items():
        entries.append({"name": f"Exercise {number}, held back: {held_back[test]}", "score": 0.0, "max_score": 0.0,
                        "visibility": "after_published",
                        "output": "passed" if why is None else "timed out" if "timed out" in why else "failed"})
    return entries


def data_dir() -> Path:
    """The evaluation data, found as `make test` finds it: $EVAL_DATA_DIR, else data/ here, else ../shared/data."""
    if os.environ.get("EVAL_DATA_DIR"):
        return Path(os.environ["EVAL_DATA_DIR"]).resolve()
    return ROOT / "data" if (ROOT / "data" / "stsbenchmark").is_dir() else (ROOT.parent / "shared" / "data").resolve()


def grade(numbers: list[int], repo: Path = ROOT, extra: Sequence[str] = (), json_file: Path | None = None,
          with_held_back: bool = False, env: dict[str, str] | None = None) -> int:
    """Run the tests of the given exercises in `repo` (with HELD_BACK's too if asked), and write Gradescope's
    results.json to `json_file` if given; pytest's exit code (0 = all passed)."""
    tests = [test for number in numbers for test in tests_of(number, with_held_back)]
    env = {"ASSIGNMENTS_TEST_TIMEOUT": str(TEST_TIMEOUT), **os.environ, "EVAL_DATA_DIR": str(data_dir()),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        report = Path(tmp) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *dict.fromkeys(tests), *extra]
        if json_file:
            command.append(f"--junitxml={report}")
        code = subprocess.run(command, cwd=repo, env=env).returncode
        if json_file:
            outcomes = junit_outcomes(report)
            results = [entry for number in numbers for entry in exercise_results(number, outcomes, with_held_back)]
            json_file.write_text(json.dumps({"score": sum(r["score"] for r in results), "tests": results}, indent=2)
                                 + "\n", encoding="utf-8")
    return code


def grade_student(numbers: list[int], student: Path, extra: Sequence[str] = (), json_file: Path | None = None) -> int:
    """Grade a student's exercises with every test, the held-back ones included: in a temporary copy of this
    repository into which only the student's marked functions of those exercises are put (spliced). Nothing else
    of the student's files runs: not their other functions, not their module-level code, not their tests."""
    if not student.is_dir():
        raise SystemExit(f"error: {student} is not a folder")
    inner = [folder for folder in student.iterdir() if (folder / "tsdae.py").is_file()]
    if not any((student / name).is_file() for name in SOURCES) and len(inner) == 1:
        student = inner[0]  # an upload whose files sit in one folder of their own
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        copy = Path(tmp) / "repo"
        copy_repository(copy)
        for name in SOURCES:
            reference, path = (ROOT / name).read_text(encoding="utf-8"), student / name
            # a file the submission lacks: its exercises say so when their tests call them
            submitted = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else f"# no {name}\n"
            (copy / name).write_text(spliced(reference, submitted, set(numbers), name), encoding="utf-8")
        return grade(numbers, copy, extra, json_file, with_held_back=True)


RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: the student's files are in /autograder/submission (a copy of the
# student folder, or just the exercise files at their paths), results.json goes to /autograder/results.
set -u
here=$(cd "$(dirname "$0")" && pwd)
submission=${SUBMISSION:-/autograder/submission}
results=${RESULTS:-/autograder/results}
mkdir -p "$results"
cd "$here/repo" && python3 course/assignments.py grade EXERCISES --student "$submission" --json "$results/results.json"
exit 0  # the score is in results.json; a failing test is no failure of the autograder
"""

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, to build the image the submissions are graded in.
set -eu
cd "$(dirname "$0")/repo"
apt-get install -y python3 python3-pip python3-venv >/dev/null 2>&1 || true
make install-dev PYTHON=python3
python3 evaluate.py --fetch-data data   # the evaluation sets the exercises' tests read
"""


def make_autograder(out: Path, numbers: list[int]) -> None:
    """A zip for Gradescope's "Upload autograder": setup.sh, run_autograder and repo/, this repository as git tracks
    it, held-back tests included. Each submission is graded with `grade --student` (spliced: only the marked
    functions of the exercises run)."""
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        folder = Path(tmp)
        copy_repository(folder / "repo")
        (folder / "run_autograder").write_text(RUN_AUTOGRADER.replace("EXERCISES", " ".join(map(str, numbers))))
        (folder / "setup.sh").write_text(SETUP)
        for script in ("run_autograder", "setup.sh"):
            (folder / script).chmod(0o755)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    info = zipfile.ZipInfo.from_file(path, path.relative_to(folder))
                    archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the exercises, their functions and tests")
    make = sub.add_parser("make-student", help="write a student copy with the exercises blanked")
    make.add_argument("out", type=Path, help="an empty or new folder")
    make.add_argument("--only", type=int, nargs="+", choices=sorted(TESTS), help="blank these exercises only")
    make.add_argument("--with-held-back", action="store_true", help="keep the held-back tests in the copy")
    zip_ = sub.add_parser("make-autograder", help="write Gradescope's autograder zip (setup.sh, run_autograder, repo/)")
    zip_.add_argument("out", type=Path, help="the zip to write")
    zip_.add_argument("--only", type=int, nargs="+", choices=sorted(TESTS), help="grade these exercises only")
    run = sub.add_parser("grade", help="run the tests of one or more exercises (other arguments go to pytest)")
    run.add_argument("numbers", type=int, nargs="+", choices=sorted(TESTS), metavar="N")
    copy = run.add_mutually_exclusive_group()
    copy.add_argument("--repo", type=Path, default=ROOT, help="run the tests in this copy (default: this one)")
    copy.add_argument("--student", type=Path, help="grade this copy's exercise files with every test, held back too")
    run.add_argument("--json", type=Path, metavar="FILE", help="also write Gradescope's results.json to FILE")
    return p


def main(argv: list[str] | None = None) -> int:
    p = make_parser()
    args, pytest_args = p.parse_known_args(argv)
    if pytest_args and args.command != "grade":
        p.error(f"unrecognized arguments: {' '.join(pytest_args)}")
    if args.command == "list":
        functions = marked_functions()
        for number, tests in TESTS.items():
            where = ", ".join(f"{path.name}: {name}" for n, path, name in functions if n == number)
            held_back = [f"held back: {test} ({what})" for test, what in HELD_BACK.get(number, {}).items()]
            print(f"Exercise {number}: {where}\n  " + "\n  ".join(tests + held_back))
        return 0
    if args.command == "make-student":
        numbers = set(args.only or TESTS)
        make_student(args.out, numbers, args.with_held_back)
        print(f"student copy in {args.out}: exercises {', '.join(map(str, sorted(numbers)))} blanked"
              f"{'' if args.with_held_back else ', held-back tests left out'} (students grade with: python "
              f"course/assignments.py grade N; you, with the held-back tests: python course/assignments.py grade N --student OUT)")
        return 0
    if args.command == "make-autograder":
        make_autograder(args.out, sorted(args.only or TESTS))
        print(f"autograder in {args.out}: upload it to Gradescope as it is (its setup.sh installs, run_autograder grades)")
        return 0
    if args.json and not args.json.resolve().parent.is_dir():
        raise SystemExit(f"error: {args.json.parent} is not a folder")
    if args.student:
        return grade_student(args.numbers, args.student, pytest_args, args.json)
    if not args.repo.is_dir():
        raise SystemExit(f"error: {args.repo} is not a folder")
    return grade(args.numbers, args.repo, pytest_args, args.json)


if __name__ == "__main__":
    sys.exit(main())
