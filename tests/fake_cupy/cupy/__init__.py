"""Fake CuPy for the CPU suite (see ../README.md). numpy arrays with ``.data.ptr``/``.device``."""
import re

import numpy as np

from . import cuda  # noqa: F401

uint8, uint16, int32, int64 = np.uint8, np.uint16, np.int32, np.int64
float16, float32, float64 = np.float16, np.float32, np.float64
dtype = np.dtype


class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr


class _Dev:
    id = 0


class ndarray(np.ndarray):
    @property
    def data(self):
        return _Ptr(self.__array_interface__["data"][0])

    @property
    def device(self):
        return _Dev()

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
        return np.asarray(self).__dlpack__()

    def copy(self, order="C"):
        return _wrap(self)


class _Capsule:
    """A DLPack capsule of host memory, presented the way numpy consumes it (TF's host tensors
    play the GPU's part under the fake: their capsules point at CPU memory)."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def from_dlpack(capsule):
    """Zero-copy, like CuPy's: the array views the producer's memory."""
    return np.from_dlpack(_Capsule(capsule)).view(ndarray)


fromDlpack = from_dlpack


def concatenate(arrays, out=None):
    if out is None:
        return _wrap(np.concatenate([np.asarray(a) for a in arrays]))
    np.concatenate([np.asarray(a) for a in arrays], out=np.asarray(out))
    return out


def array(a, dtype=None, order="C", copy=True):
    return _wrap(np.array(a, dtype=dtype, order=order, copy=copy))


def ascontiguousarray(a):
    return _wrap(a)


_ALIGN = 256  # cudaMalloc's alignment (TensorFlow checks 64 on the memory DLPack hands it)


def _aligned_empty(shape, dtype):
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + _ALIGN, dtype=np.uint8)
    skip = -raw.__array_interface__["data"][0] % _ALIGN
    return raw[skip:skip + count * dtype.itemsize].view(dtype).reshape(shape)


def _wrap(a):
    a = np.asarray(a)
    out = _aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out.view(ndarray)


def asarray(a, dtype=None):
    return _wrap(np.array(a, dtype=dtype))


def asnumpy(a):
    return np.array(a)


def empty(n, dtype=np.float64):
    return _aligned_empty(n if isinstance(n, tuple) else (n,), dtype).view(ndarray)


def zeros(n, dtype=np.float64):
    return _wrap(np.zeros(n, dtype=dtype))


def ones(n, dtype=np.float64):
    return _wrap(np.ones(n, dtype=dtype))


def zeros_like(a):
    return _wrap(np.zeros_like(a))


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
