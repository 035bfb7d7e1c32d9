"""course/assignments.py: each exercise is marked in the code, its student copy is blanked, and its grading tests fail on
the student copy and pass on this solution; the held-back tests stay out of the copy and grade --student runs them."""
import ast
import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from course import assignments
from conftest import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent


def pytest_run(repo: Path, tests: list[str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests, *extra], cwd=repo,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "EVAL_DATA_DIR": str(DATA_DIR)})


def test_every_exercise_is_marked_once_and_has_tests():
    functions = assignments.marked_functions()
    assert {number for number, _, _ in functions} == set(assignments.TESTS)
    assert len({(path, name) for _, path, name in functions}) == len(functions)
    text = (ROOT / "ASSIGNMENTS.md").read_text(encoding="utf-8")
    for number, path, name in functions:
        assert f"python course/assignments.py grade {number}" in text and name in text, (number, name)
    assert set(assignments.HELD_BACK) == set(assignments.TESTS)
    public = {t.split("[")[0] for tests in assignments.TESTS.values() for t in tests}
    for test in (t for tests in assignments.HELD_BACK.values() for t in tests):
        assert "[" not in test and test not in public, test  # a whole function, and no public test
    listed = {t for tables in (assignments.TESTS, assignments.HELD_BACK) for tests in tables.values() for t in tests}
    collected = pytest_run(ROOT, sorted(listed), "--collect-only")
    assert collected.returncode == 0, collected.stdout[-2000:]  # every listed test exists


def test_student_copy_keeps_signatures_and_docstrings_and_blanks_the_rest(tmp_path):
    assignments.make_student(tmp_path / "student", set(assignments.TESTS))
    for number, path, name in assignments.marked_functions(tmp_path / "student"):
        scope = ast.parse(path.read_text(encoding="utf-8"))
        for part in name.split("."):  # Class.method or function
            scope = next(node for node in scope.body if getattr(node, "name", None) == part)
        function = scope
        assert ast.get_docstring(function), name  # the docstring says what to compute
        assert len(function.body) == 2 and isinstance(function.body[1], ast.Raise), name  # docstring + raise only
    solution = (ROOT / "consert.py").read_text(encoding="utf-8")
    student = (tmp_path / "student" / "consert.py").read_text(encoding="utf-8")
    assert "def fgv_perturbation" in student and student.count("NotImplementedError") == 5
    kept = solution[solution.index("def fgv_perturbation"): solution.index("# 2. The contrastive loss")]
    assert kept in student  # unmarked code is copied as it is
    assert not (tmp_path / "student" / ".git").exists()


def test_each_exercise_is_checked_alone_and_fails_while_blank(tmp_path):
    """Each exercise checkable alone (ASSIGNMENTS.md): a student copy with only exercise 4 written passes `grade 4`
    inside the copy, and likewise exercise 8; every exercise passes its public and held-back tests graded with only
    it written (grade N --student: the grader's copy has every exercise blanked, and the tests give the others
    stand-ins, tests/stand_ins.py). In a copy with every exercise blank, each one's grading fails on its stub.
    Two processes at a time (2 cores)."""
    everything = set(assignments.TESTS)
    assignments.make_student(tmp_path / "blank", everything)
    jobs = []
    for number in (4, 8):
        assignments.make_student(tmp_path / f"only{number}", everything - {number})
        jobs.append((number, tmp_path / f"only{number}", ["grade", str(number)], 0))
    jobs += [(number, ROOT, ["grade", str(number), "--student", str(ROOT)], 0) for number in sorted(everything)]
    jobs += [(number, tmp_path / "blank", ["grade", str(number), "-x"], 1) for number in sorted(everything)]

    def grade(job):
        _, repo, args, _ = job
        return subprocess.run([sys.executable, str(repo / "course" / "assignments.py"), *args], cwd=repo,
                              capture_output=True, text=True, timeout=900,
                              env={**os.environ, "EVAL_DATA_DIR": str(DATA_DIR)})

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(grade, jobs))
    for (number, repo, args, expected), result in zip(jobs, results):
        assert result.returncode == expected, (repo.name, args, result.stdout[-3000:])
        if expected:  # 1: tests ran and failed, on the stub
            assert f"Exercise {number}: see ASSIGNMENTS.md" in result.stdout, (number, result.stdout[-2000:])


