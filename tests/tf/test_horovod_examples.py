"""Horovod TF2 scripts on blinkflow, at 2 ranks.

- horovod_examples_script.py's cases (a job of tf_jobs.py): our script in the idioms of Horovod's
  examples, ported by ``horovod_port.port`` alone, and the ports in examples/horovod/ (the
  README's commands) as they are, capped to fewer steps and epochs.
- Horovod's own examples/tensorflow2 scripts (the four of the README), ported by
  ``horovod_port.port`` alone, each in a launch of its own. The repository does not hold
  Horovod's files and horovod's sdist on PyPI has no examples/, so they run where
  ``BLINKFLOW_TEST_HOROVOD_EXAMPLES`` names a folder holding them (a Horovod checkout's
  examples/tensorflow2) and are skipped, saying so, elsewhere.
"""
import os
import re

import pytest

import tf_jobs
from harness import assert_done, run_ranks
from horovod_port import BENCHMARK_ARGS, port

pytest.importorskip("tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))
PORT = os.path.join(HERE, "horovod_port.py")
IDIOMS = os.path.join(HERE, "horovod_idioms_script.py")
HOROVOD_EXAMPLES = os.environ.get("BLINKFLOW_TEST_HOROVOD_EXAMPLES", "")


def _only_the_port_changed(changes):
    """Every changed line is an import of Horovod or the compile keyword Keras 3 removed."""
    for number, before, after in changes:
        imports = re.match(r"\s*(import|from) horovod\b", before) and re.match(r"\s*(import|from) blinkflow\b", after)
        keyword = "experimental_run_tf_function" in before and before.replace(" ", "").replace("\n", "").replace(
            ",experimental_run_tf_function=False", "") == after.replace(" ", "").replace("\n", "")
        assert imports or keyword, f"line {number}: {before!r} -> {after!r} is not part of the port"


def test_the_port_changes_only_imports_and_the_keras2_keyword():
    with open(IDIOMS) as f:
        text = f.read()
    ported, changes = port(text)
    _only_the_port_changed(changes)
    assert len(changes) == 3, changes  # two import lines and one compile call
    assert not re.search(r"^\s*(import|from) horovod\b", ported, re.M) and "experimental_run_tf_function=" not in ported
    assert port("import horovod")[0] == "import blinkflow as horovod"
    assert port("    import horovod.keras as hvd  # note")[0] == "    import blinkflow.keras as hvd  # note"
    assert port("model.compile(loss='mse', experimental_run_tf_function=False)")[0] == "model.compile(loss='mse')"
    assert port("# `experimental_run_tf_function=False` in a comment stays")[1] == []


@pytest.mark.mpi
@pytest.mark.parametrize("job, case", tf_jobs.params("horovod_examples_script.py"))
def test_horovod_scripts_run(job, case):
    tf_jobs.expect(job, "horovod_examples_script.py", case)


def _horovods(name):
    if not HOROVOD_EXAMPLES:
        pytest.skip("Horovod's examples are not in this repository and horovod's sdist on PyPI has no examples/: "
                    "set BLINKFLOW_TEST_HOROVOD_EXAMPLES to a Horovod checkout's examples/tensorflow2 to run them")
    path = os.path.join(HOROVOD_EXAMPLES, name)
    if not os.path.isfile(path):
        pytest.skip(f"BLINKFLOW_TEST_HOROVOD_EXAMPLES={HOROVOD_EXAMPLES} holds no {name}")
    with open(path) as f:
        _only_the_port_changed(port(f.read())[1])
    return path


@pytest.mark.mpi
@pytest.mark.parametrize("script, capped, extra", [
    ("tensorflow2_mnist.py", ["21", "1"], []),
    ("tensorflow2_keras_mnist.py", ["12", "2"], []),
    ("tensorflow2_synthetic_benchmark.py", ["0", "0"], BENCHMARK_ARGS + ["--num-warmup-batches", "1"]),
    ("tensorflow2_keras_synthetic_benchmark.py", ["0", "0"], BENCHMARK_ARGS)])
def test_horovods_own_examples_run_with_the_port_alone(tmp_path, script, capped, extra):
    path = _horovods(script)
    out = assert_done(run_ranks(2, ["python", PORT] + capped + [path] + extra, timeout=500, cwd=str(tmp_path)), 2)
    if "benchmark" in script:
        assert re.search(r"Total img/sec on 2 CPU\(s\): [0-9.]+", out), out[-2000:]
    elif script == "tensorflow2_mnist.py":
        losses = [float(x) for x in re.findall(r"Loss: ([0-9.]+)", out)]
        assert len(losses) == 3 and losses[-1] < losses[0], losses
    else:
        assert sorted(os.listdir(tmp_path)) == ["checkpoint-1.h5", "checkpoint-2.h5"], os.listdir(tmp_path)
