# Everything a fresh machine with only python3 and pip needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[tf,test]'
	touch $(STAMP)

install: $(STAMP)

# The main job.
demo: $(STAMP)
	$(BIN)/blinkrun topo --preset dgx1-v100

# Unit, multi-process (mpirun at 1, 2 and 4 ranks) and GPU tests (skipped without a GPU).
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

clean:
	rm -rf $(VENV) build *.egg-info
