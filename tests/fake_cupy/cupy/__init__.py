"""Fake CuPy for the CPU suite (see ../README.md). numpy arrays with ``.data.ptr``/``.device``
that remember the device they were made on (the calling thread's current one) and refuse use from
another device without peer access, as CuPy's kernels do.

Writes to device memory (fills, copies, assignments, concatenation, kernels) are issued on the
calling thread's current stream and run later, in stream order (:mod:`._streams`); new memory
starts as garbage (:data:`POISON`), so reading a result before its work ran is visibly wrong.
Host reads flush what CuPy's would synchronise: ``.get()``, ``asnumpy``, ``item()``, a scalar
element, and the numpy ufuncs that stand in for CuPy's kernels flush the current stream.
Arrays are carved from a pool (:mod:`._pool`) that reuses blocks as CuPy's does and refuses a
block TensorFlow may still read."""
import re
import sys

import numpy as np

from . import _devices, _dlpack, _pool, _streams, cuda  # noqa: F401

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


POISON = 0xFF
"""The byte new device memory holds until its work runs (NaN for floats, -1 for signed ints)."""


def _on(array, fn, *touched, where="kernel"):
    """Issue ``fn`` on the current stream, after checking the arrays it touches are reachable."""
    _touch(where, array, *touched)
    _streams.launch(fn)


def _host_copy(value):
    """A host source as a pageable cudaMemcpyAsync takes it: copied out when issued."""
    if isinstance(value, ndarray):
        return value
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _flush_for_read(device):
    """A host read in CuPy waits for the current stream of the memory's device."""
    _streams.current_on(device).flush()


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
        value = _host_copy(value)
        _on(self, lambda: np.ndarray.__setitem__(self, key, value), value, where="setitem")

    def __getitem__(self, key):
        item = super().__getitem__(key)
        if isinstance(item, ndarray):
            return item  # a view: nothing read yet
        _flush_for_read(self._device)  # a scalar is a device-to-host copy on the current stream
        return super().__getitem__(key)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # Stands in for a CuPy kernel on the current stream: it runs after the stream's earlier work.
        _flush_for_read(_devices.current())
        plain = [np.asarray(x) if isinstance(x, ndarray) else x for x in inputs]
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, ndarray) else o for o in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        if isinstance(result, tuple):
            return tuple(r.view(ndarray) if isinstance(r, np.ndarray) else r for r in result)
        return result.view(ndarray) if isinstance(result, np.ndarray) else result

    def item(self, *args):
        _flush_for_read(self._device)
        return super().item(*args)

    def tolist(self):
        _flush_for_read(self._device)
        return super().tolist()

    @property
    def __cuda_array_interface__(self):
        # CuPy's arrays expose it, and blinkflow recognises GPU arrays by it (blinkflow.arrays).
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": None if self.flags.c_contiguous else self.strides, "version": 3}

    def get(self, out=None, stream=None):
        (_streams.current_on(self._device) if stream is None else stream._queue).flush()
        if out is None:
            return np.array(self)
        out[...] = np.asarray(self)
        return out

    def set(self, arr, stream=None):
        arr = np.array(arr, copy=True)  # pageable host memory: staged when the copy is issued
        queue = _streams.current_on(self._device) if stream is None else stream._queue
        queue.issue(lambda: np.asarray(self).__setitem__(Ellipsis, arr))

    def toDlpack(self):
        """A capsule of device type CUDA carrying this array's device ordinal."""
        return _dlpack.relabel(np.asarray(self).__dlpack__(), _dlpack.KDL_CUDA, self._device)

    def __dlpack__(self, stream=None, **kwargs):
        return self.toDlpack()

    def __dlpack_device__(self):
        return (_dlpack.KDL_CUDA, self._device)

    def copy(self, order="C"):
        return _wrap(self, where="copy")


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
    arrays = [_host_copy(a) for a in arrays]
    if out is None:
        shapes = [np.shape(a) for a in arrays]
        out = empty((sum(s[0] for s in shapes),) + shapes[0][1:], np.result_type(*arrays))
    _on(out, lambda: np.concatenate([np.asarray(a) for a in arrays], out=np.asarray(out)), *arrays,
        where="concatenate")
    return out


