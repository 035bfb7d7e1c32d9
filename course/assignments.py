"""The exercises of ASSIGNMENTS.md: hand out a student copy in one command, grade it in another.

    python course/assignments.py list                           # the exercises, their functions and tests
    python course/assignments.py make-student OUT               # a copy of this repository with every exercise blanked
    python course/assignments.py make-student OUT --only 3 8    # ... with exercises 3 and 8 blanked only
    python course/assignments.py grade 3                        # judge exercise 3 here (or: --repo OUT)
    python course/assignments.py grade 1 2 3                    # several
    python course/assignments.py grade 1 2 3 --student OUT      # a student's copy, with the held-back cases too
    python course/assignments.py grade 3 --json results.json    # also write Gradescope's results.json
    python course/assignments.py grade 3 --tests -x             # exercise 3's pytest tests (a check, no grade)
    python course/assignments.py make-autograder autograder.zip # Gradescope's autograder, to upload as it is

An exercise is a function (or method) of the plain reading path marked, above its `def` (blank lines between), with a
comment `# Exercise N (ASSIGNMENTS.md)`. The student copy keeps its signature and docstring and replaces the
rest of its body with `raise NotImplementedError`; product code that restates an exercise (TWINS) is blanked too.

Grading is the judge's (course/judge.py): each exercise's cases run the student's function in a worker process of
their own (course/worker.py, course/probes.py), which hands back only the function's outputs (JSON and safetensors,
course/channel.py); the judge, in this process, generated the inputs, holds what it expects, compares, and writes
results.json. Held-back cases (course/held_back.py) stay with the judge: the student copy leaves that file out, and
their inputs reach a worker as data only. `grade --student DIR` copies this repository without the judge's files to a
temporary folder with every exercise blanked, puts into it the student's marked functions of the graded exercises
and nothing else of theirs (spliced), and judges them there, held-back cases included; with --as-user (run_autograder
as root) the workers run as that user. Every case calls one exercise's function only: each exercise is graded alone.

`--json FILE` scores each exercise 1 when every one of its cases passed and 0 otherwise, in Gradescope's layout
{"score", "tests": [{"name", "score", "max_score", "visibility", "output"}]}: the output names each public case that
did not pass with its outcome and message, and each held-back one by its outcome and what it checks.

The pytest tests of TESTS and HELD_BACK stay the repository's own tests of the reference (tests/test_assignments.py
checks that they pass on it); `grade N --tests` runs an exercise's public ones (a student's own check, no grade: they
run in the same process as the code they test); make-student leaves HELD_BACK's test functions out of the copy.
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
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: this file is course/assignments.py
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script: `course` (the judge) importable
MARKER = re.compile(r"^\s*# Exercise (\d+) \(ASSIGNMENTS\.md\)\s*$")
# the files exercises live in
SOURCES = ("model.py", "lib/weights.py", "data.py", "tsdae.py", "consert.py", "speedups/gradcache.py", "evaluate.py")

TEST_TIMEOUT = 120  # seconds a grading test may run (tests/conftest.py stops it): a hung exercise scores 0,
# the rest go on

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
        "tests/test_consert.py::test_nt_xent_backpropagates_the_double_loops_gradient_to_both_views",
        "tests/test_consert.py::test_nt_xent_is_one_matrix_product_with_no_loop_over_the_items",
        "tests/test_consert.py::test_nt_xent_is_lower_for_identical_views_than_for_views_shuffled_across_sentences",
        "tests/test_consert.py::test_a_copy_of_a_sentence_in_the_batch_is_not_its_negative"],
    9: ["tests/test_evaluate.py::test_average_precision_hand_cases",
        "tests/test_evaluate.py::test_average_precision_matches_sklearn",
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
        "tests/test_evaluate.py::test_rerank_jsonl_by_hand":
        "the ranking metrics of a small re-ranking file worked out by hand"},
    10: {"tests/test_consert.py::test_span_starts_anywhere_in_the_sentence_equally_often":
         "the span may start anywhere in the sentence, each start equally often"},
    11: {"tests/test_model.py::test_safetensors_by_hand_with_the_bytes_in_another_order_than_the_header":
         "tensors whose bytes lie in another order than the header lists them",
         "tests/test_model.py::test_header_length_past_end_of_file": "a header length past the end of the file"},
    12: {"tests/test_gradcache.py::test_the_replay_of_the_random_state_is_what_makes_it_exact":
         "replaying each chunk's random state is what makes the gradient exact"},
}


def marker_lines(source: str) -> dict[int, int]:
    """{line of the def a marker names: the exercise number} (1-based): a marker names the first line after it that
    is not blank, the same rule for the student's own check (`grade`), the student copy and grading."""
    lines, found = source.splitlines(), {}
    for i, line in enumerate(lines):
        if m := MARKER.match(line):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            found[j + 1] = int(m.group(1))
    return found


