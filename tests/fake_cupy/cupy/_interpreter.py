"""The fake's device executor kernel (``blinkflow_interpreter<T, OP>`` of kernels/interpreter.cu):
the launch's blocks run blinkflow's numpy interpreter (``blinkflow.backends.device_emulator``),
one thread each, on the launch arrays and raw addresses the real kernel receives (rings and
counters in shared memory, written by peers in other processes). Like every fake kernel it is
issued on the stream and runs when the stream is flushed (the host's wait for its event).

Residency is a GPU's: a device holds ``FAKE_CUPY_SMS`` x :data:`FAKE_BLOCKS_PER_SM` blocks, less
:data:`OTHER_RESIDENT_BLOCKS` held by other work (TF/XLA kernels, another spinning kernel, an MPS
share), which the occupancy query does not see. A cooperative launch
(``enable_cooperative_groups=True``) of more blocks than are free fails at once
(``cudaErrorCooperativeLaunchTooLarge``); a plain launch of them starts, and its blocks that got
an SM wait for the others forever: they spin until the abort flag is raised, as on a GPU.
:data:`FAIL_LAUNCHES` makes the next launches fail as a launch can (out of resources)."""
import os
import re
import time

import numpy as np

_DTYPES = {"bf_half": np.float16, "float": np.float32, "double": np.float64, "int": np.int32,
           "long long": np.int64, "bf_u8": np.uint8}
_OPS = [np.add, np.minimum, np.maximum, np.multiply]
FAKE_BLOCKS_PER_SM = 8
"""What the fake's occupancy query answers (``cupy.cuda.driver``)."""
OTHER_RESIDENT_BLOCKS = int(os.environ.get("FAKE_CUPY_RESIDENT_BLOCKS", "0"))
"""Blocks of other work resident on each device (a case may change it)."""
FAIL_LAUNCHES = 0
"""The next this many launches raise ``cudaErrorLaunchOutOfResources`` (a case sets it)."""
STALL_LIMIT_S = 600.0
"""A stalled launch whose abort flag nobody raises ends after this long (the test's timeout
reports it first)."""


def free_blocks() -> int:
    """Blocks the current device can still hold at once."""
    from .cuda import runtime

    sms = int(runtime.getDeviceProperties(runtime.getDevice())["multiProcessorCount"])
    return sms * FAKE_BLOCKS_PER_SM - OTHER_RESIDENT_BLOCKS


class InterpreterKernel:
    """A launchable ``blinkflow_interpreter<T, OP>`` (with ``.kernel.ptr`` for occupancy queries)."""

    def __init__(self, expr):
        m = re.fullmatch(r"blinkflow_interpreter<([a-z_0-9 ]+), (\d)>", expr)
        if m is not None and m.group(1) == "bf_bfloat16":  # the bits of bfloat16, as ml_dtypes computes them
            from ml_dtypes import bfloat16

            self.dtype = np.dtype(bfloat16)
        elif m is None or m.group(1) not in _DTYPES:
            raise NotImplementedError(f"fake cupy does not emulate {expr}")
        else:
            self.dtype = np.dtype(_DTYPES[m.group(1)])
        self.op = _OPS[int(m.group(2))]
        self.kernel = type("Function", (), {"ptr": id(self)})()

    def __call__(self, grid, block, args, shared_mem=0, stream=None, enable_cooperative_groups=False):
        from . import _devices, _streams

        global FAIL_LAUNCHES
        if FAIL_LAUNCHES > 0:
            FAIL_LAUNCHES -= 1
            raise _devices.CUDARuntimeError("cudaErrorLaunchOutOfResources: too many resources requested for launch")
        nblocks, free = int(grid[0]), free_blocks()
        run = self._run
        if nblocks > free:
            if enable_cooperative_groups:
                raise _devices.CUDARuntimeError(f"cudaErrorCooperativeLaunchTooLarge: {nblocks} blocks, {free} can be "
                                                "resident on the device")
            run = self._stall
        queue = None if stream is None else stream._queue
        _streams.launch(lambda: run(grid, args), queue)

    def _stall(self, grid, args):
        """The blocks that got an SM wait for those that never will, until the abort flag rises."""
        from blinkflow.backends.host_memory import view

        abort = view(int(args[8]), 1, np.int32)
        deadline = time.monotonic() + STALL_LIMIT_S
        while not abort[0] and time.monotonic() < deadline:
            time.sleep(0.001)

    def _run(self, grid, args):
        """Read the launch arrays back from the addresses the kernel gets (their lengths follow
        from the steps, as the kernel's reads do) and run every block on its buffer."""
        from blinkflow.backends import device_abi as abi
        from blinkflow.backends.device_emulator import run_blocks
        from blinkflow.backends.host_memory import view

        buf, offsets, steps, inputs, waits, block_start, conns, progress, abort, call, window, slot_elems = args
        nblocks = int(grid[0])
        starts = view(_ptr(block_start), nblocks + 1, np.int64).copy()
        table = view(_ptr(steps), int(starts[-1]) * abi.STEP_FIELDS, np.int64).reshape(-1, abi.STEP_FIELDS).copy()
        nwaits = int(max((r[abi.STEP_WAIT_START] + r[abi.STEP_WAIT_COUNT] for r in table), default=0))
        ninputs = int(max((r[abi.STEP_RECV_START] + r[abi.STEP_RECV_COUNT] for r in table), default=0))
        ins = view(_ptr(inputs), 2 * ninputs, np.int64).reshape(-1, 2).copy()
        nconns = 1 + int(max([r[abi.STEP_SEND_ROW] for r in table] + [int(c) for c in ins[:, 0]], default=-1))
        enc = abi.EncodedTables(steps=table, inputs=ins,
                                waits=view(_ptr(waits), 2 * nwaits, np.int64).reshape(-1, 2).copy(),
                                block_start=starts, transfers=np.zeros(nconns, np.int64),
                                nrecv=-1, window=int(window), slot_elems=int(slot_elems))
        rows = view(_ptr(conns), nconns * abi.CONN_FIELDS, np.int64).reshape(-1, abi.CONN_FIELDS).copy()
        data = view(_ptr(buf), int(np.asarray(buf).size), self.dtype)
        offsets = view(_ptr(offsets), nblocks, np.int64)
        bufs = [data[int(o):] for o in offsets]
        run_blocks(enc, bufs, rows, view(int(progress), nblocks, np.int64), view(int(abort), 1, np.int32),
                   int(call), self.op)


def _ptr(a):
    return a.data.ptr if hasattr(a, "data") and hasattr(a.data, "ptr") else int(a)
