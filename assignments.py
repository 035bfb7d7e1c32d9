"""The exercises of ASSIGNMENTS.md: hand out a student copy in one command, grade it in another.

    python assignments.py list                           # the exercises, their functions and tests
    python assignments.py make-student OUT               # a copy of this repository with every exercise blanked
    python assignments.py make-student OUT --only 3 8    # ... with exercises 3 and 8 blanked only
    python assignments.py grade 3                        # run exercise 3's tests here (or: --repo OUT)
    python assignments.py grade 1 2 3 -x                 # several; other arguments go to pytest

An exercise is a function (or method) of the plain reading path marked, on the line above its `def`, with a
comment `# Exercise N (ASSIGNMENTS.md)`. The student copy keeps its signature and docstring and replaces the
rest of its body with `raise NotImplementedError`. Grading runs the exercise's tests (TESTS below) with pytest;
tests/test_assignments.py checks that each one fails on the student copy and passes on this solution.
"""
from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MARKER = re.compile(r"^\s*# Exercise (\d+) \(ASSIGNMENTS\.md\)\s*$")
SOURCES = ("model.py", "weights.py", "data.py", "tsdae.py", "consert.py", "evaluate.py")  # the files exercises live in
LEFT_OUT = {".git", "runs", "data", "__pycache__", ".pytest_cache"}  # not copied into a student copy

# Each exercise's tests: they run the plain path, the one the exercises fill in.
TESTS = {
    1: ["tests/test_model.py::test_attention_formula_equals_the_fused_kernel",
        "tests/test_model.py::test_minilm_hidden_states_equal_transformers[plain]"],
    2: ["tests/test_model.py::test_pooling_ignores_padding",
        "tests/test_model.py::test_minilm_encode_equals_sentence_transformers[plain]"],
    3: ["tests/test_tsdae.py::test_deletion_removes_60_percent_and_never_everything",
        "tests/test_tsdae.py::test_noise_is_fresh_each_epoch_and_repeatable"],
    4: ["tests/test_tsdae.py::test_decoder_sees_only_the_cls_vector[plain]",
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
}


def marked_functions(repo: Path = ROOT) -> list[tuple[int, Path, str]]:
    """(exercise number, file, Class.function name) of every marked function, in file order."""
    found = []
    for name in SOURCES:
        source = (repo / name).read_text(encoding="utf-8")
        marked = {i + 2: int(m.group(1)) for i, line in enumerate(source.splitlines()) if (m := MARKER.match(line))}
        for node in ast.parse(source).body:
            inside = node.body if isinstance(node, ast.ClassDef) else [node]
            for f in inside:
                if isinstance(f, ast.FunctionDef) and f.lineno in marked:
                    qualified = f"{node.name}.{f.name}" if isinstance(node, ast.ClassDef) else f.name
                    found.append((marked.pop(f.lineno), repo / name, qualified))
        if marked:
            raise ValueError(f"{name}: an exercise marker must sit right above a def (lines {sorted(marked)})")
    return found


def blank(source: str, numbers: set[int]) -> str:
    """The source with the body of each function marked with one of `numbers` replaced by `raise NotImplementedError`
    (its signature and docstring kept)."""
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
        stub = f'{indent}raise NotImplementedError("Exercise {number}: see ASSIGNMENTS.md")\n'
        lines[first - 1 : last] = [stub]
    return "".join(lines)


def make_student(out: Path, numbers: set[int]) -> None:
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"error: {out} exists and is not empty")
    shutil.copytree(ROOT, out, dirs_exist_ok=True,
                    ignore=lambda folder, names: [n for n in names if n in LEFT_OUT or n.endswith(".pyc")])
    for name in SOURCES:
        path = out / name
        path.write_text(blank(path.read_text(encoding="utf-8"), numbers), encoding="utf-8")


def grade(numbers: list[int], repo: Path, extra: list[str] = ()) -> int:
    """Run the tests of the given exercises in `repo`; pytest's exit code (0 = all passed)."""
    tests = list(dict.fromkeys(test for number in numbers for test in TESTS[number]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, *extra]
    return subprocess.run(command, cwd=repo).returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 1)[1])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the exercises, their functions and tests")
    make = sub.add_parser("make-student", help="write a student copy with the exercises blanked")
    make.add_argument("out", type=Path, help="an empty or new folder")
    make.add_argument("--only", type=int, nargs="+", choices=sorted(TESTS), help="blank these exercises only")
    run = sub.add_parser("grade", help="run the tests of one or more exercises (other arguments go to pytest)")
    run.add_argument("numbers", type=int, nargs="+", choices=sorted(TESTS), metavar="N")
    run.add_argument("--repo", type=Path, default=ROOT, help="the copy to grade (default: the one this file is in)")
    args, pytest_args = p.parse_known_args(argv)
    if pytest_args and args.command != "grade":
        p.error(f"unrecognized arguments: {' '.join(pytest_args)}")
    if args.command == "list":
        functions = marked_functions()
        for number, tests in TESTS.items():
            where = ", ".join(f"{path.name}: {name}" for n, path, name in functions if n == number)
            print(f"Exercise {number}: {where}\n  " + "\n  ".join(tests))
        return 0
    if args.command == "make-student":
        numbers = set(args.only or TESTS)
        make_student(args.out, numbers)
        print(f"student copy in {args.out}: exercises {', '.join(map(str, sorted(numbers)))} blanked "
              f"(grade with: python assignments.py grade N)")
        return 0
    return grade(args.numbers, args.repo, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
