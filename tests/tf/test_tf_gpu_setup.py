"""``blinkflow.tensorflow.init()`` sets TensorFlow's GPUs up for the job: shown the rank's GPU
only, and growing its memory when the cuda backend needs room. The decisions are checked against
a stand-in for TF's device API (this machine has no GPU); the real TensorFlow, which sees none,
must come through init() untouched."""
import subprocess
import sys
import types

import pytest

from blinkflow.config import Config
from blinkflow.tensorflow.gpu_setup import setup_tf_gpus


class DeviceApi:
    """``tf.config``'s GPU calls over ``n`` GPUs; once ``initialised`` TF refuses changes, as the
    real one does with a RuntimeError."""

    def __init__(self, n, initialised=False):
        self.gpus = [types.SimpleNamespace(name=f"/physical_device:GPU:{i}") for i in range(n)]
        self.initialised, self.visible, self.growth = initialised, None, set()
        self.config = types.SimpleNamespace(list_physical_devices=lambda kind: list(self.gpus),
                                            set_visible_devices=self._visible,
                                            experimental=types.SimpleNamespace(get_memory_growth=self._get,
                                                                               set_memory_growth=self._grow))

    def _refuse(self):
        if self.initialised:
            raise RuntimeError("Physical devices cannot be modified after being initialized")

    def _visible(self, device, kind):
        self._refuse()
        self.visible = device.name

    def _get(self, device):
        return device.name in self.growth

    def _grow(self, device, on):
        self._refuse()
        self.growth.add(device.name)


def test_cuda_backend_makes_tf_grow_and_shows_the_rank_its_gpu():
    tf = DeviceApi(4)
    lines = setup_tf_gpus(tf, Config(), local_rank=2, cupy_sees_gpu=True)
    assert tf.visible == "/physical_device:GPU:2" and len(tf.growth) == 4
    assert len(lines) == 2 and "grows its GPU memory" in lines[1]


@pytest.mark.parametrize("config, cuda, growth", [
    (Config(tf_memory_growth=0), True, False),   # the documented opt-out
    (Config(backend="cpu"), True, False),        # GPU tensors go through the host: TF may keep its memory
    (Config(), False, False),                    # no CuPy/device for the cuda backend
    (Config(), True, True),
])
def test_memory_growth_only_with_the_cuda_backend(config, cuda, growth):
    tf = DeviceApi(1)
    setup_tf_gpus(tf, config, local_rank=0, cupy_sees_gpu=cuda)
    assert bool(tf.growth) == growth
    assert tf.visible is None   # one GPU: nothing to choose


def test_pin_gpus_0_and_ranks_beyond_the_gpus_leave_tf_devices_alone():
    tf = DeviceApi(2)
    setup_tf_gpus(tf, Config(pin_gpus=0), local_rank=1, cupy_sees_gpu=False)
    setup_tf_gpus(tf, Config(), local_rank=2, cupy_sees_gpu=False)
    assert tf.visible is None


def test_tf_already_initialised_is_said_not_raised():
    tf = DeviceApi(2, initialised=True)
    lines = setup_tf_gpus(tf, Config(), local_rank=1, cupy_sees_gpu=True)
    assert len(lines) == 2 and all("before blinkflow.init()" in line for line in lines)
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true" in lines[1]


def test_real_tensorflow_without_a_gpu_comes_through_init():
    script = ("import tensorflow as tf, blinkflow.tensorflow as hvd\n"
              "from blinkflow.tensorflow import gpu_setup\n"
              "hvd.init()\n"
              "assert tf.config.list_physical_devices('GPU') == []\n"
              "assert gpu_setup.prepare() == []\n"
              "print('ok', hvd.rank(), hvd.size(), float(hvd.allreduce(tf.constant(2.0))))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["ok", "0", "1", "2.0"]
