"""The documents run (issue 44): every ```python block of a learner's documents is executed, and every `python
FILE.py ...` command in them is parsed by FILE's own parser, so a renamed flag or function fails here, each case
named by its document and line (test_command_parses[README.md:48]).

What a document may write, and how it is read:
  python blocks   each runs on its own, in a fresh namespace, with the working directory a temporary folder laid
                  out as a clone after the README's commands: examples/ and data/ (the evaluation data, as
                  $EVAL_DATA_DIR) are the repository's, runs/tsdae-topics is a 2-step TSDAE run of the tiny test
                  model (made once per session).
  commands        `python FILE.py ARGS`, `python -m MODULE ARGS`, `torchrun ... FILE.py ARGS` and `python -c CODE`,
                  in ```bash blocks (a line continued with \\ is one command) and in `inline code`; an environment
                  prefix (OMP_NUM_THREADS=1), a pipe, a redirection and a # comment are dropped. FILE is imported
                  and its make_parser() (or the module it hands over to with runpy.run_module: tsdae.py ->
                  commands.tsdae_train) parses ARGS, through the module's parse_args when it has one (its range checks
                  too); a subcommand's flags are its parser's (assignments.py grade --student), and the flags a script
                  hands on to another are the other's parser's (HANDS_ON: bench/corpus.py -> tsdae.py).
                  `python -c CODE` runs CODE's imports only.
  names           `inline code` naming this repository's module.attribute (lib.selection.HeldOut, lib.corpus.hold_out)
                  must resolve, and a path into one of its folders (lib/download.py, tests/test_useb.py) must exist.
  placeholders    `[--flag X]` is given, `a|b` is a; a one-letter capital (N, B) is the number 2; other capitals
                  (DIR, FILE, MINI, $MINI) are strings, as argparse takes them; a command with `...` in it is
                  elided: only its flags are checked to exist. A capitalised script (X.py) and a module that is not
                  this repository's (python -m pytest) are skipped, as is a script without make_parser(), each
                  with its reason.
"""
import argparse
import ast
import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import torch

from conftest import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")), "LABS.md",
        "ASSIGNMENTS.md", "examples/EXPERIMENTS.md"]
COMMAND_DOCS = [*DOCS, "bench/README.md"]  # bench's figures are not run here; its commands are parsed

# The run the blocks may load, made as the README makes it but on the tiny model and for 2 steps.
TSDAE_RUN = ["tsdae.py", "--corpus", "examples/topics.txt", "--pooling", "mean", "--steps", "2", "--batch-size", "4"]


@dataclass
class Block:
    doc: str
    line: int  # of the block's first line of code
    language: str
    code: str


def blocks(doc: str) -> tuple[list[Block], str]:
    """The fenced blocks of a markdown file, and its prose: the text with every fenced line blanked (so that a
    line number in the prose is the file's)."""
    found, prose, fence = [], [], None
    for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), start=1):
        if fence is None and line.startswith("```"):
            fence = Block(doc, number + 1, line[3:].strip(), "")
            prose.append("")
        elif fence is not None and line.strip() == "```":
            found.append(fence)
            fence = None
            prose.append("")
        elif fence is not None:
            fence.code += line + "\n"
            prose.append("")
        else:
            prose.append(line)
    assert fence is None, f"{doc}:{fence.line - 1}: a ``` block that is never closed"
    return found, "\n".join(prose)


# ----------------------------------------------------------------------------
# The python blocks

PYTHON_BLOCKS = [b for doc in DOCS for b in blocks(doc)[0] if b.language == "python"]