HELD_BACK = [test for tests in assignments.HELD_BACK.values() for test in tests]


def assignments_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "course" / "assignments.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "EVAL_DATA_DIR": str(DATA_DIR)})


def test_the_student_copy_leaves_the_held_back_tests_out_and_its_public_tests_collect(tmp_path):
    """No file of the student copy names a held-back test (its HELD_BACK is empty); its test files still collect
    every public test. --with-held-back keeps them."""
    assignments.make_student(tmp_path / "student", {9})
    assignments.make_student(tmp_path / "kept", {9}, with_held_back=True)
    names = {test.split("::")[1] for test in HELD_BACK}
    for path in (tmp_path / "student").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".txt", ".ini"):
            text = path.read_text(encoding="utf-8")
            assert not [name for name in names if name in text], path
    for test in HELD_BACK:
        file, name = test.split("::")
        assert f"def {name}(" in (tmp_path / "kept" / file).read_text(encoding="utf-8")
    files = sorted({test.split("::")[0] for test in HELD_BACK})
    collected = pytest_run(tmp_path / "student", files, "--collect-only")
    assert collected.returncode == 0, collected.stdout[-2000:]
    for test in (t for tests in assignments.TESTS.values() for t in tests):
        assert test in collected.stdout, test


def test_grade_student_runs_the_held_back_tests_and_writes_gradescope_results(tmp_path):
    """A student's exercise 3 that deletes the right share of words, but as a count drawn once per sentence rather than
    each word on its own, passes the public tests (grade --repo) and fails a held-back one (grade --student), which
    results.json describes without naming. With exercise 9 blanked, its entry scores 0 and shows the stub's message;
    on this solution every entry scores 1."""
    assignments.make_student(tmp_path / "shuffles", {9})
    tsdae_py = tmp_path / "shuffles" / "tsdae.py"
    solution_line = "    return kept if kept or not words else [rng.choice(words)]\n"
    assert solution_line in tsdae_py.read_text(encoding="utf-8")
    count = ("    gone = set(rng.sample(range(len(words)), int(ratio * len(words) + rng.random())))  # E[count] = ratio n\n"
             "    kept = [w for i, w in enumerate(words) if i not in gone]\n")
    tsdae_py.write_text(tsdae_py.read_text(encoding="utf-8").replace(solution_line, count + solution_line),
                        encoding="utf-8")
    student = str(tmp_path / "shuffles")
    runs = {"public only": ("grade", "3", "--repo", student),
            "shuffles": ("grade", "3", "9", "--student", student, "--json", str(tmp_path / "s.json")),
            "solution": ("grade", "3", "9", "--student", str(ROOT), "--json", str(tmp_path / "ok.json"))}
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(runs, pool.map(lambda args: assignments_command(*args), runs.values())))
    assert results["public only"].returncode == 0, results["public only"].stdout[-2000:]
    assert results["shuffles"].returncode == 1, results["shuffles"].stdout[-2000:]
    assert f"FAILED {list(assignments.HELD_BACK[3])[0]}" in results["shuffles"].stdout
    assert results["solution"].returncode == 0, results["solution"].stdout[-2000:]

    shuffles = json.loads((tmp_path / "s.json").read_text())
    three, nine = [t for t in shuffles["tests"] if t["visibility"] == "visible"]
    assert (three["name"], three["score"], three["max_score"]) == ("Exercise 3: delete_words", 0, 1)
    (what,) = assignments.HELD_BACK[3].values()
    assert three["output"] == f"held-back test failed: {what}"  # what it checks, not its name or its cases
    later = [t for t in shuffles["tests"] if t["visibility"] == "after_published"]
    assert [(t["name"], t["max_score"], t["output"]) for t in later if t["name"].startswith("Exercise 3")] == [
        (f"Exercise 3, held back: {what}", 0, "failed")]
    assert (nine["score"], nine["max_score"], shuffles["score"]) == (0, 1, 0)
    assert "NotImplementedError: Exercise 9: see ASSIGNMENTS.md" in nine["output"]
    assert not [test for test in HELD_BACK if test.split("::")[1] in json.dumps(shuffles)]  # counted, not named
    solution = json.loads((tmp_path / "ok.json").read_text())
    visible = [t for t in solution["tests"] if t["visibility"] == "visible"]
    assert solution["score"] == 2 and all(t["score"] == t["max_score"] == 1 for t in visible)
    assert all(re.fullmatch(r"all \d+ tests passed", t["output"]) for t in visible), solution
    assert all(t["output"] == "passed" for t in solution["tests"] if t not in visible)


