"""The shipped ``kernels/interpreter.cu`` under ThreadSanitizer (``kernel_race``): several threads
per block, every PTX load and store mapped to the C++ atomic of the same strength, loopback
launches at 2, 4 and 8 virtual ranks over 1 to 3 trees (and 2 or 3 blocks per tree), float32
and float16, odd sizes and buffers that start off a 16-byte boundary, two calls each. No race is reported and the bits are
the runner's.

The detector is shown to work on this very kernel: the same source with the acquire after the
reader's poll (``bf_wait``) made relaxed, or the writer's release (``bf_post``) made relaxed, is
reported as racing; the PTX memory model makes the same demands of a GPU.
"""
import dataclasses

import numpy as np
import pytest

from blinkflow.backends import device_abi as abi
from blinkflow.backends.cuda import kernels
from blinkflow.planner import make_plan
from blinkflow.schedule.device_tables import build_tables
from blinkflow.schedule.lower import lower
from blinkflow.topology.presets import get_preset

import kernel_race
from test_device_emulator import fused_reduction
from test_runner import run_ranks

INSTANCES = (("float32", 0), ("float16", 0))
THREADS = 4
"""Threads per emulated block: a small team, so barriers and the split of a step among threads
are real and a launch of 8 ranks x 3 trees stays under a hundred threads."""
ACQUIRE = "    bf_ld_acquire_sys(counter);\n"
RELEASE = "bf_st_release_sys(counter, value);"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("interpreter_race")
    missing = kernel_race.tsan_missing(d)
    if missing:
        pytest.skip(missing)
    return d


@pytest.fixture(scope="module")
def shipped(workdir):
    return kernel_race.build(workdir, INSTANCES)


def _edited(old: str, new: str) -> str:
    source = kernels.module_source("interpreter.cu")
    assert source.count(old) == 1, f"the kernel no longer has exactly one {old.strip()!r}: update this test"
    return source.replace(old, new)


def _tables(nranks: int, ntrees: int, nelems: int, chunk: int, lanes: int = 1):
    """Every rank's tables of an all-reduce over the first ``ntrees`` trees of the HGX H100
    plan of ``nranks`` GPUs (each tree carrying an equal share), ``lanes`` blocks per tree."""
    topology = get_preset("hgx-h100")
    devices = list(topology.compute_ids[:nranks])
    plan = make_plan(topology, "allreduce", devices=devices)
    assert len(plan.trees) >= ntrees
    trees = tuple(dataclasses.replace(t, fraction=1.0 / ntrees) for t in plan.trees[:ntrees])
    schedule = lower(dataclasses.replace(plan, trees=trees), nelems, chunk)
    tables = build_tables(schedule, {d: r for r, d in enumerate(devices)}, 2, 7, lanes)
    return schedule, [tables[r] for r in range(nranks)]


def _run(exe, workdir, nranks, ntrees, dtype, nelems, chunk, misalign, seed, lanes=1):
    schedule, tables = _tables(nranks, ntrees, nelems, chunk, lanes)
    rng = np.random.default_rng(seed)
    inputs = [[(rng.standard_normal(schedule.nelems) * 100).astype(dtype) for _ in range(2)] for _ in range(nranks)]
    launch = abi.loopback(tables, np.dtype(dtype).itemsize)
    calls = [np.stack([inputs[r][c] for r in range(nranks)]) for c in range(2)]
    result = kernel_race.run(exe, workdir, launch, calls, f"interpreter_{np.dtype(dtype).name}_0", THREADS,
                             misalign=misalign)
    return schedule, inputs, result


CASES = [
    # nranks, trees, dtype, elements, chunk, buffer misalignment in bytes, blocks per tree
    (2, 1, np.float32, 1003, 61, 0, 1),
    (2, 2, np.float16, 517, 40, 2, 1),
    (2, 1, np.float16, 999, 64, 0, 3),
    (4, 2, np.float32, 333, 28, 4, 1),
    (4, 3, np.float16, 1001, 64, 0, 1),
    (4, 2, np.float32, 701, 64, 4, 2),
    (8, 1, np.float16, 389, 24, 6, 1),
    (8, 3, np.float32, 611, 32, 8, 1),
]


@pytest.mark.parametrize("nranks,ntrees,dtype,nelems,chunk,misalign,lanes", CASES,
                         ids=[f"{c[0]}ranks-{c[1]}trees-{np.dtype(c[2]).name}-{c[3]}-off{c[5]}-lanes{c[6]}" for c in CASES])
def test_the_shipped_kernel_has_no_race_and_is_bitwise_the_runner(shipped, workdir, nranks, ntrees, dtype, nelems,
                                                                   chunk, misalign, lanes):
    schedule, inputs, result = _run(shipped, workdir, nranks, ntrees, dtype, nelems, chunk, misalign,
                                    nranks * 10 + ntrees, lanes)
    assert result.warnings == 0 and result.status == 0, result.stderr[-6000:]
    want = run_ranks([schedule, schedule], inputs, nslots=2, op="sum", fuse=7, reduce_all=fused_reduction("sum"))
    for call, got in enumerate(result.outputs):
        for r in range(nranks):
            assert got[r].tobytes() == want[(r, call)].tobytes(), (r, call)


@pytest.mark.parametrize("old,new,what", [(ACQUIRE, "    bf_ld_relaxed_sys(counter);\n", "acquire"),
                                          (RELEASE, "__atomic_store_n(counter, value, __ATOMIC_RELAXED);", "release")],
                         ids=["acquire", "release"])
def test_the_detector_reports_a_removed_acquire_or_release(workdir, old, new, what):
    exe = kernel_race.build(workdir, INSTANCES[:1], _edited(old, new), name=f"interpreter_no_{what}")
    _, _, result = _run(exe, workdir, 2, 1, np.float32, 256, 64, 0, 1)
    assert result.races > 0, f"ThreadSanitizer saw no race with the {what} removed:\n{result.stderr[-3000:]}"
    # ... and the race it reports is the protocol's: a slot or buffer read against its writer
    assert "bf_ld_volatile" in result.stderr or "bf_load_volatile" in result.stderr, result.stderr[-3000:]
