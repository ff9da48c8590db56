"""The numpy data path of the CPU executor: elementwise combiners applied chunk by chunk.

Why chunks: a rank that reduces its shard reads every peer's copy of it. Walking the shard in
cache-sized chunks keeps the partial result in L2 while the peers' chunks stream through, so
memory traffic is one read per input and one write, instead of one round trip per input
(Blink, MLSys 2020, §4 pipelines chunks through its trees for the same reason on GPUs).
numpy ufuncs release the GIL, so the runtime's other threads keep running meanwhile.

The combination order is fixed (the order of ``inputs``), so a result depends only on the data,
never on timing; each element is computed by exactly one rank and copied to the others, which
makes results bitwise identical on every rank. float16 follows numpy: each binary step rounds to
float16, exactly as ``np.add`` on float16 arrays does in the same order.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import BackendError
from ...ops import ReduceOp

_UFUNCS = {
    ReduceOp.SUM: np.add,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.PRODUCT: np.multiply,
}

def combiner(op: ReduceOp) -> np.ufunc:
    """The ufunc of an elementwise combiner. Average and scaling never reach a backend."""
    try:
        return _UFUNCS[ReduceOp(op).combiner]
    except (KeyError, ValueError):
        raise BackendError(f"the cpu backend cannot combine with {op!r}") from None


def reduce_into(out: np.ndarray, inputs: Sequence[np.ndarray], ufunc: np.ufunc, chunk: int) -> None:
    """``out = ((inputs[0] (+) inputs[1]) (+) inputs[2]) ...``, chunk by chunk.

    ``out`` may be one of the inputs (in-place accumulation) only if it is ``inputs[0]``: later
    inputs are read after ``out`` has been written in the same chunk.
    """
    n = out.shape[0]
    if not inputs:
        raise BackendError("reduce_into needs at least one input")
    if len(inputs) == 1:
        if inputs[0] is not out:
            np.copyto(out, inputs[0], casting="no")  # one streaming memcpy; chunking adds nothing
        return
    first, second, rest = inputs[0], inputs[1], inputs[2:]
    if n <= chunk:  # one chunk (most calls of a small all-reduce): no slices to make
        ufunc(first, second, out=out)
        for x in rest:
            ufunc(out, x, out=out)
        return
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        o = out[lo:hi]
        ufunc(first[lo:hi], second[lo:hi], out=o)
        for x in rest:
            ufunc(o, x[lo:hi], out=o)

