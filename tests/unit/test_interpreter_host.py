"""The real ``kernels/interpreter.cu`` compiled as C++ and run on the CPU (``kernel_host``): every
thread of every block of a loopback launch is an OS thread, thread 0 of each block spinning on
the same int64 counters a GPU's blocks spin on, in the same memory layout
(``device_abi.loopback``), the block's threads meeting at a real barrier. Bitwise the runner's results (an
action's inputs folded as the cuda runner's fused kernel does) at 2, 4 and 8 virtual ranks on
HGX H100 trees, for float32, float16, bfloat16 and int64, across two calls, on buffers whose
steps take the 16-byte vector path and on buffers whose steps cannot; a table that waits forever
ends when the abort flag is raised.

This checks the kernel's own code (step decoding, waits, multi-input combination, posts, block
offsets, the unrolled vector loop, scalar heads and tails, the split of a step among threads)
where the emulator tests check its numpy twin; its memory ordering is checked under
ThreadSanitizer by ``test_interpreter_race.py``."""
import ctypes
import threading

import numpy as np
import pytest

from blinkflow.backends import device_abi as abi
from blinkflow.backends.host_memory import address, view
from blinkflow.planner import make_plan
from blinkflow.schedule.device_tables import BlockTable, DeviceStep, RankTables, build_tables
from blinkflow.schedule.lower import lower
from blinkflow.topology.presets import get_preset

from kernel_host import CXX, build_interpreter
from test_device_emulator import fused_reduction
from test_runner import run_ranks

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")
CODES = {"sum": 0, "max": 2}
THREADS = 3
"""Threads per emulated block: several, so the block's barriers and shared state are exercised,
and odd, so a step's elements divide unevenly among them."""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_interpreter(tmp_path_factory.mktemp("interpreter"))


class HostLoopback:
    """A loopback launch's memory in numpy, run by the host-compiled kernel."""

    def __init__(self, lib, tables, dtype_name, op, threads=THREADS):
        self.itemsize = 2 if dtype_name == "bfloat16" else np.dtype(dtype_name).itemsize
        self.launch = abi.loopback(tables, self.itemsize)
        self.memory = np.zeros(self.launch.nbytes, np.uint8)
        enc = self.launch.encoded
        self.arrays = [np.ascontiguousarray(a, np.int64) if a.size else np.zeros(1, np.int64)
                       for a in (self.launch.block_offsets, enc.steps, enc.inputs, enc.waits, enc.block_start,
                                 self.launch.conns(address(self.memory)))]
        self.progress = view(address(self.memory) + self.launch.progress_offset, enc.nblocks, np.int64)
        self.entry = getattr(lib, f"interpreter_{dtype_name}_{CODES[op]}")
        # bufs, block offsets, steps, inputs, waits, block starts, conns, progress, abort; call,
        # window, slot elements; blocks
        # blocks, threads per block
        self.entry.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_longlong] * 3 + [ctypes.c_int] * 2
        self.threads = threads
        self.calls = 0

    def run(self, bufs, timeout=60.0):
        """One call on the rows of ``bufs``; False when it had to be aborted."""
        abort = np.zeros(1, np.int32)
        enc = self.launch.encoded
        args = [address(bufs)] + [address(a) for a in self.arrays] + [address(self.progress), address(abort)]
        kernel = threading.Thread(target=self.entry, args=(*args, self.calls, enc.window, enc.slot_elems, enc.nblocks,
                                                                  self.threads),
                                  daemon=True)
        kernel.start()
        kernel.join(timeout)
        if kernel.is_alive():
            abort[0] = 1
            kernel.join()
            return False
        self.calls += 1
        return True


def _dtypes():
    from test_device_emulator import _bfloat16

    return ((np.float32, "sum"), (np.float16, "sum"), (_bfloat16(), "sum"), (np.int64, "max"))


@pytest.mark.parametrize("nranks", [2, 4, 8])
@pytest.mark.parametrize("nelems,chunk", [(1024, 64), (301, 13)], ids=["vector", "scalar"])
def test_the_kernel_is_bitwise_the_runner(lib, nranks, nelems, chunk):
    topology = get_preset("hgx-h100")
    devices = list(topology.compute_ids[:nranks])
    schedule = lower(make_plan(topology, "allreduce", devices=devices), nelems, chunk)
    tables = build_tables(schedule, {d: r for r, d in enumerate(devices)}, 2, 7)
    rng = np.random.default_rng(nranks)
    for dtype, op in _dtypes():
        inputs = [[(rng.standard_normal(schedule.nelems) * 100).astype(dtype) for _ in range(2)] for _ in devices]
        want = run_ranks([schedule, schedule], inputs, nslots=2, op=op, fuse=7, reduce_all=fused_reduction(op))
        name = np.dtype(dtype).name
        launch = HostLoopback(lib, [tables[r] for r in range(nranks)], name, op)
        for call in range(2):
            bufs = np.stack([inputs[r][call] for r in range(nranks)])
            storage = bufs.view(np.uint16) if name == "bfloat16" else bufs
            assert launch.run(storage), "the kernel did not finish"
            for r in range(nranks):
                assert bufs[r].tobytes() == want[(r, call)].tobytes(), (r, call, name, op)


def test_a_table_that_waits_forever_ends_when_the_flag_is_raised(lib):
    t = RankTables(0, 8, 1, 4, (BlockTable(0, (DeviceStep("copy", 0, 2, src_offset=4, waits=((1, 1),)),)),
                                BlockTable(1, (DeviceStep("copy", 2, 2, src_offset=6, waits=((0, 1),)),))), (), ())
    launch = HostLoopback(lib, [t], "float32", "sum")
    assert not launch.run(np.zeros((1, 8), np.float32), timeout=0.5)