# The exercises each default command runs (tiny model: safetensors; the unsupervised ConSERT default views are
# feature cutoff + shuffle). Exercises 9 (retrieval metrics) and 10 (span view) are not on a training path.
TRAINING_PATH = {"tsdae.py": [1, 2, 3, 4, 5, 11], "consert.py": [1, 2, 6, 7, 8, 11]}


def test_the_default_commands_train_the_students_code(tmp_path, tiny_model_dir, small_corpus):
    """The student copy trains the student's code: with one training-path exercise blanked, the default command
    (no --plain) fails at once, in one line naming that exercise; on the solution the same commands train."""
    def train_one_step(repo: Path, script: str, out: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, script, "--corpus", str(small_corpus), "--model", str(tiny_model_dir),
                               "--steps", "1", "--out", str(out)], cwd=repo, capture_output=True, text=True,
                              timeout=600)

    jobs = [(ROOT, script, None) for script in TRAINING_PATH]
    for number in sorted({n for numbers in TRAINING_PATH.values() for n in numbers}):
        assignments.make_student(tmp_path / f"student{number}", {number})
        jobs += [(tmp_path / f"student{number}", script, number) for script, numbers in TRAINING_PATH.items()
                 if number in numbers]

    def run(job):
        repo, script, number = job
        return job, train_one_step(repo, script, tmp_path / "runs" / f"{script}-{number}")

    with ThreadPoolExecutor(max_workers=2) as pool:
        for (repo, script, number), result in pool.map(run, jobs):
            if number is None:
                assert result.returncode == 0, (script, result.stderr[-2000:])
                continue
            last = result.stderr.strip().splitlines()[-1]
            assert result.returncode != 0 and "Traceback" not in result.stderr, (script, number, result.stderr[-2000:])
            assert last == f"error: not written yet: Exercise {number}: see ASSIGNMENTS.md", (script, number, last)


