"""The stuck-block report of an aborted device-executor launch (blinkflow.backends.stuck_blocks),
checked against the counters the loopback emulator leaves in its memory block: nothing stuck after
a finished call; for a call that never ran, the blocks that wait on a counter; with one receive's
tail held back by one, exactly the block that receives that chunk."""
import numpy as np
import pytest

from blinkflow.backends.device_emulator import EmulatedLoopback
from blinkflow.backends.stuck_blocks import conn_counters, describe, stuck_blocks
from blinkflow.bench.loopback_executor import loopback_tables
from blinkflow.planner import make_plan
from blinkflow.schedule.lower import lower
from blinkflow.topology.presets import get_preset


@pytest.fixture(scope="module")
def finished():
    """A 4-virtual-rank all-reduce on an HGX H100's trees after one emulated call."""
    topo = get_preset("hgx-h100")
    devices = list(topo.compute_ids[:4])
    schedule = lower(make_plan(topo, "allreduce", devices=devices), 1003, 64)
    run = EmulatedLoopback(loopback_tables(schedule), np.float32)
    run.run(np.ones((4, schedule.nelems), np.float32), np.add)
    return run


def counters(run):
    lay = run.launch
    memory = run.memory.copy()
    progress = memory[lay.progress_offset:lay.progress_offset + 8 * lay.encoded.nblocks].view(np.int64).copy()
    return progress, conn_counters(memory, lay.conn_offsets, 1), conn_counters(memory, lay.conn_offsets, 2)


def test_a_finished_call_leaves_no_block_waiting(finished):
    progress, tails, heads = counters(finished)
    assert stuck_blocks(finished.launch.encoded, 0, progress, tails, heads) == []
    assert "not stuck" in describe([])


def test_a_call_that_never_ran_names_the_blocks_that_wait(finished):
    progress, tails, heads = counters(finished)
    stuck = stuck_blocks(finished.launch.encoded, 1, progress, tails, heads)
    assert stuck, "call 1 never ran: some block must wait for a chunk"
    assert all(s.have < s.want for s in stuck)
    assert any("tail of connection" in s.counter for s in stuck)


def test_one_chunk_held_back_names_its_receiver(finished):
    progress, tails, heads = counters(finished)
    enc = finished.launch.encoded
    row = int(np.argmax(enc.transfers))
    tails[row] -= 1  # the last chunk of that connection never arrived
    ranks = (finished.launch.block_offsets // finished.launch.nelems).tolist()
    stuck = stuck_blocks(enc, 0, progress, tails, heads, ranks)
    receivers = [b for b in range(enc.nblocks)
                 for i in range(int(enc.block_start[b]), int(enc.block_start[b + 1]))
                 for j in range(int(enc.steps[i][4]), int(enc.steps[i][4] + enc.steps[i][5]))
                 if int(enc.inputs[j][0]) == row and int(enc.inputs[j][1]) == int(enc.transfers[row]) - 1]
    assert len(receivers) == 1
    held = [s for s in stuck if "tail" in s.counter or "head" in s.counter]
    assert [(s.block, s.counter, s.want, s.have) for s in held] == [
        (receivers[0], f"the tail of connection {row} (a chunk to receive)", int(enc.transfers[row]),
         int(enc.transfers[row]) - 1)]
    # Any other block named waits for a block's progress: it is downstream of the held-back chunk.
    assert all("progress" in s.counter for s in stuck if s not in held)
    assert f"block {receivers[0]} (virtual rank {ranks[receivers[0]]})" in describe(stuck, limit=len(stuck))