def marked_spans(source: str, name: str = "source") -> dict[tuple[int, str], tuple[int, int]]:
    """{(exercise number, Class.function name): (its def line, its last line)} of every marked function of a
    source, in file order (lines 1-based)."""
    marked = marker_lines(source)
    spans = {}
    for node in ast.parse(source).body:
        inside = node.body if isinstance(node, ast.ClassDef) else [node]
        for f in inside:
            if isinstance(f, ast.FunctionDef) and f.lineno in marked:
                qualified = f"{node.name}.{f.name}" if isinstance(node, ast.ClassDef) else f.name
                spans[(marked.pop(f.lineno), qualified)] = (f.lineno, f.end_lineno)
    if marked:
        raise ValueError(f"{name}: an exercise marker must sit above a def, with at most blank lines between "
                         f"(the lines after the markers: {sorted(marked)})")
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
    marked = marker_lines(source)  # {def's line number: exercise}
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


def is_written(function) -> bool:
    """False for a marked function whose body the student copy blanked: it only raises NotImplementedError("Exercise
    N: ..."). tests/conftest.py gives such a function's callers a stand-in when another exercise is graded."""
    import inspect
    import textwrap

    node = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    stub = len(body) == 1 and isinstance(body[0], ast.Raise) and isinstance(body[0].exc, ast.Call) \
        and getattr(body[0].exc.func, "id", None) == "NotImplementedError" and body[0].exc.args \
        and isinstance(body[0].exc.args[0], ast.Constant) and str(body[0].exc.args[0].value).startswith("Exercise ")
    return not stub


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


# Product code that restates an exercise (a twin): the student copy and the zip blank these too, with a message
# naming the exercise. {file: [(Class.function or function, exercise)]}
TWINS = {
    "tsdae.py": [("PreNormDecoderLayer.forward", 4)],
    "labs/masked_cutoff.py": [("masked_token_cutoff", 6)],
    "lib/useb.py": [("trec_eval_ap", 9)],
}
# The grader's own files: never in the student copy (the judge's held-back cases, the grader's tests and the
# stand-ins some of them need, the pytest tests' held-back list stays emptied in assignments.py).
GRADERS_FILES = ("course/held_back.py", "tests/test_assignments.py", "tests/stand_ins.py")
NO_STAND_INS = ('"""No stand-ins in a student copy: grading (course/judge.py) never calls another exercise\'s '
                'function,\nand the stand-ins stay with the teacher."""\nSTAND_INS: dict = {}\n')


def without_twins(source: str, twins: list[tuple[str, int]]) -> str:
    """The source with the body of each named function (function or Class.method) replaced by a raise that names
    the exercise it restates (its signature and docstring kept)."""
    lines = source.splitlines(keepends=True)
    wanted = dict(twins)
    cuts = []
    for node in ast.parse(source).body:
        inside = node.body if isinstance(node, ast.ClassDef) else [node]
        for f in inside:
            if not isinstance(f, ast.FunctionDef):
                continue
            name = f"{node.name}.{f.name}" if isinstance(node, ast.ClassDef) else f.name
            if name in wanted:
                body = f.body
                first = body[1].lineno if ast.get_docstring(f) is not None and len(body) > 1 else body[0].lineno
                cuts.append((first, f.end_lineno, " " * body[-1].col_offset, wanted.pop(name)))
    if wanted:
        raise ValueError(f"no such function to blank: {', '.join(wanted)}")
    for first, last, indent, number in sorted(cuts, reverse=True):
        message = f"blanked in the student copy: it restates exercise {number}"
        lines[first - 1 : last] = [f"{indent}raise NotImplementedError({message!r})\n"]
    return "".join(lines)


