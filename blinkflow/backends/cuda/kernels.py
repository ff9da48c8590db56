"""Blinkflow's CUDA kernels: sources from ``kernels/``, compiled by CuPy on first use.

Following CuPy's own habit (``cupyx/scipy/ndimage``): the sources are files, loaded lazily and
memoised per device; templates are instantiated through ``name_expressions``; a compile error
raises :class:`~blinkflow.errors.KernelCompileError` carrying the source name and options.

The instantiation tables here are the single source of truth: the nvcc compile test in the
CPU suite (``tests/unit/test_kernels_compile.py``) compiles exactly :func:`module_source` with
exactly :func:`name_expressions`, so a kernel that breaks fails CI without a GPU.

Nothing in this module imports CuPy at import time.
"""
from __future__ import annotations

import functools
import re
import threading
from typing import Any, Dict, List, Optional, Tuple

from ...errors import BackendError, KernelCompileError
from ...ops import ReduceOp

#: numpy dtype name -> C++ storage type in ``kernels/common.cuh``.
CTYPES: Dict[str, str] = {
    "float16": "bf_half",
    "bfloat16": "bf_bfloat16",
    "float32": "float",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
    "uint8": "bf_u8",
}
#: combiner -> BF_OP_* code in ``kernels/common.cuh``.
OP_CODES: Dict[ReduceOp, int] = {ReduceOp.SUM: 0, ReduceOp.MIN: 1, ReduceOp.MAX: 2, ReduceOp.PRODUCT: 3}
#: element width in bytes -> word type of the dtype-agnostic pack/unpack kernels.
WORDS: Dict[int, str] = {1: "bf_u8", 2: "bf_u16", 4: "bf_u32", 8: "bf_u64"}
#: element width in bytes -> the dtype whose interpreter instantiation moves calls that do not
#: reduce (broadcast, all-gather): copies move bits, so any dtype of that width runs them.
COPY_TYPES: Dict[int, str] = {1: "uint8", 2: "float16", 4: "int32", 8: "int64"}
#: most inputs one fused reduction launch combines (``BF_MAX_INPUTS`` in reduce.cu).
MAX_INPUTS = 8

OPTIONS: Tuple[str, ...] = ("-std=c++14",)
"""Options for NVRTC (and the nvcc compile test); arch flags are added by CuPy per device."""

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)


def name_expressions(source: str) -> List[str]:
    """Every template instantiation of ``source`` (``"reduce.cu"``, ``"scale.cu"``, ``"pack.cu"``,
    ``"interpreter.cu"``)."""
    if source == "reduce.cu":
        return [reduce_name(dt, op) for dt in CTYPES for op in OP_CODES]
    if source == "scale.cu":
        return [scale_name(dt) for dt in CTYPES]
    if source == "pack.cu":
        return [f"blinkflow_{kind}<{w}>" for w in WORDS.values() for kind in ("pack", "unpack")]
    if source == "interpreter.cu":
        return [interpreter_name(dt, op) for dt in CTYPES for op in OP_CODES]
    raise BackendError(f"unknown kernel source {source!r}")


def reduce_name(dtype_name: str, op: ReduceOp) -> str:
    return f"blinkflow_reduce<{_ctype(dtype_name)}, {OP_CODES[ReduceOp(op).combiner]}>"


def interpreter_name(dtype_name: str, op: Optional[ReduceOp]) -> str:
    """The device executor's kernel for ``dtype_name`` reducing with ``op`` (None: a call that
    only moves bytes, which never combines, so it takes the sum instantiation)."""
    code = OP_CODES[ReduceOp(op).combiner] if op is not None else OP_CODES[ReduceOp.SUM]
    return f"blinkflow_interpreter<{_ctype(dtype_name)}, {code}>"


def scale_name(dtype_name: str) -> str:
    return f"blinkflow_scale<{_ctype(dtype_name)}>"


def pack_name(kind: str, itemsize: int) -> str:
    if itemsize not in WORDS:
        raise BackendError(f"pack/unpack supports element sizes {sorted(WORDS)}, not {itemsize}")
    return f"blinkflow_{kind}<{WORDS[itemsize]}>"


def _ctype(dtype_name: str) -> str:
    try:
        return CTYPES[dtype_name]
    except KeyError:
        raise BackendError(f"the cuda backend reduces {', '.join(CTYPES)}; got {dtype_name}") from None


@functools.lru_cache(maxsize=None)
def module_source(source: str) -> str:
    """The text handed to NVRTC: ``source`` with its quoted ``#include``s inlined.

    Inlining (instead of ``-I kernels/``) keys CuPy's on-disk kernel cache on the full text, so
    an edited header can never serve a stale binary.
    """
    from ...kernels import source_path

    seen = set()

    def expand(name: str) -> str:
        if name in seen:  # inline each header once (they carry include guards too)
            return ""
        seen.add(name)
        text = source_path(name).read_text() if name.endswith(".cu") else _header(name)
        return _INCLUDE.sub(lambda m: expand(m.group(1)), text)

    return expand(source)


def _header(name: str) -> str:
    from ...kernels import SOURCE_DIR

    path = SOURCE_DIR / name
    if not path.is_file():
        raise KernelCompileError(f"{name}: included header not found in {SOURCE_DIR}")
    return path.read_text()


_LOCK = threading.Lock()
_MODULES: Dict[Tuple[str, int], Any] = {}


def get_module(source: str):
    """The compiled ``cupy.RawModule`` of ``source`` for the current device (memoised)."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    key = (source, device)
    module = _MODULES.get(key)
    if module is not None:
        return module
    with _LOCK:
        module = _MODULES.get(key)
        if module is None:
            module = cupy.RawModule(code=module_source(source), options=OPTIONS,
                                    name_expressions=name_expressions(source))
            try:
                # Compile now, so errors surface here with their context (CuPy < 10 has no
                # compile(); fetching a kernel compiles the module there).
                if hasattr(module, "compile"):
                    module.compile()
                else:
                    module.get_function(name_expressions(source)[0])
            except Exception as e:  # cupy.cuda.compiler.CompileException and NVRTC errors
                raise KernelCompileError(
                    f"compiling kernels/{source} for device {device} with options {' '.join(OPTIONS)} failed:\n{e}"
                ) from e
            _MODULES[key] = module
    return module


def get_kernel(source: str, expression: str):
    """A ``cupy.RawKernel`` for one name expression of ``source`` on the current device."""
    return get_module(source).get_function(expression)


def clear_cache() -> None:
    """Forget compiled modules (tests; a device reset)."""
    with _LOCK:
        _MODULES.clear()
