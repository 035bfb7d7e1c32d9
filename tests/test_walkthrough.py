"""The walkthrough stays true (issues 47 and 53): docs/walkthrough.py (jupytext's percent format, the reviewed
source) runs from a fresh kernel, its asserts checking the numbers it states (the vectors equal transformers', the
decoder's weights are the encoder's but for the cross-attention, the per-token terms average to TSDAELoss, the
decoder reads nothing of the encoder's but the vector, the adversarial view raises NT-Xent; after the full
training, the rebuilt sentences share content words with their own); and the committed docs/walkthrough.ipynb is
that source, run: the same cells, each with its outputs, in one run from top to bottom, the TSDAE section's
reconstructions and the domain claim's learning curve among them, small enough to read on the repository's web
page, its run time and size as the README states them.

Rebuild the notebook after editing the source: `make walkthrough-build`.
"""
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from conftest import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent
SOURCE, NOTEBOOK = ROOT / "docs" / "walkthrough.py", ROOT / "docs" / "walkthrough.ipynb"
MAX_BYTES = 1_000_000  # the committed notebook, outputs and figures included
MIN_FIGURES = 8


def cells(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def test_the_committed_notebook_is_the_source_run():
    committed = nbformat.read(NOTEBOOK, as_version=4)
    source = jupytext.read(SOURCE)
    theirs, ours = cells(committed), cells(source)
    stale = [i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b]
    assert len(theirs) == len(ours) and not stale, (
        f"docs/walkthrough.ipynb is not docs/walkthrough.py: {len(theirs)} cells against {len(ours)}, first "
        f"different cell {stale[:1] or 'past the shorter'}; rebuild it with `make walkthrough-build`")
    code = [cell for cell in committed.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"the notebook's cells were not run once, top to bottom, in one kernel (execution counts {counts})")
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"a committed cell ends in an error: {errors[0].ename}: {errors[0].evalue}"
    text = "".join(o.get("text", "") for cell in code for o in cell.outputs)
    assert "quick: False" in text, "the committed notebook is a quick run (WALKTHROUGH_QUICK): rebuild it"
    assert "sharing a content word with it" in text, "no reconstructions shown"
    assert "scored at steps" in text, "the domain claim's learning curve is missing (docs/domain_claim/scores/)"
    figures = sum("image/png" in o.get("data", {}) for cell in code for o in cell.outputs)
    assert figures >= MIN_FIGURES, f"the notebook shows {figures} figures; the walkthrough promises {MIN_FIGURES}"
    size = NOTEBOOK.stat().st_size
    assert size < MAX_BYTES, f"docs/walkthrough.ipynb is {size} bytes; keep its figures small (dpi)"
    seconds = re.search(r"the whole notebook: (\d+) s", "".join(o.get("text", "") for o in code[-1].outputs))[1]
    stated = f"{seconds} s on 2 CPU cores, {round(size / 1000)} KB)"
    assert stated in (ROOT / "README.md").read_text(encoding="utf-8"), f"the README should say: {stated}"


def test_the_walkthrough_runs_from_a_fresh_kernel(monkeypatch):
    """Every cell of the source, in a new kernel, with fewer training steps (WALKTHROUGH_QUICK); a cell that raises,
    one of its asserts included, fails here with its traceback."""
    if not (DATA_DIR / "stsbenchmark").is_dir():
        pytest.skip(f"section 7 reads the STS benchmark, not in {DATA_DIR} (python evaluate.py --fetch-data data)")
    monkeypatch.setenv("WALKTHROUGH_QUICK", "1")  # the kernel inherits this process's environment
    monkeypatch.setenv("EVAL_DATA_DIR", str(DATA_DIR))
    notebook = jupytext.read(SOURCE)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "docs")}})
    try:
        client.execute()
    except CellExecutionError as err:
        pytest.fail(f"docs/walkthrough.py failed in a fresh kernel:\n{err}", pytrace=False)
    ran = [cell.execution_count for cell in notebook.cells if cell.cell_type == "code"]
    assert None not in ran and len(ran) > 10, f"not every cell ran: execution counts {ran}"