def copy_repository(out: Path, blanked: bool = False) -> None:
    """The repository's files (repository_files) into `out`; blanked: with every exercise's body replaced by
    `raise NotImplementedError` and every twin (TWINS) blanked (the zip's copy: no reference body of an exercise)."""
    for name in repository_files():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, out / name)
    if blanked:
        for name in SOURCES:
            (out / name).write_text(blank((ROOT / name).read_text(encoding="utf-8"), set(TESTS)), encoding="utf-8")
        blank_twins(out)


def blank_twins(out: Path) -> None:
    for name, twins in TWINS.items():
        if (out / name).is_file():
            (out / name).write_text(without_twins((out / name).read_text(encoding="utf-8"), twins), encoding="utf-8")


def make_student(out: Path, numbers: set[int], with_held_back: bool = False) -> None:
    """A copy of this repository to hand out: the exercises `numbers` blanked, every twin blanked (TWINS), the
    grader's own files left out (GRADERS_FILES; tests/stand_ins.py emptied), the held-back pytest tests left out
    unless with_held_back, and course/expected.frame: the reference's outputs of the judge's public cases, so that
    the student's `grade N` judges without any reference code."""
    from course import judge

    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"error: {out} exists and is not empty")
    copy_repository(out)
    for name in SOURCES:
        path = out / name
        path.write_text(blank(path.read_text(encoding="utf-8"), numbers), encoding="utf-8")
    blank_twins(out)
    for name in GRADERS_FILES:
        (out / name).unlink(missing_ok=True)
    (out / "tests" / "stand_ins.py").write_text(NO_STAND_INS, encoding="utf-8")
    judge.write_expected(out / judge.EXPECTED_FILE, judge.public_cases())
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


# What happened to a test, in the words the student reads (tests/test_assignments.py checks each one).
PASSED, FAILED, TIMED_OUT, DID_NOT_RUN, CRASHED = "passed", "failed", "timed out", "did not run", "crashed the grader"
TIMEOUT_MESSAGE = "timed out after"  # how tests/conftest.py's time limit fails a test


def read_report(report: Path) -> list[dict]:
    """course/report.py's lines; a last line cut short by a dying process is left out."""
    records = []
    for line in (report.read_text(encoding="utf-8").splitlines() if report.is_file() else []):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return records


def outcome_of(records: list[dict]) -> tuple[str, str]:
    """(outcome, message) of one test case from its report lines (started, then setup / call / teardown)."""
    failed = [r for r in records if r.get("outcome") == "failed"]
    if failed:
        message = re.sub(r"^Failed: ", "", failed[0]["message"] or "")  # pytest.fail's prefix
        return (TIMED_OUT if message.startswith(TIMEOUT_MESSAGE) else FAILED), message
    skipped = [r for r in records if r.get("outcome") == "skipped"]
    if skipped:
        return DID_NOT_RUN, f"skipped ({re.sub(r'^Skipped: ', '', skipped[0]['message'] or '')})"
    if any(r.get("event") == "call" and r.get("outcome") == "passed" for r in records):
        return PASSED, ""
    return CRASHED, ("the test process ended inside this test (os._exit, exit, a crash of Python or a kill), so no "
                     "test after it ran")