def test_assignments_md_gives_each_exercise_the_codes_signature():
    """Every `file: Function(params)` ASSIGNMENTS.md asks for is the marked function's own signature (its
    parameters, self and **_ left out): the text and the code cannot drift apart."""
    import importlib
    import inspect

    text = (ROOT / "ASSIGNMENTS.md").read_text(encoding="utf-8")
    for number, path, qualified in assignments.marked_functions():
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        function = module
        for part in qualified.split("."):
            function = getattr(function, part)
        params = [p.name for p in inspect.signature(function).parameters.values()
                  if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        file = path.relative_to(ROOT).as_posix()
        asked = re.findall(rf"`(?:{re.escape(file)}: )?{re.escape(qualified)}\(([^)`]*)\)`", text)
        assert asked, f"ASSIGNMENTS.md never gives `{file}: {qualified}(...)` (exercise {number})"
        for given in asked:
            assert [p.strip() for p in given.split(",") if p.strip()] == params, (qualified, given, params)


def test_the_grader_runs_only_the_students_marked_functions(tmp_path):
    """A submission whose exercise 1 is blanked and whose model.py, at module level, makes pytest pass every test and
    torch.testing accept anything, scores 0 for exercise 1: grading splices the marked function into this
    repository's model.py, and nothing else of the student's file runs."""
    assignments.make_student(tmp_path / "cheat", {1})
    model_py = tmp_path / "cheat" / "model.py"
    model_py.write_text(model_py.read_text(encoding="utf-8") + (
        "\nimport sys\nif 'pytest' in sys.modules:\n    import _pytest.python\n"
        "    _pytest.python.Function.runtest = lambda self: None\ntorch.testing.assert_close = lambda *a, **k: None\n"),
        encoding="utf-8")
    result = assignments_command("grade", "1", "--student", str(tmp_path / "cheat"), "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1, result.stdout[-2000:]
    (one,) = [t for t in json.loads((tmp_path / "r.json").read_text())["tests"] if t["visibility"] == "visible"]
    assert one["score"] == 0 and "NotImplementedError: Exercise 1" in one["output"]
    assert "lambda self: None" in model_py.read_text(encoding="utf-8")  # the student's file itself is untouched


def test_a_hung_function_times_out_at_the_limit_grade_sets_and_the_other_tests_keep_their_results(tmp_path):
    """A delete_words that redraws until a word survives never returns at ratio 1: graded with the limit `grade`
    itself passes to the tests (its default TEST_TIMEOUT, here made 5 s on the module grade reads it from; nothing
    in the environment), its tests stop after 5 s as "timed out", exercise 3 scores 0, and the test that passed
    before keeps its result. A grader that passed no limit would hang: stopped after 240 s, that fails."""
    assignments.make_student(tmp_path / "loops", {3})
    tsdae_py = tmp_path / "loops" / "tsdae.py"
    stub = '    raise NotImplementedError(\'Exercise 3: see ASSIGNMENTS.md\')\n'
    assert stub in tsdae_py.read_text(encoding="utf-8")
    tsdae_py.write_text(tsdae_py.read_text(encoding="utf-8").replace(stub, (
        "    while True:  # redraw until something survives\n"
        "        kept = [w for w in words if rng.random() >= ratio]\n"
        "        if kept or not words:\n"
        "            return kept\n")), encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if name != "ASSIGNMENTS_TEST_TIMEOUT"}
    grade = "import sys; from course import assignments; assignments.TEST_TIMEOUT = 5; sys.exit(assignments.main())"
    process = subprocess.Popen([sys.executable, "-c", grade, "grade", "3", "--student", str(tmp_path / "loops"),
                                "--json", str(tmp_path / "r.json")], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               env={**env, "EVAL_DATA_DIR": str(DATA_DIR)})
    try:
        output, _ = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the grader and the pytest it started, stuck in the endless loop
        process.communicate()
        pytest.fail("grading never finished: the tests ran without the grader's time limit")
    assert process.returncode == 1, output[-2000:]
    tests = json.loads((tmp_path / "r.json").read_text())["tests"]
    (three,) = [t for t in tests if t["visibility"] == "visible"]
    assert three["score"] == 0 and "timed out after 5 s" in three["output"], three
    assert "held-back test timed out" in three["output"]
    assert "test_noise_is_fresh_each_epoch_and_repeatable" not in three["output"]  # it passed, and stays passed


SEARCHING_NT_XENT = """    import os
    import pathlib
    import zipfile

    def readable(path):  # the text of a .py file, or of each .py file in a zip
        try:
            if path.suffix == ".zip":
                with zipfile.ZipFile(path) as archive:
                    return [archive.read(n).decode() for n in archive.namelist() if n.endswith(".py")]
            return [path.read_text()]
        except (OSError, UnicodeDecodeError, zipfile.BadZipFile):
            return []

    folders, pid = {pathlib.Path.cwd(), pathlib.Path(__file__).resolve().parent}, os.getpid()
    for _ in range(3):  # the tests' process, the grader that started them, and the script that started it
        try:
            folders.add(pathlib.Path(os.readlink(f"/proc/{pid}/cwd")))
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    folders |= {folder.parent for folder in folders} | {pathlib.Path("/autograder")}
    for folder in folders:
        for path in [p for p in folder.rglob("*") if p.suffix in (".py", ".zip")] if folder.is_dir() else []:
            for text in readable(path):
                if "def nt_xent(" in text and "raise NotImplementedError('Exercise 8" not in text:
                    start = text.index("def nt_xent(")
                    print("FOUND", path, text[start:start + 3000])  # shown to whoever reads the output
                    scope = {}
                    exec(text, scope)  # the reference module's code: use its nt_xent
                    return scope["nt_xent"](z1, z2, temperature, same)
    return (z1 * z2).sum() * 0  # nothing found: a wrong answer
"""


def test_the_autograder_zip_holds_no_solution_and_grades_a_submission_in_an_empty_folder(tmp_path):
    """make-autograder's zip holds no reference body of an exercise (every marked function already blank), and,
    unpacked into an empty folder with a submission beside it, writes a valid results.json (Gradescope's layout) from
    run_autograder alone, the tests run as the user it is given. The submission's nt_xent searches the grader's
    folders and those of the processes above it for a written nt_xent to delegate to and print: it finds at most
    the wrong stand-in of tests/stand_ins.py (the grader gives it to exercises not graded) and scores 0, and no line of
    the reference appears in what the run prints or in results.json."""
    zip_path = tmp_path / "autograder.zip"
    made = assignments_command("make-autograder", str(zip_path), "--only", "3", "8")
    assert made.returncode == 0, made.stderr[-2000:]
    import pwd
    import zipfile

    unpacked = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        names = archive.namelist()
        archive.extractall(unpacked)
        for name in assignments.SOURCES:  # no exercise's body left to blank
            text = archive.read(f"repo/{name}").decode()
            assert assignments.blank(text, set(assignments.TESTS)) == text, name
    assert {"setup.sh", "run_autograder", "repo/course/assignments.py"} <= set(names)
    assert not [n for n in names if n.startswith(("repo/.venv", "repo/runs", "repo/data/"))]
    assignments.make_student(tmp_path / "submission", {3, 8})  # exercise 3 not written: 0 points
    consert_py = tmp_path / "submission" / "consert.py"
    stub = "    raise NotImplementedError('Exercise 8: see ASSIGNMENTS.md')\n"
    consert_py.write_text(consert_py.read_text(encoding="utf-8").replace(stub, SEARCHING_NT_XENT), encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)  # Gradescope's python3, with this test's packages
    (unpacked / "run_autograder").chmod(0o755)
    user = pwd.getpwuid(os.getuid()).pw_name  # this machine's Python is its owner's alone: no other user can run it
    result = subprocess.run(["bash", str(unpacked / "run_autograder")], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "EVAL_DATA_DIR": str(DATA_DIR),
                                 "SUBMISSION": str(tmp_path / "submission"), "RESULTS": str(tmp_path / "results"),
                                 "AUTOGRADER_USER": user})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    output = result.stdout + result.stderr + (tmp_path / "results" / "results.json").read_text()
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 0 and {t["visibility"] for t in results["tests"]} == {"visible", "after_published"}
    assert all({"name", "score", "max_score", "visibility", "output"} <= set(t) for t in results["tests"])
    # the one nt_xent it may find: the wrong stand-in, in the unpacked zip or in the grading copy (/tmp/grade-*/repo)
    found = re.findall(r"^FOUND (\S+)", output, flags=re.M)
    assert all(path.endswith("/repo/tests/stand_ins.py") for path in found), found
    reference = (ROOT / "consert.py").read_text(encoding="utf-8")
    body = reference[reference.index("def nt_xent("):]
    body = body[: body.index("\n\n\n")].split('"""')[-1]  # the lines after the docstring
    for line in filter(None, (line.strip() for line in body.splitlines())):
        assert line not in output, line


def submission(folder: Path, changes: dict[str, list[tuple[str, str]]]) -> Path:
    """A student's exercise files: this repository's, each (solution text, student text) replaced once."""
    for name in assignments.SOURCES:
        text = (ROOT / name).read_text(encoding="utf-8")
        for old, new in changes.get(name, []):
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def visible_results(path: Path) -> dict[int, dict]:
    return {int(re.match(r"Exercise (\d+)", t["name"]).group(1)): t
            for t in json.loads(path.read_text())["tests"] if t["visibility"] == "visible"}


NT_XENT_LOOP = """    N = len(z1)
    u = F.normalize(torch.cat([z1, z2]).float(), dim=-1)  # (2N, d)
    left_out = (torch.eye(N, dtype=torch.bool) if same is None else same).repeat(2, 2)
    losses = []
    for k in range(2 * N):  # one item at a time
        p = (k + N) % (2 * N)
        scores = u @ u[k] / temperature  # (2N,)
        candidates = ~left_out[k]
        candidates[p] = True
        losses.append(scores[candidates].logsumexp(0) - scores[p])
    losses = torch.stack(losses)
    return losses[:N].mean() + losses[N:].mean()
"""
NT_XENT_BODY = "    N = len(z1)\n    u = F.normalize(torch.cat([z1, z2]).float(), dim=-1)"


def test_the_four_mistakes_score_0_with_a_message_naming_each(tmp_path):
    """Four mistakes that once got full marks: a delete_words that crashes on an empty sentence (rng.choice([])), a
    decoder layer with the causal mask inverted (NaN at the last position, which a `>` comparison let pass), an
    nt_xent whose loss has no gradient (inputs detached), and an nt_xent that loops over the items. Each scores 0
    and its exercise's output names it. The decoder layer's marker has a blank line under it: grading finds the
    function all the same, as the student's own check does."""
    first = submission(tmp_path / "three", {
        "tsdae.py": [("    return kept if kept or not words else [rng.choice(words)]",
                      "    return kept if kept else [rng.choice(words)]"),
                     ("        x = self.self_attn_norm(x + self.dropout(self.self_attn(x, causal)))",
                      "        x = self.self_attn_norm(x + self.dropout(self.self_attn(x, ~causal)))"),
                     ("    # Exercise 4 (ASSIGNMENTS.md)\n", "    # Exercise 4 (ASSIGNMENTS.md)\n\n")],
        "consert.py": [("torch.cat([z1, z2]).float()", "torch.cat([z1, z2]).detach().float()")]})
    loop = (tmp_path / "loop").mkdir() or submission(tmp_path / "loop", {})
    consert_py = (loop / "consert.py").read_text(encoding="utf-8")
    body_start = consert_py.index(NT_XENT_BODY)
    body_end = consert_py.index("\n\n\n", body_start)
    (loop / "consert.py").write_text(consert_py[:body_start] + NT_XENT_LOOP.rstrip("\n") + consert_py[body_end:],
                                     encoding="utf-8")
    runs = [("grade", "3", "4", "8", "--student", str(first), "--json", str(tmp_path / "three.json")),
            ("grade", "8", "--student", str(loop), "--json", str(tmp_path / "loop.json"))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda args: assignments_command(*args), runs))
    assert [r.returncode for r in results] == [1, 1], [r.stdout[-3000:] for r in results]
    three, loop_results = visible_results(tmp_path / "three.json"), visible_results(tmp_path / "loop.json")
    named = {3: (three, "an empty sentence must stay empty"), 4: (three, "the causal mask inverted"),
             8: (three, "no gradient: nt_xent's loss is cut from z1 and z2"), "8, loop": (loop_results, "a Python loop")}
    for key, (entries, cause) in named.items():
        entry = entries[int(str(key)[0])]
        assert entry["score"] == 0 and cause in entry["output"], (key, entry["output"])
    assert "test_nt_xent_equals_a_double_loop" not in loop_results[8]["output"]  # the loop computes the right loss


