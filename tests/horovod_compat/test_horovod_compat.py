"""Horovod 0.28.1's own TensorFlow test files run on blinkflow (run.py) at 2 and 3 ranks: every
file runs to its end (no unit hangs) and at least 95 % of the units that do not depend on Keras 2,
Horovod's internals or a GPU pass.

The files come from horovod's sdist on PyPI when it carries them, else from the Horovod checkout
named by ``HOROVOD_TEST_DIR`` (its ``test`` folder); without either the test is skipped, saying so.
"""
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sources  # noqa: E402

pytest.importorskip("tensorflow")
pytest.importorskip("parameterized")  # Horovod's test_tensorflow2_keras.py imports it
pytest.importorskip("mock")           # and its test/utils/common.py these two
pytest.importorskip("cloudpickle")


def _tests_dir(workdir: str) -> str:
    given = os.environ.get("HOROVOD_TEST_DIR")
    if given:
        return sources.test_dir(given)
    try:
        return sources.from_sdist(workdir)
    except sources.Unavailable as error:
        pytest.skip(f"{error}; or set HOROVOD_TEST_DIR to a Horovod v{sources.VERSION} checkout's test folder")


@pytest.mark.slow
@pytest.mark.mpi
def test_horovod_tensorflow_test_files_pass_at_2_and_3_ranks():
    with tempfile.TemporaryDirectory() as workdir:
        tests_dir = _tests_dir(workdir)
        proc = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), "--tests", tests_dir, "--np", "2", "3"],
                              capture_output=True, text=True, timeout=3 * 3600)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, f"a unit hung or the run failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    share = float(summary.split("(")[1].split(" %")[0])
    assert share >= 95.0, proc.stdout[-8000:]