def test_outcomes(report: Path, tests: Sequence[str]) -> dict[str, tuple[str, str]]:
    """{test case: (outcome, message)} of every case of `tests` (a test function without [parameters] stands for all
    its cases), from course/report.py's report; a test with no case in it did not run, and the message says why."""
    records = read_report(report)
    not_loaded = [r["message"] for r in records if r["event"] == "collect"]
    cases: dict[str, list[dict]] = {}
    for r in records:
        if r["event"] != "collect":
            cases.setdefault(r["test"], []).append(r)
    crashed = [case for case, lines in cases.items() if outcome_of(lines)[0] == CRASHED]
    outcomes = {}
    for test in tests:
        found = [case for case in cases if case == test or ("[" not in test and case.startswith(test + "["))]
        for case in found:
            outcomes[case] = outcome_of(cases[case])
        if not found:
            outcomes[test] = (DID_NOT_RUN, f"its test file did not load: {not_loaded[0]}" if not_loaded else
                              f"the grader crashed before it, in {crashed[0]}" if crashed else
                              "pytest never reached it (the test process did not start, or stopped early: -x)")
    return outcomes


def tests_of(number: int, with_held_back: bool) -> list[str]:
    """An exercise's tests, the held-back ones last if asked."""
    return TESTS[number] + (list(HELD_BACK.get(number, {})) if with_held_back else [])


def exercise_outcomes(number: int, outcomes: dict[str, tuple[str, str]],
                      with_held_back: bool) -> list[tuple[str, bool, str, str]]:
    """(test case, held back?, outcome, message) of each case of the exercise's tests."""
    held_back = HELD_BACK.get(number, {}) if with_held_back else {}
    return [(case, test in held_back, *result) for test in tests_of(number, with_held_back)
            for case, result in outcomes.items() if case == test or ("[" not in test and case.startswith(test + "["))]


def described(number: int, case: str, held_back: bool, outcome: str, message: str) -> str:
    """One line (or more: the message whole) for the student: a public test by its name, outcome and message; a
    held-back one by what it checks (HELD_BACK), never by its name, its cases or its message."""
    if held_back:
        return f"held-back test {outcome}: {HELD_BACK[number][case.split('[')[0]]}"
    return f"{case}: {outcome}: {message}" if message else f"{case}: {outcome}"


def exercise_results(number: int, outcomes: dict[str, tuple[str, str]], with_held_back: bool) -> list[dict]:
    """The exercise's entries of Gradescope's results.json: one worth 1 point when all its tests pass (else 0),
    visible, whose output describes each test that did not pass (described); then one entry of 0 points per held-back
    test, visible only once the grades are published (Gradescope's "after_published"), for the student to learn
    from afterwards."""
    functions = [name for n, _, name in marked_functions() if n == number]
    results = exercise_outcomes(number, outcomes, with_held_back)
    failures = [described(number, *result) for result in results if result[2] != PASSED]
    entries = [{"name": f"Exercise {number}: {', '.join(functions)}", "score": 0.0 if failures else 1.0,
                "max_score": 1.0, "visibility": "visible",
                "output": "\n".join(failures) if failures else f"all {len(results)} tests passed"}]
    hidden: dict[str, str] = {}
    for case, held_back, outcome, _ in results:
        if held_back and hidden.get(case.split("[")[0], PASSED) == PASSED:
            hidden[case.split("[")[0]] = outcome  # a test's first case that did not pass
    for test, outcome in hidden.items():
        entries.append({"name": f"Exercise {number}, held back: {HELD_BACK[number][test]}", "score": 0.0,
                        "max_score": 0.0, "visibility": "after_published", "output": outcome})
    return entries


def data_dir() -> Path:
    """The evaluation data, found as `make test` finds it: $EVAL_DATA_DIR, else data/ here, else ../shared/data."""
    if os.environ.get("EVAL_DATA_DIR"):
        return Path(os.environ["EVAL_DATA_DIR"]).resolve()
    return ROOT / "data" if (ROOT / "data" / "stsbenchmark").is_dir() else (ROOT.parent / "shared" / "data").resolve()


def check_markers(repo: Path) -> None:
    """Stop in one line when a marker of `repo` names no def: grading would not find that function either."""
    for name in SOURCES:
        if (repo / name).is_file():
            try:
                marked_spans((repo / name).read_text(encoding="utf-8"), name)
            except (SyntaxError, ValueError) as e:
                raise SystemExit(f"error: {str(e).splitlines()[0]}") from None


