"""Results are the user's: a handle dropped unsynchronized releases its result, a completed
call is readable after ``shutdown()``, a result held while later calls reuse the result pool
keeps its values, and ``synchronize``/``poll`` refuse what is not a handle.

Run by ``test_owned_results.py`` under mpirun at 2 and 3 ranks; a case script of the harness (tests/harness.py).
"""
import gc
import sys

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt
from blinkflow.runtime.global_state import RUNTIME
from harness import run_cases

MIB = 1 << 20


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def case_dropped_handles_release_their_results(r, n):
    # 20,000 calls never synchronized, each with an 8 KiB result: kept, they would hold ~160 MiB
    # per rank (and their handle entries) for the life of the runtime, 80 MiB per half of them.
    x = np.full(2048, r, np.float32)
    pool = RUNTIME.engine.loop.executor.results

    def run_chunks(count):
        for chunk in range(count):
            for i in range(1000):
                rt.allreduce_async(x, op=bf.Sum)  # the handle is dropped at once
            bf.barrier()  # every call of the chunk has completed on every rank
        gc.collect()
        return (_rss_bytes() - pool.held_bytes) / MIB  # what the pool keeps idle is a bounded cache

    run_chunks(2)  # warm up the pools and caches the loop below reuses
    start = (_rss_bytes() - pool.held_bytes) / MIB
    middle = run_chunks(10)
    end = run_chunks(10)
    # The allocator settles in the first half (fusion batches of whatever sizes were ready);
    # a leak grows both halves alike.
    assert end - middle < 24, f"RSS grew by {end - middle:.0f} MiB over the second 10,000 dropped handles " \
                              f"({middle - start:.0f} MiB over the first)"
    assert end - start < 64, f"RSS grew by {end - start:.0f} MiB over 20,000 dropped handles"
    # None of the pool's blocks may still be lent to a result nobody can reach.
    assert not any(b.lent for b in pool.blocks), [(b.size, b.last_lent, pool.lends) for b in pool.blocks if b.lent]
    assert len(RUNTIME.handles) == 0, len(RUNTIME.handles)
    # A handle kept as a plain int still owns its entry until synchronized (the TF bindings' way).
    kept = int(rt.allreduce_async(x, op=bf.Sum, name="kept.as.int"))
    gc.collect()
    assert np.array_equal(rt.synchronize(kept), np.full(2048, n * (n - 1) / 2, np.float32))


def case_a_completed_call_is_readable_after_shutdown(r, n):
    h = rt.allreduce_async(np.full(3, r + 1.0), op=bf.Sum, name="before.shutdown")
    g = rt.grouped_allreduce_async([np.ones(2), np.full(4 * MIB // 8, float(r))], op=bf.Sum, name="group.before")
    while not (rt.poll(h) and rt.poll(g)):
        pass
    bf.shutdown()
    assert rt.poll(h)
    assert np.array_equal(rt.synchronize(h), np.full(3, n * (n + 1) / 2))
    small, big = rt.synchronize(g)
    assert np.array_equal(small, np.full(2, float(n))) and np.all(big == n * (n - 1) / 2)
    try:
        rt.synchronize(h)
    except bf.BlinkflowError:
        pass
    else:
        raise AssertionError("a spent handle synchronized twice after shutdown")
    bf.init()
    assert np.array_equal(bf.allreduce(np.ones(2), op=bf.Sum, name="after.reinit"), np.full(2, float(n)))


def case_synchronize_and_poll_refuse_what_is_not_a_handle(r, n):
    h = rt.allreduce_async(np.ones(1), name="a.real.handle")
    for bad in (True, False, 1.0, "1", None, [h]):
        for call in (rt.synchronize, rt.poll):
            try:
                call(bad)
            except bf.InvalidArgumentError as e:
                assert "takes a handle" in str(e), e
            else:
                raise AssertionError(f"{call.__name__}({bad!r}) was taken as a handle")
    assert np.array_equal(rt.synchronize(np.int64(int(h))), np.ones(1))


def case_a_held_result_keeps_its_values_while_the_pool_is_reused(r, n):
    size = 3 * MIB // 4  # 3 MiB of float32: pooled
    held = bf.allreduce(np.full(size, r + 1.0, np.float32), op=bf.Sum, name="held")
    tail = held[size // 2:].reshape(-1, 1024)[::3]  # only a view of it survives
    del held
    for step in range(12):
        out = bf.allreduce(np.full(size, -7.0 - step, np.float32), op=bf.Sum, name=f"later.{step % 3}")
        assert np.all(out == n * (-7.0 - step))
    assert np.all(tail == n * (n + 1) / 2), np.unique(tail)


def main():
    bf.init()
    run_cases(globals(), bf.rank(), bf.size(), sys.argv[1:])
    bf.shutdown()


if __name__ == "__main__":
    main()
