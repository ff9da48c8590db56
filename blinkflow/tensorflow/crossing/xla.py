"""Collectives inside XLA clusters: ``tf.function(jit_compile=True)`` and Keras 3's ``model.fit``,
which compiles its train step with XLA whenever TensorFlow sees a GPU (``jit_compile="auto"``).

XLA compiles the whole function and cannot run a Python op, so inside an XLA context the crossing
emits the C++ op ``BlinkflowXlaCall`` (``xla_call_op.cc``) instead. XLA lowers it to a
side-effecting custom call; when the compiled program reaches it, XLA hands the custom call its
buffers and :func:`_run` (installed as the op's callback) runs the collective on them: on the
host, numpy views of XLA's buffers (the cpu backend's route); on a GPU, cupy views of XLA's
device buffers after XLA's stream is synchronized (the cuda backend's route, no host copy), the
results written in place and the device synchronized before XLA goes on. The model's compute
stays compiled; only the collective leaves it, as Horovod's XLA ops (``HOROVOD_ENABLE_XLA_OPS``)
did with a custom call.

Rules that follow from XLA:

* Shapes are static: a collective whose result shape is not known when the function is traced
  (an all-gather of rows that differ by rank) raises NotSupportedError there, naming the fix.
* Order: each call of a function takes the previous call's ``done`` token, so XLA cannot reorder
  two collectives and every rank runs them in the same order.
* A submission (:func:`submit`) copies its inputs before returning its handle: XLA may
  reuse an input buffer as soon as the custom call returns, while the runtime reduces later.
* The callback table (:data:`_calls`) holds an entry per traced collective for as long as the
  graph it was traced into lives: a ``tf.function``'s graphs (control-flow bodies included) live
  as long as something can still run them, and when the last goes, :func:`_release` drops their
  entries, so retracing or dropping functions does not grow the table for the life of the process.
* Errors keep their ``tf.errors`` code: the callback returns the code of the blinkflow error and
  XLA fails the step with it (a cross-rank mismatch is a FailedPreconditionError).
"""
from __future__ import annotations

import ctypes
import itertools
import threading
import traceback
import weakref
from typing import Callable, Dict, List, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from ... import placement
from ...arrays import on_device
from ...errors import BlinkflowError, NotSupportedError
from .. import _op_library
from .._naming import scope_name
from . import arrays, errors, handles

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                             ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _Call(NamedTuple):
    fn: Callable[[List], Sequence]
    """Arrays in, arrays out (the crossing's function)."""
    in_dtypes: List[np.dtype]
    out_dtypes: List[np.dtype]
    copy_inputs: bool


_calls: Dict[int, _Call] = {}
"""call id -> the collective's callback, while the graph that holds its op lives."""
_ids = itertools.count(1)
_lock = threading.Lock()
#: The attribute of a graph holding its last collective's ``done`` token. On the graph, not in a
#: WeakKeyDictionary: the token refers to its graph, so a dictionary's value would keep its own
#: key (the graph, and every callback it owns) alive for good.
_CHAIN = "_blinkflow_xla_done"
_owned: "weakref.WeakKeyDictionary[tf.Graph, List[int]]" = weakref.WeakKeyDictionary()
_installed = []
calls_run = 0
"""How many collectives ran through the custom call in this process."""


def in_xla_context() -> bool:
    """Whether ops built now will be compiled by XLA (a ``jit_compile=True`` function, or one
    called from it)."""
    if tf.executing_eagerly():
        return False
    from tensorflow.python.ops import control_flow_util  # TF keeps no public spelling of this

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def call(fn: Callable[[list], Sequence], tensors: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
         out_shapes: Sequence[tf.TensorShape], name: str) -> List[tf.Tensor]:
    """Tensors of ``out_dtypes``/``out_shapes`` that ``fn`` computes from the arrays of ``tensors``
    when the compiled program runs."""
    return _widened_call(fn, tensors, out_dtypes, out_shapes, name, copy_inputs=False, counted=True)


def submit(fn: Callable[[list], int], tensors: Sequence[tf.Tensor], name: str) -> tf.Tensor:
    """``fn`` hands copies of the arrays of ``tensors`` to the runtime when the compiled program
    runs (XLA may reuse its buffers once the custom call returns); its handle as an int64 scalar."""
    return _widened_call(lambda inputs: [np.int64(handles.start(fn, lambda: inputs))], tensors, [tf.int64], [[]],
                         name, copy_inputs=True, counted=True)[0]