def user_group(user: str) -> int:
    """The user's own group id."""
    import pwd

    try:
        return pwd.getpwnam(user).pw_gid
    except KeyError:
        raise SystemExit(f"error: no user {user} on this machine") from None


def run_tests(numbers: list[int], repo: Path = ROOT, extra: Sequence[str] = (), json_file: Path | None = None,
              with_held_back: bool = False, env: dict[str, str] | None = None, user: str | None = None) -> int:
    """`grade --tests`: run the pytest tests of the given exercises in `repo` (a student's own check: the tests run in
    the same process as the code they test, so this is no grade; grading is the judge's, course/judge.py), say what
    happened to each test that did not pass, and write a results.json-like file if asked. 0 when every test passed.
    ASSIGNMENTS_GRADING tells tests/conftest.py which exercises are graded: the others get stand-ins when blank."""
    check_markers(repo)
    tests = list(dict.fromkeys(test for number in numbers for test in tests_of(number, with_held_back)))
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        report = Path(tmp) / "report.jsonl"
        as_user = {}
        if user is not None:
            shutil.chown(tmp, user, user_group(user))
            as_user = {"user": user, "group": user_group(user), "extra_groups": []}
            env = {"HOME": tmp, **(env or {})}
        env = {"ASSIGNMENTS_TEST_TIMEOUT": str(TEST_TIMEOUT), **os.environ, "EVAL_DATA_DIR": str(data_dir()),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ASSIGNMENTS_REPORT": str(report),
               "ASSIGNMENTS_GRADING": ",".join(map(str, numbers)), **(env or {})}
        # the failures' messages whole (pytest cuts long assertion messages unless told not to)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "course.report",
                   "-o", "truncation_limit_lines=0", "-o", "truncation_limit_chars=0", *tests, *extra]
        code = subprocess.run(command, cwd=repo, env=env, **as_user).returncode
        outcomes = test_outcomes(report, tests)
    if json_file:
        results = [entry for number in numbers for entry in exercise_results(number, outcomes, with_held_back)]
        json_file.write_text(json.dumps({"score": sum(r["score"] for r in results), "tests": results}, indent=2)
                             + "\n", encoding="utf-8")
    print()
    for number in numbers:
        results = exercise_outcomes(number, outcomes, with_held_back)
        passed = sum(outcome == PASSED for _, _, outcome, _ in results)
        print(f"Exercise {number}: {passed} of {len(results)} tests passed")
        for result in results:
            if result[2] != PASSED:
                print("  " + described(number, *result).replace("\n", "\n    "))
    everything_passed = code == 0 and all(outcome == PASSED for outcome, _ in outcomes.values())
    return 0 if everything_passed else 1


def case_line(result) -> str:
    """One line for the student: a public case by what it checks, its outcome and message; a held-back case by what
    it checks and its outcome only (never its inputs or its message)."""
    if result.case.held_back:
        return f"held-back case {result.outcome}: {result.case.name}"
    return f"{result.case.name}: {result.outcome}" + (f": {result.message}" if result.message else "")


def judged_entries(number: int, results: list) -> list[dict]:
    """The exercise's entries of Gradescope's results.json: one worth 1 point when every case of the judge passed
    (else 0), visible, whose output describes each case that did not (case_line); then one entry of 0 points per
    held-back case, visible once the grades are published ("after_published")."""
    from course.judge import PASSED as CASE_PASSED

    functions = [name for n, _, name in marked_functions() if n == number]
    failures = [case_line(r) for r in results if r.outcome != CASE_PASSED]
    entries = [{"name": f"Exercise {number}: {', '.join(functions)}", "score": 0.0 if failures or not results else 1.0,
                "max_score": 1.0, "visibility": "visible",
                "output": "\n".join(failures) if failures else f"all {len(results)} cases passed"}]
    entries += [{"name": f"Exercise {number}, held back: {r.case.name}", "score": 0.0, "max_score": 0.0,
                 "visibility": "after_published", "output": r.outcome} for r in results if r.case.held_back]
    return entries


