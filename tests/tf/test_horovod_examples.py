"""Horovod's examples/tensorflow2 scripts, ported with only their import line, generated MNIST
(instead of a download) and the Keras 3 spellings the README lists (examples/horovod/), run at 2
ranks. The MNIST ones run through run_capped.py (fewer steps and epochs, the script untouched);
the benchmarks take a small model from their own command line."""
import os
import re

import pytest

from harness import assert_done, run_ranks

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "horovod")
CAPPED = os.path.join(HERE, "run_capped.py")


def _example(name):
    return os.path.join(EXAMPLES, name)


@pytest.mark.mpi
def test_tensorflow2_mnist_custom_loop(tmp_path):
    out = assert_done(run_ranks(2, ["python", CAPPED, "21", "1", _example("tensorflow2_mnist.py")], timeout=400,
                                cwd=str(tmp_path)), 2)
    losses = [float(x) for x in re.findall(r"Loss: ([0-9.]+)", out)]
    assert len(losses) == 3 and losses[-1] < losses[0], losses  # steps 0, 10, 20 on rank 0 only
    assert any(f.startswith("checkpoints") for f in os.listdir(tmp_path)), os.listdir(tmp_path)


@pytest.mark.mpi
def test_tensorflow2_keras_mnist_fit(tmp_path):
    out = assert_done(run_ranks(2, ["python", CAPPED, "12", "2", _example("tensorflow2_keras_mnist.py")],
                                timeout=400, cwd=str(tmp_path)), 2)
    assert out.count("Epoch 1/2") == 1, out[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-1.keras", "checkpoint-2.keras"], os.listdir(tmp_path)


@pytest.mark.mpi
@pytest.mark.parametrize("script, extra", [("tensorflow2_synthetic_benchmark.py", ["--num-warmup-batches", "1"]),
                                           ("tensorflow2_keras_synthetic_benchmark.py", [])])
def test_tensorflow2_synthetic_benchmarks(script, extra):
    args = ["--model", "MobileNetV2", "--batch-size", "2", "--num-batches-per-iter", "2", "--num-iters", "2",
            "--no-cuda"] + extra
    out = run_ranks(2, ["python", _example(script)] + args, timeout=400).stdout
    assert re.search(r"Total img/sec on 2 CPU\(s\): [0-9.]+", out), out[-2000:]