def wait(finishers, handle_tensors: Sequence[tf.Tensor], out_dtypes, out_shapes, name: str) -> List[tf.Tensor]:
    """Every result of the submissions ``handle_tensors`` (see :func:`.handles.collector`)."""
    collect = handles.collector(finishers)
    return _widened_call(lambda ids: collect(arrays.handles(ids)), handle_tensors, out_dtypes, out_shapes, name,
                         copy_inputs=False, counted=False)


def _widened_call(fn, tensors, out_dtypes, out_shapes, name, copy_inputs, counted) -> List[tf.Tensor]:
    """:func:`_custom_call` with bfloat16 reduced in float32 where the device route is possible
    (:func:`.arrays.widened`), under the collective's name scope. ``counted``: the inputs are a
    collective's data, counted in :data:`.arrays.conversions` by their route (handles are not)."""
    wide_tensors, wide_dtypes = arrays.widened(tensors, out_dtypes)

    def run(inputs):
        if counted:
            arrays.conversions["device" if any(on_device(a) for a in inputs) else "host"] += len(inputs)
        return fn(inputs)

    with tf.name_scope(scope_name(name)):
        outs = _custom_call(run, wide_tensors, wide_dtypes, out_shapes, name, copy_inputs)
    return [tf.cast(o, d) if o.dtype != d else o for o, d in zip(outs, map(tf.as_dtype, out_dtypes))]