def judge_cases(with_held_back: bool) -> list:
    """The judge's public cases, and the held-back ones (course/held_back.py) when asked and this copy holds them
    (the teacher's and the zip's)."""
    from course import judge

    if not with_held_back or not (ROOT / "course" / "held_back.py").is_file():
        return judge.public_cases()
    from course import held_back

    return judge.public_cases() + held_back.cases()


def grade(numbers: list[int], repo: Path = ROOT, json_file: Path | None = None, with_held_back: bool = False,
          user: str | None = None, timeout: float | None = None) -> int:
    """Judge the given exercises (course/judge.py): each one's cases run in a worker of its own in `repo` (as `user`
    when given), and are decided here. Print each exercise's count of cases passed and each other case's outcome and
    message; write Gradescope's results.json to `json_file` if given. 0 when every case of every exercise passed."""
    from course import judge

    check_markers(repo)
    verdicts = judge.judge(numbers, repo, judge_cases(with_held_back), user, timeout=timeout or judge.WORKER_TIMEOUT)
    if json_file:
        entries = [entry for number in numbers for entry in judged_entries(number, verdicts[number])]
        json_file.write_text(json.dumps({"score": sum(e["score"] for e in entries), "tests": entries}, indent=2)
                             + "\n", encoding="utf-8")
    print()
    for number in numbers:
        results = verdicts[number]
        passed = sum(r.outcome == judge.PASSED for r in results)
        print(f"Exercise {number}: {passed} of {len(results)} cases passed")
        for result in results:
            if result.outcome != judge.PASSED:
                print("  " + case_line(result))
    everything = all(r.outcome == judge.PASSED for results in verdicts.values() for r in results)
    return 0 if everything and all(verdicts.values()) else 1


def grade_student(numbers: list[int], student: Path, json_file: Path | None = None, user: str | None = None,
                  timeout: float | None = None) -> int:
    """Grade a student's exercises with every case, the held-back ones included: the judge runs each exercise's cases
    in a worker in a temporary copy of this repository without the judge's own files (judge.worker_copy: no tests,
    no held-back case, no expected value), every exercise blanked, into which only the student's marked functions of
    those exercises are put (spliced). Nothing else of the student's files runs. user: the workers run as this
    (unprivileged) user, the copy readable and not writable by it (run_autograder passes it when it runs as root)."""
    from course import judge

    if not student.is_dir():
        raise SystemExit(f"error: {student} is not a folder")
    inner = [folder for folder in student.iterdir() if (folder / "tsdae.py").is_file()]
    if not any((student / name).is_file() for name in SOURCES) and len(inner) == 1:
        student = inner[0]  # an upload whose files sit in one folder of their own
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        copy = Path(tmp) / "repo"
        judge.worker_copy(copy, repository_files())
        blank_twins(copy)
        for name in SOURCES:
            reference = blank((ROOT / name).read_text(encoding="utf-8"), set(TESTS))
            path = student / name
            # a file the submission lacks: its exercises say so when their cases call them
            submitted = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else f"# no {name}\n"
            (copy / name).write_text(spliced(reference, submitted, set(numbers), name), encoding="utf-8")
        if user is not None:  # readable by the workers' user, writable by the judge alone
            for path in [Path(tmp), *Path(tmp).rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)
        return grade(numbers, copy, json_file, with_held_back=True, user=user, timeout=timeout)


RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission, as root: the student's files are in /autograder/submission (a copy of the
# student folder, or just the exercise files at their paths), results.json goes to /autograder/results. The zip
# lies in /autograder/source (Gradescope copies this script to /autograder/run_autograder).
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -d "$here/source/repo" ]; then here=$here/source; fi
submission=${SUBMISSION:-/autograder/submission}
results=${RESULTS:-/autograder/results}
mkdir -p "$results"
as_user=()
if [ "$(id -u)" = 0 ]; then
    # The student's code runs as a user of its own (as Autograder.io does it): the judge, this folder (its held-back
    # cases and expected values) and the results are root's alone; the student's functions run in workers, in a
    # copy that user may read and not change, and hand back only their outputs (course/judge.py).
    user=${AUTOGRADER_USER:-student}
    id -u "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin "$user"
    chmod -R go-rwx "$here" "$results"
    as_user=(--as-user "$user")
