"""examples/horovod holds Horovod 0.28.1's examples/tensorflow2 scripts changed only by the port:
the import lines, MNIST made by mnist_data.py where Horovod downloads it, and the compile keyword
Keras 3 removed; every changed line carries its original, so the original file comes back byte for
byte and is checked against Horovod's git blob id of that file at tag v0.28.1."""
import hashlib
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "tf"))
from horovod_port import example_original, example_port  # noqa: E402

#: `git ls-tree v0.28.1 examples/tensorflow2/` of github.com/horovod/horovod.
HOROVOD_0_28_1 = {
    "tensorflow2_keras_mnist.py": "167aafb30598fafc8e003316f66bc2c5ee5eedc6",
    "tensorflow2_keras_synthetic_benchmark.py": "543c9dc3eb856c6ca107adaf693895283a1941fd",
    "tensorflow2_mnist.py": "51cf096f69115872fa2cea97bb365fdab9e803cf",
    "tensorflow2_synthetic_benchmark.py": "050aa27bb45a0e4e7ab327f215f6fd3f29dae3e1",
}


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("name", sorted(HOROVOD_0_28_1))
def test_the_example_is_horovods_file_changed_by_the_port_alone(name):
    with open(os.path.join(ROOT, "examples", "horovod", name)) as f:
        ported = f.read()
    original = example_original(ported)
    assert _git_blob_id(original.encode()) == HOROVOD_0_28_1[name], \
        f"examples/horovod/{name} without its marked changes is not Horovod 0.28.1's file"
    assert example_port(original) == ported, f"examples/horovod/{name} has changes the port does not make"


def test_a_change_without_its_mark_is_caught():
    with open(os.path.join(ROOT, "examples", "horovod", "tensorflow2_mnist.py")) as f:
        ported = f.read()
    edited = ported.replace("opt.variables()", "opt.variables", 1)
    assert edited != ported
    assert _git_blob_id(example_original(edited).encode()) != HOROVOD_0_28_1["tensorflow2_mnist.py"]


def test_the_compile_keyword_on_its_own_line_round_trips():
    text = "    model.compile(loss='mse',\n                  experimental_run_tf_function=False)\n"
    ported = example_port(text)
    assert "experimental_run_tf_function" not in ported.split("  # blinkflow port")[0]
    assert ported.split("  #")[0] == "    model.compile(loss='mse')"
    assert example_original(ported) == text
