"""ChunkReducer (the single-copy phase 1) on simulated ranks inside one process: cross-memory
attach on our own pid reads the "peers'" pieces and writes their results.

An owner and its helper may both compute the chunk where they meet and push its final bits into
each other's result at any moment (single_copy.reduce_balanced). The reducer must never keep a
partial value in its result: here such a push lands right after the first combining step of every
chunk (before the next step, or before the scaling), and
each rank's result must still come out exactly the canonical reduction."""
import os

import numpy as np
import pytest

from blinkflow.backends.cpu import cma, single_copy
from blinkflow.errors import BackendError


def _memory():
    try:
        memory = cma.PeerMemory()
        memory.read(os.getpid(), np.empty(8, np.uint8), np.array([[np.zeros(1).ctypes.data, 8]], np.uint64))
    except AttributeError:
        pytest.skip("no process_vm_readv in this C library")
    except BackendError as e:
        pytest.skip(f"cross-memory attach is forbidden here: {e}")
    return memory


def _split(flat, cuts):
    """``flat`` as separate arrays (a rank's tensors), cut at ``cuts``."""
    return [flat[a:b].copy() for a, b in zip([0] + cuts, cuts + [flat.shape[0]])]


class PushLandsAfterFirstStep:
    """The combining ufunc, after whose first call in a chunk (``armed``) the other computing
    rank's push of the chunk's final bits lands in this rank's result."""

    def __init__(self, ufunc, result, final):
        self.ufunc, self.result, self.final = ufunc, result, final
        self.armed, self.landed = None, 0

    def __call__(self, a, b, out):
        self.ufunc(a, b, out=out)
        if self.armed is not None:
            lo, hi = self.armed
            self.result[lo:hi] = self.final[lo:hi]
            self.armed, self.landed = None, self.landed + 1


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("dtype,ufunc,scale", [("int32", np.add, 1.0), ("float32", np.add, 0.25),
                                               ("float64", np.multiply, 1.0), ("int16", np.maximum, 1.0)])
@pytest.mark.parametrize("many_pieces", [False, True], ids=["one-tensor", "many-tensors"])
def test_a_push_landing_mid_chunk_never_corrupts_the_result(ranks, dtype, ufunc, scale, many_pieces):
    memory = _memory()
    n, chunk = 1000, 96
    rng = np.random.default_rng(ranks)
    flats = [rng.integers(1, 4, n).astype(dtype) for _ in range(ranks)]
    cuts = [7, 100, 101, 500, 903] if many_pieces else []
    pieces = [_split(f, cuts) for f in flats]
    owner, kids = 1 % ranks, tuple(q for q in range(ranks) if q != 1 % ranks)
    final = flats[owner].copy()
    for q in kids:
        final = ufunc(final, flats[q]).astype(dtype)
    if scale != 1.0:
        final = final * final.dtype.type(scale)
    for me in range(ranks):  # every position in the canonical order: owner, first kid, later kids
        results = [np.full(n, 77, dtype) for _ in range(ranks)]
        tables = [cma.PieceTable(*cma.PieceTable.rows_of(p)) for p in pieces]
        outs = [r.__array_interface__["data"][0] for r in results]
        scratch = tuple(np.empty(chunk * np.dtype(dtype).itemsize + single_copy.LINE, np.uint8) for _ in range(2))
        combine = PushLandsAfterFirstStep(ufunc, results[me], final)
        reducer = single_copy.ChunkReducer(memory, [os.getpid()] * ranks, me, results[me], pieces[me], tables, outs,
                                           combine, scale, chunk, scratch)
        for lo, hi in reducer.chunks(0, n):
            results[me][lo:hi] = final[lo:hi] + 1  # a stale value from an earlier call: never read
            combine.armed = (lo, hi)
            reducer.run(owner, kids, lo, hi)
        assert combine.landed == -(-n // chunk)  # a push landed mid-way through every chunk
        for q in range(ranks):  # ours, and the pushes into every other rank's result
            np.testing.assert_array_equal(results[q], final, err_msg=f"rank {q}'s result, computed by {me}")
        for q in range(ranks):
            np.testing.assert_array_equal(np.concatenate(pieces[q]), flats[q], err_msg="an input was written")