fi
if [ -z "${EVAL_DATA_DIR:-}" ] && [ -d /autograder/data ]; then export EVAL_DATA_DIR=/autograder/data; fi
cd "$here/repo" && python3 course/assignments.py grade EXERCISES --student "$submission" --json "$results/results.json" \
    "${as_user[@]}"
exit 0  # the score is in results.json; a failing test is no failure of the autograder
"""  # noqa: E501

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, to build the image the submissions are graded in.
set -eu
cd "$(dirname "$0")/repo"
apt-get install -y python3 python3-pip python3-venv >/dev/null 2>&1 || true
make install-dev PYTHON=python3
python3 evaluate.py --fetch-data /autograder/data   # the evaluation sets the tests read, readable by the tests' user
chmod -R a+rX /autograder/data
"""


def make_autograder(out: Path, numbers: list[int]) -> None:
    """A zip for Gradescope's "Upload autograder": setup.sh, run_autograder and repo/, this repository as git tracks
    it with every exercise and twin blanked (copy_repository), without tests/ (the judge grades, not pytest), with
    course/held_back.py and course/expected.frame (the reference's outputs of every case, held back included). Each
    submission is graded with `grade --student`: the judge runs as root, the student's functions in workers as an
    unprivileged user."""
    from course import judge

    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        folder = Path(tmp)
        copy_repository(folder / "repo", blanked=True)
        shutil.rmtree(folder / "repo" / "tests")
        judge.write_expected(folder / "repo" / judge.EXPECTED_FILE, judge_cases(with_held_back=True))
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
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
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
    run = sub.add_parser("grade", help="judge one or more exercises (course/judge.py)")
    run.add_argument("numbers", type=int, nargs="+", choices=sorted(TESTS), metavar="N")
    copy = run.add_mutually_exclusive_group()
    copy.add_argument("--repo", type=Path, default=ROOT, help="run the tests in this copy (default: this one)")
    copy.add_argument("--student", type=Path, help="grade this copy's exercise files with every test, held back too")
    run.add_argument("--json", type=Path, metavar="FILE", help="also write Gradescope's results.json to FILE")
    run.add_argument("--as-user", metavar="USER", help="with --student, run as root: the student's functions run as "
                     "this unprivileged user (run_autograder passes it)")
    run.add_argument("--tests", action="store_true", help="run the exercise's pytest tests instead (your own check: "
                     "other arguments go to pytest; no grade)")
    run.add_argument("--timeout", type=float, help="seconds each exercise's worker may run (default "
                     "course/judge.py: WORKER_TIMEOUT)")
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
              f"course/assignments.py grade N; you, with the held-back tests: python course/assignments.py grade N "
              f"--student OUT)")
        return 0
    if args.command == "make-autograder":
        make_autograder(args.out, sorted(args.only or TESTS))
        print(f"autograder in {args.out}: upload it to Gradescope as it is "
              f"(its setup.sh installs, run_autograder grades)")
        return 0
    if args.json and not args.json.resolve().parent.is_dir():
        raise SystemExit(f"error: {args.json.parent} is not a folder")
    if args.as_user and not args.student:
        p.error("--as-user goes with --student")
    if pytest_args and not args.tests:
        p.error(f"unrecognized arguments: {' '.join(pytest_args)} (pytest's arguments go with --tests)")
    if args.tests:
        if args.student:
            p.error("--tests runs a copy's own tests (--repo); --student is graded by the judge")
        return run_tests(args.numbers, args.repo, pytest_args, args.json)
    if args.student:
        return grade_student(args.numbers, args.student, args.json, args.as_user, args.timeout)
    if not args.repo.is_dir():
        raise SystemExit(f"error: {args.repo} is not a folder")
    return grade(args.numbers, args.repo, args.json, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
