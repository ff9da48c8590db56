"""Fake CuPy for the CPU suite (see ../README.md). numpy arrays with ``.data.ptr``/``.device``
that remember the device they were made on (the calling thread's current one) and refuse use from
another device without peer access, as CuPy's kernels do."""
import re
import sys
import weakref

import numpy as np

from . import _devices, _dlpack, cuda  # noqa: F401

uint8, uint16, int32, int64 = np.uint8, np.uint16, np.int32, np.int64
float16, float32, float64 = np.float16, np.float32, np.float64
dtype = np.dtype


class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr


def _touch(where, *arrays):
    """Arrays a kernel on the current device reads or writes must live there or on a peer."""
    here = _devices.current()
    for a in arrays:
        if isinstance(a, ndarray):
            _devices.check_access(where, a._device, here)


class ndarray(np.ndarray):
    def __array_finalize__(self, obj):
        # A view lives where its base does; a new array on the calling thread's device.
        self._device = getattr(obj, "_device", None)
        if self._device is None:
            self._device = _devices.current()

    @property
    def data(self):
        return _Ptr(self.__array_interface__["data"][0])

    @property
    def device(self):
        return cuda.Device(self._device)

    def __setitem__(self, key, value):
        _touch("setitem", self, value)
        super().__setitem__(key, value)

    @property
    def __cuda_array_interface__(self):
        # CuPy's arrays expose it, and blinkflow recognises GPU arrays by it (blinkflow.arrays).
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": None if self.flags.c_contiguous else self.strides, "version": 3}

    def get(self, out=None, stream=None):
        if out is None:
            return np.array(self)
        out[...] = np.asarray(self)
        return out

    def set(self, arr, stream=None):
        np.asarray(self)[...] = arr

    def toDlpack(self):
        """A capsule of device type CUDA carrying this array's device ordinal."""
        return _dlpack.relabel(np.asarray(self).__dlpack__(), _dlpack.KDL_CUDA, self._device)

    def __dlpack__(self, stream=None, **kwargs):
        return self.toDlpack()

    def __dlpack_device__(self):
        return (_dlpack.KDL_CUDA, self._device)

    def copy(self, order="C"):
        _touch("copy", self)
        return _wrap(self)


class _Capsule:
    """A capsule relabelled as host memory, presented the way numpy consumes it."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (_dlpack.KDL_CPU, 0)


def from_dlpack(capsule):
    """Zero-copy, like CuPy's: the array views the producer's memory and takes the capsule's
    device id as its device (CuPy trusts the label). A host capsule is refused, as CuPy does."""
    from . import _tf_gpu

    _tf_gpu.install()
    if hasattr(capsule, "__dlpack__"):
        capsule = capsule.__dlpack__()
    kind, ordinal = _dlpack.device(capsule)
    if kind != _dlpack.KDL_CUDA:
        raise RuntimeError(f"fake cupy.from_dlpack: the capsule holds memory of DLPack device type {kind}; "
                           "CuPy takes only CUDA device memory (kDLCUDA)")
    _devices.check(ordinal)
    array = np.from_dlpack(_Capsule(_dlpack.relabel(capsule, _dlpack.KDL_CPU, 0))).view(ndarray)
    array._device = ordinal
    return array


fromDlpack = from_dlpack


def concatenate(arrays, out=None):
    _touch("concatenate", *arrays, out)
    if out is None:
        return _wrap(np.concatenate([np.asarray(a) for a in arrays]))
    np.concatenate([np.asarray(a) for a in arrays], out=np.asarray(out))
    return out


def array(a, dtype=None, order="C", copy=True):
    _touch("array", a)
    return _wrap(np.array(a, dtype=dtype, order=order, copy=copy))


def ascontiguousarray(a):
    _touch("ascontiguousarray", a)
    return _wrap(a)


_ALIGN = 256  # cudaMalloc's alignment (TensorFlow checks 64 on the memory DLPack hands it)


def _aligned_empty(shape, dtype):
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + _ALIGN, dtype=np.uint8)
    start = raw.__array_interface__["data"][0]
    _devices.memory.add(start, raw.nbytes, _devices.current())
    weakref.finalize(raw, _devices.memory.remove, start)
    skip = -start % _ALIGN
    return raw[skip:skip + count * dtype.itemsize].view(dtype).reshape(shape)


def _wrap(a):
    a = np.asarray(a)
    out = _aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out.view(ndarray)


def asarray(a, dtype=None):
    return _wrap(np.array(a, dtype=dtype))


def asnumpy(a, stream=None):
    return np.array(a)


def empty(n, dtype=np.float64):
    return _aligned_empty(n if isinstance(n, tuple) else (n,), dtype).view(ndarray)


def zeros(n, dtype=np.float64):
    return _wrap(np.zeros(n, dtype=dtype))


def ones(n, dtype=np.float64):
    return _wrap(np.ones(n, dtype=dtype))


def zeros_like(a):
    return _wrap(np.zeros_like(a))


if "tensorflow" in sys.modules:
    from . import _tf_gpu

    _tf_gpu.install()


_CTYPES = {"bf_half": np.float16, "float": np.float32, "double": np.float64, "int": np.int32,
           "long long": np.int64, "bf_u8": np.uint8}
_OPS = [np.add, np.minimum, np.maximum, np.multiply]


def _view(ptr, n, dt):
    import ctypes

    dt = np.dtype(dt)
    return np.frombuffer((ctypes.c_char * (n * dt.itemsize)).from_address(int(ptr)), dtype=dt)


class RawModule:
    def __init__(self, code=None, options=(), name_expressions=None, **kwargs):
        self.names = list(name_expressions or ())

    def compile(self):
        pass

    def get_function(self, expr):
        m = re.fullmatch(r"blinkflow_(reduce|scale)<([a-z_0-9 ]+)(?:, (\d))?>", expr)
        if m is None or m.group(2) not in _CTYPES:
            raise NotImplementedError(f"fake cupy does not emulate {expr}")
        dt = _CTYPES[m.group(2)]
        if m.group(1) == "reduce":
            op = _OPS[int(m.group(3))]

            def reduce(grid, block, args, **kw):
                out, out2, *ins = args[:10]
                nin, n = int(args[10]), int(args[11])
                srcs = [_view(p, n, dt) for p in ins[:nin]]
                wide = np.float32 if dt == np.float16 else dt
                acc = srcs[0].astype(wide)
                for s in srcs[1:]:
                    acc = op(acc, s.astype(wide))
                _view(out, n, dt)[...] = acc.astype(dt)
                if int(out2):
                    _view(out2, n, dt)[...] = acc.astype(dt)
            return reduce

        def scale(grid, block, args, **kw):
            out, src, factor, n = args
            x = np.asarray(src).reshape(-1)
            o = np.asarray(out).reshape(-1)
            if np.dtype(dt).kind in "iu":
                o[...] = (x * float(factor)).astype(dt)
            else:
                wide = np.float32 if dt == np.float16 else dt  # half: float math, float factor (scale.cu)
                o[...] = (x.astype(wide) * wide(float(factor))).astype(dt)
        return scale