def test_what_happened_to_each_test_has_its_own_words(tmp_path):
    """The grader's five outcomes, from course/report.py's lines: passed, failed (with the message whole, however
    long), timed out, did not run (skipped, or its file did not load, or after a crash), crashed the grader (the
    test process died inside it). Only when every test passed does an exercise score 1."""
    long = "the likely cause first. " + "x" * 2000
    lines = [{"test": "t.py::a", "event": "started"}, {"test": "t.py::a", "event": "call", "outcome": "passed"},
             {"test": "t.py::b", "event": "started"},
             {"test": "t.py::b", "event": "call", "outcome": "failed", "message": "AssertionError: " + long},
             {"test": "t.py::c[1]", "event": "started"},
             {"test": "t.py::c[1]", "event": "call", "outcome": "failed", "message": "Failed: timed out after 5 s"},
             {"test": "t.py::d", "event": "started"},
             {"test": "t.py::d", "event": "setup", "outcome": "skipped", "message": "Skipped: no data"},
             {"test": "t.py::e", "event": "started"}]
    report = tmp_path / "report.jsonl"
    report.write_text("\n".join(map(json.dumps, lines)) + '\n{"test": "t.py::e", "ev', encoding="utf-8")  # cut short
    outcomes = assignments.test_outcomes(report, ["t.py::a", "t.py::b", "t.py::c", "t.py::d", "t.py::e", "t.py::f"])
    assert {case: outcome for case, (outcome, _) in outcomes.items()} == {
        "t.py::a": "passed", "t.py::b": "failed", "t.py::c[1]": "timed out", "t.py::d": "did not run",
        "t.py::e": "crashed the grader", "t.py::f": "did not run"}
    assert outcomes["t.py::b"][1] == "AssertionError: " + long  # whole
    assert outcomes["t.py::d"][1] == "skipped (no data)"
    assert outcomes["t.py::f"][1] == "the grader crashed before it, in t.py::e"
    assert "os._exit" in outcomes["t.py::e"][1]
    report.write_text(json.dumps({"test": "tests/t.py", "event": "collect", "outcome": "failed",
                                  "message": "ImportError: no module named sentence_transformers"}), encoding="utf-8")
    assert assignments.test_outcomes(report, ["t.py::a"])["t.py::a"] == (
        "did not run", "its test file did not load: ImportError: no module named sentence_transformers")