def _custom_call(fn: Callable[[List], Sequence], tensors: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
                 out_shapes: Sequence[tf.TensorShape], name: str, copy_inputs: bool) -> List[tf.Tensor]:
    """One ``BlinkflowXlaCall`` op: ``fn`` on views of XLA's buffers when the program reaches it.
    ``copy_inputs``: hand ``fn`` copies (it keeps them)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    out_dtypes = [tf.as_dtype(d) for d in out_dtypes]
    out_shapes = [tf.TensorShape(s) for s in out_shapes]
    for shape in out_shapes:
        if not shape.is_fully_defined():
            raise NotSupportedError(
                f"collective {name!r} inside an XLA-compiled function (jit_compile=True) has a result of shape "
                f"{shape}, which is only known when it runs; XLA needs static shapes. Use allreduce or broadcast "
                "there, or compile without XLA (tf.function(jit_compile=False), model.compile(jit_compile=False))")
    module = _library().module
    graph = tf.compat.v1.get_default_graph()
    call_id = _register(_Call(fn, [t.dtype.as_numpy_dtype for t in tensors], [d.as_numpy_dtype for d in out_dtypes],
                              copy_inputs), graph)
    after = getattr(graph, _CHAIN, None)
    if after is None:
        after = tf.constant(0, tf.int64)
    outs, done = module.blinkflow_xla_call(after, tensors, Tout=out_dtypes, out_shapes=out_shapes,
                                            call_id=call_id)
    setattr(graph, _CHAIN, done)
    return list(outs)


def _register(entry: _Call, graph) -> int:
    """A new call id for ``entry``, released with ``graph`` (the graph its op is built in)."""
    with _lock:
        call_id = next(_ids)
        _calls[call_id] = entry
        owned = _owned.get(graph)
        if owned is None:
            owned = _owned[graph] = []
            weakref.finalize(graph, _release, owned)
        owned.append(call_id)
    return call_id


def _release(call_ids: List[int]) -> None:
    """Drop the entries of a graph that is gone (no compiled program can reach them any more).
    A finalizer, so it may run in the middle of :func:`_register` on the same thread: it takes
    no lock (``dict.pop`` is atomic under the GIL)."""
    for call_id in call_ids:
        _calls.pop(call_id, None)


def _library():
    loaded = _op_library.load_xla()
    if loaded is None:
        raise NotSupportedError("a collective inside an XLA-compiled function needs blinkflow's XLA op, which "
                                "could not be built here (see the warning above: g++ and TensorFlow's headers); "
                                "compile without XLA: tf.function(jit_compile=False), model.compile(jit_compile=False)")
    with _lock:
        if not _installed:
            loaded.native.blinkflow_xla_register_kernels()
            _installed.append(_CALLBACK(_run))  # kept alive: XLA calls it for the life of the process
            loaded.native.blinkflow_xla_set_callback(ctypes.cast(_installed[0], ctypes.c_void_p))
    return loaded


def _run(call_id, n_in, in_desc, in_ptrs, n_out, out_desc, out_ptrs, stream, error, error_len) -> int:
    """The custom call's body (XLA's thread, the GIL taken by ctypes): never raises."""
    global calls_run
    try:
        entry = _calls.get(call_id)
        if entry is None:
            raise BlinkflowError(f"XLA ran blinkflow collective call {call_id}, whose graph is gone (its callback was "
                                 "released with the tf.function or graph that traced it); trace the function again")
        ins = _shapes(in_desc, n_in)
        outs = _shapes(out_desc, n_out)
        if placement.of_xla_call(stream) == placement.DEVICE:
            _run_on_device(entry, ins, in_ptrs, outs, out_ptrs, stream)
        else:
            _run_on_host(entry, ins, in_ptrs, outs, out_ptrs)
        calls_run += 1
        return 0
    except BlinkflowError as e:
        code, message = errors.code_of(e), f"{type(e).__name__}: {e}"
    except BaseException as e:  # a bug here must fail the step, not kill the process
        code = tf.errors.INTERNAL
        message = f"blinkflow: the XLA collective failed: {type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
    raw = message.encode("utf-8", "replace")[:max(0, error_len - 1)]
    ctypes.memmove(error, raw + b"\0", len(raw) + 1)
    return code


def _shapes(desc, count) -> List[tuple]:
    shapes, at = [], 0
    for _ in range(count):
        rank = desc[at]
        shapes.append(tuple(desc[at + 1:at + 1 + rank]))
        at += 1 + rank
    return shapes


def _host_array(ptr, shape, dtype) -> np.ndarray:
    """A numpy view of ``shape`` and ``dtype`` at ``ptr`` (XLA's host buffer)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * (size * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _device_array(cupy, ptr, shape, dtype):
    """A cupy view of ``shape`` and ``dtype`` at ``ptr`` (XLA's device buffer; XLA owns it)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 0:
        return cupy.empty(shape, dtype)
    memory = cupy.cuda.UnownedMemory(ptr, size * dtype.itemsize, None)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))


def _run_on_host(entry: _Call, ins, in_ptrs, outs, out_ptrs) -> None:
    _exchange(np, entry, [_host_array(in_ptrs[i], s, d) for i, (s, d) in enumerate(zip(ins, entry.in_dtypes))],
              [_host_array(out_ptrs[i], s, d) for i, (s, d) in enumerate(zip(outs, entry.out_dtypes))])


def _run_on_device(entry: _Call, ins, in_ptrs, outs, out_ptrs, stream) -> None:
    import cupy

    # XLA's thread need not have the buffers' device current: take it from the pointers.
    pointers = [p for p in list(in_ptrs[:len(ins)]) + list(out_ptrs[:len(outs)]) if p]
    device = cupy.cuda.runtime.pointerGetAttributes(pointers[0]).device if pointers else cupy.cuda.runtime.getDevice()
    with cupy.cuda.Device(device):
        cupy.cuda.ExternalStream(stream).synchronize()  # XLA's writes of the inputs are done
        inputs = [_device_array(cupy, in_ptrs[i], s, d) for i, (s, d) in enumerate(zip(ins, entry.in_dtypes))]
        outputs = [_device_array(cupy, out_ptrs[i], s, d) for i, (s, d) in enumerate(zip(outs, entry.out_dtypes))]
        _exchange(cupy, entry, inputs, outputs)
        cupy.cuda.Device().synchronize()  # the results are written before XLA's stream reads them


def _exchange(xp, entry: _Call, inputs, outputs) -> None:
    """``entry.fn`` on the views of XLA's inputs, its results written into XLA's outputs."""
    if entry.copy_inputs:
        inputs = [a.copy() for a in inputs]
    for out, result in zip(outputs, entry.fn(inputs)):
        out[...] = xp.asarray(result, dtype=out.dtype).reshape(out.shape)
