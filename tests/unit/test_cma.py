"""Cross-memory attach: address runs of a rank's pieces, its own-piece views, and the system
calls themselves on this process (a process may always read and write its own memory)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blinkflow.backends.cpu.single_copy import Segments
from blinkflow.backends.cpu import cma
from blinkflow.backends.cpu.cma import IOV_MAX, PeerMemory, PieceTable
from blinkflow.errors import BackendError


def _memory():
    import os

    try:
        memory = PeerMemory()
        memory.read(os.getpid(), np.empty(8, np.uint8), np.array([[np.zeros(1).ctypes.data, 8]], np.uint64))
    except AttributeError:
        pytest.skip("no process_vm_readv in this C library")
    except BackendError as e:  # a seccomp profile that forbids the calls: the backend probes and copies instead
        pytest.skip(f"cross-memory attach is forbidden here: {e}")
    return memory


def _bytes_of(pieces):
    return np.concatenate([p.view(np.uint8) for p in pieces]) if pieces else np.empty(0, np.uint8)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=12), data=st.data())
def test_runs_and_spans_cover_exactly_the_requested_bytes(sizes, data):
    pieces = [np.arange(n, dtype=np.int16) + 100 * i for i, n in enumerate(sizes)]
    whole = _bytes_of(pieces)
    table = PieceTable(*PieceTable.rows_of(pieces))
    lo = data.draw(st.integers(0, whole.size))
    hi = data.draw(st.integers(lo, whole.size))
    if hi == lo:
        return
    runs = table.runs(lo, hi)
    assert (runs[:, 1] > 0).all() and int(runs[:, 1].sum()) == hi - lo
    got = np.empty(hi - lo, np.uint8)
    _memory().read(__import__("os").getpid(), got, runs)
    assert np.array_equal(got, whole[lo:hi])
    # A span is found exactly when the bytes lie in one piece, and reads the same bytes.
    source = table.span(lo, hi)
    assert (source is not None) == (runs.shape[0] == 1)
    if source is not None:
        got = np.empty(hi - lo, np.uint8)
        _memory().read_span(__import__("os").getpid(), got.ctypes.data, hi - lo, source)
        assert np.array_equal(got, whole[lo:hi])


def test_spans_move_one_contiguous_run_each_way_and_report_failures():
    import os

    memory = _memory()
    source = np.arange(1000, dtype=np.uint8)
    target = np.zeros(1000, np.uint8)
    memory.write_span(os.getpid(), source.ctypes.data + 10, 500, target.ctypes.data + 20)
    assert np.array_equal(target[20:520], source[10:510]) and not target[:20].any() and not target[520:].any()
    back = np.zeros(500, np.uint8)
    memory.read_span(os.getpid(), back.ctypes.data, 500, target.ctypes.data + 20)
    assert np.array_equal(back, source[10:510])
    with pytest.raises(BackendError, match="BLINKFLOW_CPU_SINGLE_COPY=0"):
        memory.read_span(os.getpid(), back.ctypes.data, 8, 8)  # page 0: unmapped


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=10), data=st.data())
def test_segments_are_views_covering_an_element_range(sizes, data):
    pieces = [np.arange(n, dtype=np.float32) + 1000 * i for i, n in enumerate(sizes)]
    whole = np.concatenate(pieces)
    lo = data.draw(st.integers(0, whole.size))
    hi = data.draw(st.integers(lo, whole.size))
    out = np.full(hi - lo, -1, np.float32)
    for at, view in Segments(pieces).within(lo, hi):
        assert any(np.shares_memory(view, p) for p in pieces)
        out[at:at + view.size] = view
    assert np.array_equal(out, whole[lo:hi])


def test_write_then_read_own_memory_in_many_runs():
    import os

    memory = _memory()
    target = np.zeros(3 * (IOV_MAX + 7), np.uint8)  # more runs than one call may carry
    runs = np.array([[target.ctypes.data + 3 * i, 2] for i in range(IOV_MAX + 7)], np.uint64)
    values = np.arange(2 * (IOV_MAX + 7), dtype=np.uint64).astype(np.uint8)
    memory.write(os.getpid(), values, runs)
    assert np.array_equal(target.reshape(-1, 3)[:IOV_MAX + 7, :2].reshape(-1), values)
    back = np.empty_like(values)
    memory.read(os.getpid(), back, runs)
    assert np.array_equal(back, values)


def test_a_failed_transfer_is_a_backend_error_that_says_how_to_opt_out():
    import os

    memory = _memory()
    with pytest.raises(BackendError, match="BLINKFLOW_CPU_SINGLE_COPY=0"):
        memory.read(os.getpid(), np.empty(8, np.uint8), np.array([[8, 8]], np.uint64))  # page 0: unmapped


def test_calls_are_cut_below_the_kernels_per_call_limit(monkeypatch):
    monkeypatch.setattr(cma, "MAX_CALL_BYTES", 10)
    monkeypatch.setattr(cma, "IOV_MAX", 3)
    runs = np.array([[100, 25], [200, 3], [300, 4], [400, 1], [500, 1]], np.uint64)
    batches = list(cma._calls_of(runs))
    calls = [c.tolist() for c, _ in batches]
    assert [total for _, total in batches] == [sum(n for _, n in c) for c in calls]  # what each call must move
    assert all(sum(n for _, n in c) <= 10 and len(c) <= 3 for c in calls)
    flat = [(a, n) for c in calls for a, n in c]
    assert flat[:3] == [(100, 10), (110, 10), (120, 5)] and sum(n for _, n in flat) == 34
    covered = sorted((a, a + n) for a, n in flat)  # every byte once, in order
    assert [a for a, _ in covered] == [a for a, _ in flat]
    small = np.array([[1, 2]], np.uint64)
    assert [(c.tolist(), total) for c, total in cma._calls_of(small)] == [([[1, 2]], 2)]