def test_a_skipped_or_crashed_exercise_is_no_pass(tmp_path):
    """`grade` exits 1 unless every graded test passed: a delete_words that calls pytest.skip() (every test of
    exercise 3 skipped) scores 0, its tests "did not run"; an evaluate.average_precision that ends the process with
    os._exit(0) (exit status 0, no test failed) scores 0, "crashed the grader"."""
    skipper = submission(tmp_path / "skipper", {"tsdae.py": [
        ("    kept = [w for w in words if rng.random() >= ratio]\n",
         "    import pytest\n    pytest.skip('not today')\n")]})
    quitter = submission(tmp_path / "quitter", {"evaluate.py": [
        ("    labels, scores = np.asarray(labels, dtype=np.float64), np.asarray(scores, dtype=np.float64)\n",
         "    import os\n    os._exit(0)  # the process ends, exit status 0: no test failed\n")]})
    runs = [("grade", "3", "--student", str(skipper), "--json", str(tmp_path / "skip.json")),
            ("grade", "9", "--student", str(quitter), "--json", str(tmp_path / "quit.json"))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        skipped, crashed = pool.map(lambda args: assignments_command(*args), runs)
    assert skipped.returncode == 1, skipped.stdout[-3000:]
    assert crashed.returncode == 1, crashed.stdout[-3000:]
    three, nine = visible_results(tmp_path / "skip.json")[3], visible_results(tmp_path / "quit.json")[9]
    assert three["score"] == 0 and ": did not run: skipped (not today)" in three["output"], three
    assert nine["score"] == 0 and ": crashed the grader: the test process ended" in nine["output"], nine
    assert "Exercise 3: 0 of" in skipped.stdout and "Exercise 9: 0 of" in crashed.stdout


def test_the_marker_rule_is_the_same_for_the_students_check_and_for_grading():
    """A blank line between a marker and its def: the student copy blanks that function, grading splices it, the
    student's own `grade` checks it, all by one rule (marker_lines); a marker above no def stops `grade` in one
    line, as it would make grading miss the function."""
    source = "import random\n\n\n# Exercise 3 (ASSIGNMENTS.md)\n\ndef f(words):\n    \"\"\"Doc.\"\"\"\n    return words\n"
    assert assignments.marked_spans(source) == {(3, "f"): (6, 8)}
    assert "raise NotImplementedError('Exercise 3: see ASSIGNMENTS.md')" in assignments.blank(source, {3})
    theirs = source.replace("return words", "return words[:1]")
    assert "return words[:1]" in assignments.spliced(source, theirs, {3}, "x.py")
    with pytest.raises(ValueError, match="an exercise marker must sit above a def"):
        assignments.marked_spans(source.replace("def f(words):", "x = 1\ndef f(words):"))
