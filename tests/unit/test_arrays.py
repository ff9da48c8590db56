"""Arguments are recognised by protocol (blinkflow.arrays), whatever module defines their type."""
import pathlib
import re

import numpy as np
import pytest

from blinkflow import arrays
from blinkflow.compression import Compression
from blinkflow.runtime.arguments import as_array


class _CudaInterface:
    """A GPU array of some library: only the CUDA array interface."""

    __module__ = "somelib"

    @property
    def __cuda_array_interface__(self):
        return {"shape": (2,), "typestr": "<f4", "data": (1 << 20, False), "version": 3}


class _CudaDlpack:
    __module__ = "cupy_like_but_not_named_so"

    def __dlpack_device__(self):
        return (arrays.KDL_CUDA, 1)


class _HostTensorWithCudaProperty:
    """PyTorch's CPU tensors define the property and raise from it."""

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("not a CUDA tensor")

    def __dlpack_device__(self):
        return (1, 0)


class _HostArray(np.ndarray):
    __module__ = "cupy.fake"  # a module name that once meant "GPU"


def test_gpu_arrays_are_recognised_by_protocol_not_by_module():
    assert arrays.on_device(_CudaInterface())
    assert arrays.on_device(_CudaDlpack())
    assert not arrays.on_device(_HostTensorWithCudaProperty())
    assert not arrays.on_device(np.zeros(3))
    assert not arrays.on_device(np.zeros(3).view(_HostArray))
    assert not arrays.on_device([1, 2])


def test_arrays_are_told_from_framework_tensors_by_their_interfaces():
    assert arrays.is_array(np.zeros(2))
    assert arrays.is_array(_CudaInterface())
    assert not arrays.is_array([1.0])
    tf = pytest.importorskip("tensorflow")
    assert not arrays.is_array(tf.constant([1.0]))  # it speaks DLPack and the buffer protocol, though


def test_a_host_array_whatever_its_module_stays_on_the_host():
    array, device = as_array(np.arange(4, dtype=np.float32).view(_HostArray))
    assert device == "cpu" and array.dtype == np.float32


def test_fp16_compression_casts_arrays_and_tensors_alike():
    sent, ctx = Compression.fp16.compress(np.ones(3, np.float32).view(_HostArray))
    assert sent.dtype == np.float16
    assert Compression.fp16.decompress(sent, ctx).dtype == np.float32
    tf = pytest.importorskip("tensorflow")
    sent, ctx = Compression.fp16.compress(tf.ones(3, tf.float64))
    assert sent.dtype == tf.float16
    assert Compression.fp16.decompress(sent, ctx).dtype == tf.float64


def test_no_tensor_type_is_told_by_its_module_name():
    package = pathlib.Path(arrays.__file__).parent
    sniffing = re.compile(r"type\([^)]*\)\.__module__")
    found = [f"{path.relative_to(package)}:{n}: {line.strip()}"
             for path in sorted(package.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if sniffing.search(line)]
    # A communicator is not a tensor: mpi4py's is told apart from a process set's ranks.
    assert all("mpi4py" in hit for hit in found), found