@pytest.fixture(scope="session")
def tsdae_topics_run(tmp_path_factory, tiny_model_dir) -> Path:
    out = tmp_path_factory.mktemp("runs") / "tsdae-topics"
    result = subprocess.run([sys.executable, *TSDAE_RUN, "--model", str(tiny_model_dir), "--out", str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, f"the documents' TSDAE run failed: {' '.join(TSDAE_RUN)}\n{result.stderr[-2000:]}"
    return out


@pytest.fixture
def learner_clone(tmp_path, tsdae_topics_run, monkeypatch) -> Iterator[Path]:
    """The working directory of a block: a clone after the README's commands, in a folder of its own."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "data").symlink_to(DATA_DIR)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "tsdae-topics").symlink_to(tsdae_topics_run)
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model's small matrices: 13x faster than 2 threads on a busy 2-core machine
    yield tmp_path
    torch.set_num_threads(threads)


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"{b.doc}:{b.line}" for b in PYTHON_BLOCKS])
def test_python_block_runs(block, learner_clone):
    # compiled as the document's own lines, so that a traceback names the document and its line
    code = compile("\n" * (block.line - 1) + block.code, str(ROOT / block.doc), "exec")
    exec(code, {"__name__": "__main__"})


# ----------------------------------------------------------------------------
# The commands

@dataclass
class Command:
    where: str  # doc:line
    text: str  # as the document writes it (continuations joined)
    script: str = ""  # a path from the repository root, or "" for python -c
    args: tuple[str, ...] = ()
    code: str = ""  # python -c CODE
    elided: bool = False  # written with ...: only its flags are checked
    skip: str = ""  # why it is not checked

    def __str__(self):
        return self.where


SEPARATORS = {"|", "||", "&&", ";", "&"}


def commands_in(text: str, where: str) -> list[Command]:
    """The python commands of one shell line (or one inline code span)."""
    text = re.sub(r"\d*>&\d+", " ", text)  # 2>&1
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # an unmatched quote: not a command line
        return []
    segments, segment, words = [], [], iter(words)
    for word in words:
        if word in SEPARATORS:
            segments.append(segment)
            segment = []
        elif re.match(r"\d*[<>]", word):  # a redirection: the operator and its file
            if re.fullmatch(r"\d*[<>]+", word):
                next(words, None)
        else:
            segment.append(word)
    segments.append(segment)
    found = []
    for words in segments:
        while words and re.fullmatch(r"\w+=\S*", words[0]):  # OMP_NUM_THREADS=1 python ...
            words = words[1:]
        if len(words) < 2 or words[0] not in ("python", "python3", "torchrun"):
            continue
        if words[0] == "torchrun":  # torchrun's own flags up to the script
            scripts = [i for i, w in enumerate(words) if w.endswith(".py")]
            if not scripts:
                continue
            words = ["python", *words[scripts[0]:]]
        found.append(command(words[1:], where, text.strip()))
    return found


def command(words: list[str], where: str, text: str) -> Command:
    c = Command(where, text)
    if words[0] == "-c":
        c.code = words[1] if len(words) > 1 else ""
        return c
    if words[0] == "-m":
        module, words = (words[1] if len(words) > 1 else ""), words[1:]
        c.script = module.replace(".", "/") + ".py"
        if not (ROOT / c.script).is_file():
            c.skip = f"python -m {module}: not this repository's module"
    else:
        c.script = words[0]
    if re.fullmatch(r"[A-Z_]+\.py", Path(c.script).name):
        c.skip = f"{c.script}: a placeholder for a script"
    args = []
    for word in words[1:]:
        if word == "..." or word.endswith("..."):
            c.elided = True
            break
        if re.fullmatch(r"\[?[\w.\-:/,=]+(\|[\w.\-:/,=]+)+\]?", word):  # cls|mean|max: the first
            word = word.split("|")[0]
        word = word.strip("[]")  # [--pooling last2-mean]: given
        if re.fullmatch(r"[A-Z]", word):  # --batch-size B, grade N
            word = "2"
        if word:
            args.append(word)
    c.args = tuple(args)
    return c


def doc_commands(doc: str) -> list[Command]:
    found, prose = blocks(doc)
    commands = []
    for block in found:
        if block.language not in ("bash", "sh", "shell", ""):
            continue
        lines = block.code.splitlines()
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].lstrip()
            commands += commands_in(line, f"{doc}:{block.line + start}")
            i += 1
    for span in re.finditer(r"`([^`]+)`", prose):
        if "\n\n" in span.group(1) or not re.search(r"\b(python3?|torchrun)\b", span.group(1)):
            continue
        line = prose.count("\n", 0, span.start()) + 1
        for c in commands_in(span.group(1).replace("\n", " "), f"{doc}:{line}"):
            c.elided = c.elided or not c.args  # `python finetune.py` in a sentence names the script
            commands.append(c)
    return commands


COMMANDS = [c for doc in COMMAND_DOCS for c in doc_commands(doc)]


def command_ids() -> list[str]:
    seen, ids = {}, []
    for c in COMMANDS:
        seen[c.where] = seen.get(c.where, 0) + 1
        ids.append(c.where if seen[c.where] == 1 else f"{c.where}#{seen[c.where]}")
    return ids


def script_module(script: str, monkeypatch):
    """The module a script's parser lives in: the script itself, or the one it hands over to; imported as
    `python script` runs it (its folder first on sys.path, sys.argv[0] its name, so its parser's prog is)."""
    monkeypatch.syspath_prepend(str((ROOT / script).parent))
    monkeypatch.setattr(sys, "argv", [script])
    path = ROOT / script
    source = path.read_text(encoding="utf-8")
    handed_over = re.search(r"""runpy\.run_module\(["'](\w+(?:\.\w+)*)["']""", source)
    if "make_parser" not in source and handed_over:
        return importlib.import_module(handed_over.group(1))
    if "make_parser" not in source:
        return None
    parts = path.relative_to(ROOT).with_suffix("").parts
    if len(parts) == 1 or (ROOT / parts[0] / "__init__.py").is_file():
        return importlib.import_module(".".join(parts))
    spec = importlib.util.spec_from_file_location("docs_" + "_".join(parts), path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # as import does (a dataclass looks itself up there)
    spec.loader.exec_module(module)
    return module


# The scripts that hand the flags their parser does not know on to another script, which parses them.
HANDS_ON = {"bench/corpus.py": "tsdae.py"}


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Its flags and its subcommands' (grade --student: a subcommand parses its own flags)."""
    subcommands = [a.choices.values() for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(parser._option_string_actions).union(*(option_strings(p) for ps in subcommands for p in ps))


@pytest.mark.parametrize("c", COMMANDS, ids=command_ids())
def test_command_parses(c, capsys, monkeypatch):
    if c.skip:
        pytest.skip(c.skip)
    if c.script == "":  # python -c: its imports, each name it takes from the repository
        tree = ast.parse(c.code)
        imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert imports, f"{c.where}: python -c imports nothing from the repository: {c.text}"
        exec(compile(ast.Module(body=imports, type_ignores=[]), c.where, "exec"), {})
        return
    if not (ROOT / c.script).is_file():
        pytest.fail(f"{c.where}: {c.text}\n  {c.script} does not exist", pytrace=False)
    module = script_module(c.script, monkeypatch)
    if module is None:
        pytest.skip(f"{c.script} has no make_parser()")
    parser = module.make_parser()
    known = option_strings(parser)
    if c.script in HANDS_ON:  # its parser leaves them to the other's (allow_abbrev=False: no abbreviation is its)
        known |= option_strings(script_module(HANDS_ON[c.script], monkeypatch).make_parser())
    flags = [w.split("=")[0] for w in c.args if w.startswith("-") and not re.fullmatch(r"-\d.*", w)]
    unknown = [flag for flag in flags if flag not in known]  # nor an abbreviation
    if unknown:
        pytest.fail(f"{c.where}: {c.text}\n  {c.script} has no {', '.join(unknown)}", pytrace=False)
    if c.elided:
        return
    parse = getattr(module, "parse_args", parser.parse_known_args if c.script in HANDS_ON else parser.parse_args)
    try:
        parse(list(c.args))
        error = None
    except SystemExit as e:  # argparse's error (2), or --help (0)
        error = e.code and (capsys.readouterr().err.strip().splitlines() or [str(e.code)])[-1]
    if error:
        pytest.fail(f"{c.where}: {c.text}\n  {error}", pytrace=False)


def test_the_documents_have_blocks_and_commands():
    """The reader above finds what it is for (a broken fence or span reader would pass every case above by
    finding none)."""
    assert len(PYTHON_BLOCKS) >= 3
    assert {c.where.split(":")[0] for c in COMMANDS} >= {"README.md", "LABS.md", "ASSIGNMENTS.md", "bench/README.md"}
    readme = {c.where: c for c in COMMANDS if c.where.startswith("README.md")}
    assert any(c.script == "tsdae.py" and "--corpus" in c.args for c in readme.values())


# ----------------------------------------------------------------------------
# The names

PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())  # lib, speedups, ...
COMMANDS_MODULES = sorted(p.stem for p in ROOT.glob("commands/*.py") if p.stem != "__init__")  # tsdae_train, ...
MODULES = sorted(p.stem for p in ROOT.glob("*.py")) + COMMANDS_MODULES  # train, evaluate, ..., tsdae_train, ...
FOLDERS = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
FILE_TYPES = ("py", "sh", "md", "txt", "tsv", "json", "jsonl", "csv", "png", "zip", "gz", "yaml", "toml")


def names_in(doc: str) -> list[tuple[int, str]]:
    """(line, name) for each module.attribute of this repository and each path into its folders, in `inline
    code` and in the python blocks."""
    found, prose = blocks(doc)
    texts = [(0, prose)] + [(b.line - 1, b.code) for b in found if b.language == "python"]
    module = r"(?:(?:{})\.\w+|{})".format("|".join(PACKAGES), "|".join(MODULES))
    names = []
    for offset, text in texts:
        for span in re.finditer(r"`[^`]+`" if offset == 0 else r"[^\n]+", text):
            line = offset + text.count("\n", 0, span.start()) + 1
            for name in re.findall(rf"(?<![\w./-])({module}(?:\.\w+)+|(?:{'|'.join(FOLDERS)})/[\w./-]*\w)",
                                   span.group(0)):
                if name.rsplit(".", 1)[-1] not in FILE_TYPES or "/" in name:
                    names.append((line, name))
    return names


def missing(name: str) -> bool:
    if "/" in name:  # a path of the repository; runs/ and data/ hold what the commands write, not what git keeps
        return name.split("/")[0] not in ("runs", "data") and not (ROOT / name).exists()
    parts = name.split(".")
    for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
        prefix = ".".join(parts[:i])
        try:  # tsdae_train.main names commands/tsdae_train.py's main
            obj = importlib.import_module(f"commands.{prefix}" if parts[0] in COMMANDS_MODULES else prefix)
        except ModuleNotFoundError:
            continue
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return True
            obj = getattr(obj, attribute)
        return False
    return True


@pytest.mark.parametrize("doc", COMMAND_DOCS)
def test_named_code_exists(doc):
    gone = [f"{doc}:{line}: {name}" for line, name in names_in(doc) if missing(name)]
    assert not gone, "the documents name what is not in the repository:\n" + "\n".join(gone)


def test_the_readmes_words_on_early_stopping_plain_and_micro_batch_hold():
    """README: with --eval-task ConSERT alone stops early (--patience; TSDAE trains every step); --plain in TSDAE,
    ConSERT and the masked-LM baseline, none in fine-tuning (no fast path); --micro-batch is the cached gradient in
    ConSERT and fine-tuning, parts weighted by their share of the tokens in TSDAE and masked-LM."""
    from baselines import mlm
    from commands import consert_train, finetune_train, tsdae_train

    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "ConSERT alone stops early, by `--patience`" in readme \
        and "fine-tuning has no fast path and no `--plain`" in readme
    parsers = {name: module.make_parser() for name, module in
               (("tsdae", tsdae_train), ("consert", consert_train), ("finetune", finetune_train), ("mlm", mlm))}
    flags = {name: set(parser._option_string_actions) for name, parser in parsers.items()}
    assert [name for name in parsers if "--patience" in flags[name]] == ["consert"]
    assert [name for name in parsers if "--plain" not in flags[name]] == ["finetune"]
    micro = {name: parser._option_string_actions["--micro-batch"].help for name, parser in parsers.items()}
    assert {name for name, text in micro.items() if "cached gradient" in text} == {"consert", "finetune"}
    assert all("share of the" in micro[name] for name in ("tsdae", "mlm"))
