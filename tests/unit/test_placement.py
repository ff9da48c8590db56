"""Host or device (blinkflow/placement.py), the one place that decides it: the setting against
where the data lives, for TF tensors (by their device strings) and for arrays handed to the
runtime; a GPU array under BLINKFLOW_BACKEND=cpu is refused as a call this rank refuses."""
import numpy as np
import pytest

from blinkflow import placement
from blinkflow.config import Config
from blinkflow.errors import InvalidArgumentError
from blinkflow.runtime import arguments


class Tensor:
    """What the crossing reads of a TF tensor to place it: its device string."""

    def __init__(self, device):
        self.device = device


class GpuArray:
    """An array in GPU memory, as blinkflow.arrays recognises one."""
    __cuda_array_interface__ = {"version": 3, "shape": (2,), "typestr": "<f4", "data": (256, False)}


@pytest.fixture
def setting(monkeypatch):
    def use(backend, cupy_sees_gpu):
        monkeypatch.setattr(placement, "get_config", lambda: Config(backend=backend))
        monkeypatch.setattr(placement, "_possible", {})
        monkeypatch.setattr("blinkflow.backends.cuda.device.is_available", lambda: cupy_sees_gpu)
    return use


@pytest.mark.parametrize("backend, cupy_sees_gpu, devices, want", [
    ("auto", True, ["/job:localhost/device:GPU:0", "/device:CPU:0"], "cuda"),  # one GPU tensor takes the call
    ("auto", True, ["/device:CPU:0"], "cpu"),
    ("auto", False, ["/device:GPU:0"], "cpu"),       # no CuPy device: TF's GPU tensors go through the host
    ("cuda", True, ["/device:CPU:0"], "cuda"),       # forced: TF places the host tensor on the GPU first
    ("cuda", False, ["/device:CPU:0"], "cuda"),      # forced without a GPU: the cuda backend's typed error later
    ("cpu", True, ["/device:GPU:0"], "cpu"),
])
def test_a_calls_tensors_go_one_way(setting, backend, cupy_sees_gpu, devices, want):
    setting(backend, cupy_sees_gpu)
    assert placement.of_tensors([Tensor(d) for d in devices]) == want


@pytest.mark.parametrize("backend", ["auto", "cuda"])
def test_arrays_are_placed_where_they_live(setting, backend):
    setting(backend, True)
    assert placement.of_array(np.ones(2)) == "cpu"
    assert placement.of_array(GpuArray()) == "cuda"


def test_a_gpu_array_under_the_cpu_setting_is_refused_at_the_call(setting):
    """Refused where the arguments are checked (so the call still travels as a refusal and every
    rank fails alike), not on the background thread when a backend is made."""
    setting("cpu", True)
    with pytest.raises(InvalidArgumentError, match="BLINKFLOW_BACKEND=cpu"):
        arguments.as_array(GpuArray())
    assert arguments.as_array(np.ones(2, np.float32))[1] == "cpu"


@pytest.mark.parametrize("backend, cupy_sees_gpu, usable", [
    ("auto", True, True), ("cuda", True, True), ("cpu", True, False), ("auto", False, False)])
def test_the_cuda_backend_is_usable_only_where_cupy_sees_a_gpu_and_the_setting_allows(backend, cupy_sees_gpu, usable):
    assert placement.cuda_usable(Config(backend=backend), cupy_sees_gpu) is usable


def test_an_xla_call_is_on_the_device_when_xla_hands_it_a_stream(setting):
    setting("auto", True)
    assert placement.of_xla_call(0) == "cpu"
    assert placement.of_xla_call(0x7F00) == "cuda"
    setting("cpu", True)
    assert placement.of_xla_call(0) == "cpu"
    with pytest.raises(InvalidArgumentError, match="jit_compile=False"):
        placement.of_xla_call(0x7F00)


def test_a_new_configuration_is_placed_afresh(monkeypatch):
    """An elastic rank reads its settings again once it joined (config.forget_config): the
    device route is decided for the configuration in force, not the first one."""
    monkeypatch.setattr(placement, "_possible", {})
    monkeypatch.setattr("blinkflow.backends.cuda.device.is_available", lambda: True)
    monkeypatch.setattr(placement, "get_config", lambda: Config(backend="cpu"))
    assert not placement.tensors_may_go_to_device()
    monkeypatch.setattr(placement, "get_config", lambda: Config(backend="auto"))
    assert placement.tensors_may_go_to_device()