def array(a, dtype=None, order="C", copy=True):
    return _wrap(a, dtype=dtype, where="array")


def ascontiguousarray(a):
    if isinstance(a, ndarray) and a.flags.c_contiguous:
        return a  # CuPy returns the array itself
    return _wrap(a, where="ascontiguousarray")


_ALIGN = 256  # cudaMalloc's alignment (TensorFlow checks 64 on the memory DLPack hands it)


def _aligned_empty(shape, dtype):
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = _pool.take(count * dtype.itemsize + _ALIGN)
    start = raw.__array_interface__["data"][0]
    skip = -start % _ALIGN
    return raw[skip:skip + count * dtype.itemsize].view(dtype).reshape(shape)


def _wrap(a, dtype=None, where="copy"):
    """A new device array holding ``a`` (device or host), filled on the current stream."""
    a = _host_copy(a)
    shape, dt = np.shape(a), np.dtype(dtype) if dtype is not None else np.asarray(a).dtype
    out = _aligned_empty(shape, dt).view(ndarray)
    _on(out, lambda: np.copyto(np.asarray(out), np.asarray(a), casting="unsafe"), a, where=where)
    return out


def asarray(a, dtype=None):
    if isinstance(a, ndarray) and (dtype is None or np.dtype(dtype) == a.dtype):
        return a
    return _wrap(a, dtype=dtype, where="asarray")


def asnumpy(a, stream=None):
    if isinstance(a, ndarray):
        (_streams.current_on(a._device) if stream is None else stream._queue).flush()
    return np.array(a)


def empty(n, dtype=np.float64):
    return _aligned_empty(n if isinstance(n, tuple) else (n,), dtype).view(ndarray)


def full(n, value, dtype=None):
    return _wrap(np.full(n, value, dtype=dtype))


def zeros(n, dtype=np.float64):
    return full(n, 0, dtype)


def ones(n, dtype=np.float64):
    return full(n, 1, dtype)


def zeros_like(a):
    return full(np.shape(a), 0, a.dtype)


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


def _deferred(body):
    """A kernel: ``body(args)`` issued on ``stream`` (default the current one) when launched."""
    def kernel(grid, block, args, stream=None, **kw):
        _streams.launch(lambda: body(args), None if stream is None else stream._queue)
    return kernel


class RawModule:
    def __init__(self, code=None, options=(), name_expressions=None, **kwargs):
        self.names = list(name_expressions or ())

    def compile(self):
        pass

    def get_function(self, expr):
        if expr.startswith("blinkflow_interpreter<"):
            from ._interpreter import InterpreterKernel

            return InterpreterKernel(expr)
        m = re.fullmatch(r"blinkflow_(reduce|scale)<([a-z_0-9 ]+)(?:, (\d))?>", expr)
        if m is None or m.group(2) not in _CTYPES:
            raise NotImplementedError(f"fake cupy does not emulate {expr}")
        dt = _CTYPES[m.group(2)]
        if m.group(1) == "reduce":
            op = _OPS[int(m.group(3))]

            def reduce(args):
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
            return _deferred(reduce)

        def scale(args):
            out, src, factor, n = args
            x = np.asarray(src).reshape(-1)
            o = np.asarray(out).reshape(-1)
            if np.dtype(dt).kind in "iu":
                o[...] = (x * float(factor)).astype(dt)
            else:
                wide = np.float32 if dt == np.float16 else dt  # half: float math, float factor (scale.cu)
                o[...] = (x.astype(wide) * wide(float(factor))).astype(dt)
        return _deferred(scale)
