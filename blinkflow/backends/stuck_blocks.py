"""Which blocks of an aborted device-executor launch were stuck, and on what: read from the
counters the launch left behind.

A block of ``kernels/interpreter.cu`` walks its steps in order and, before each, waits for three
kinds of counter (:mod:`.device_abi`): another block's ``progress``, the ``tail`` of each
connection it receives from (the sender posts ``seq + 1`` once the slot holds the data) and, when
it sends, the ``head`` of that connection (the receiver posts ``seq + 1`` once it consumed the
slot, so ``window`` slots may be ahead). Counters never go back, so once a launch has returned
(done, or aborted by the deadline) the first step of a block whose wait the final counters do not
satisfy is where that block stopped: every earlier step's waits were met, and a block that is not
waiting runs on. A block whose every wait is met finished its steps.

This is how a deadline names the stuck block and the counter it waited for, instead of only
saying that a launch took too long. Pure numpy: the caller copies the counters back.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

import numpy as np

from .device_abi import (STEP_RECV_COUNT, STEP_RECV_START, STEP_SEND_ROW, STEP_SEND_SEQ,
                         STEP_WAIT_COUNT, STEP_WAIT_START, EncodedTables)


@dataclasses.dataclass(frozen=True)
class StuckBlock:
    """Block ``block`` of the launch stopped before its step ``step`` (counted within the block),
    waiting for ``counter`` to reach ``want``; it held ``have``."""

    block: int
    step: int
    counter: str
    want: int
    have: int
    rank: Optional[int] = None
    """The virtual rank the block belongs to, in a loopback launch."""

    def __str__(self) -> str:
        who = f"block {self.block}" + (f" (virtual rank {self.rank})" if self.rank is not None else "")
        return f"{who} before its step {self.step}: {self.counter} at {self.have}, waiting for {self.want}"


def stuck_blocks(enc: EncodedTables, call: int, progress: Sequence[int], tails: Sequence[int],
                 heads: Sequence[int], block_rank: Optional[Sequence[int]] = None) -> List[StuckBlock]:
    """The blocks of ``enc`` that call ``call`` (counted from 0 per call shape) left waiting,
    given the final ``progress`` (per block) and each ``conns`` row's ``tails`` and ``heads``."""
    stride = enc.progress_stride
    out: List[StuckBlock] = []
    for b in range(enc.nblocks):
        first, last = int(enc.block_start[b]), int(enc.block_start[b + 1])
        for i in range(first, last):
            s = enc.steps[i]
            found = None
            for w in range(int(s[STEP_WAIT_START]), int(s[STEP_WAIT_START] + s[STEP_WAIT_COUNT])):
                other, value = (int(x) for x in enc.waits[w])
                want = call * stride + value
                if progress[other] < want:
                    found = (f"block {other}'s progress", want, int(progress[other]))
                    break
            for j in range(int(s[STEP_RECV_START]), int(s[STEP_RECV_START] + s[STEP_RECV_COUNT])):
                if found:
                    break
                row, seq = (int(x) for x in enc.inputs[j])
                want = call * int(enc.transfers[row]) + seq + 1
                if tails[row] < want:
                    found = (f"the tail of connection {row} (a chunk to receive)", want, int(tails[row]))
            row = int(s[STEP_SEND_ROW])
            if not found and row >= 0:
                want = call * int(enc.transfers[row]) + int(s[STEP_SEND_SEQ]) + 1 - enc.window
                if heads[row] < want:
                    found = (f"the head of connection {row} (a free slot to send into)", want, int(heads[row]))
            if found:
                out.append(StuckBlock(b, i - first, *found,
                                      rank=None if block_rank is None else int(block_rank[b])))
                break
    return out


def describe(stuck: Sequence[StuckBlock], limit: int = 4) -> str:
    """One sentence for an error message: the first ``limit`` stuck blocks."""
    if not stuck:
        return "no block was left waiting on a counter (the launch was slow, not stuck)"
    shown = "; ".join(str(s) for s in stuck[:limit])
    more = f"; and {len(stuck) - limit} more" if len(stuck) > limit else ""
    return f"{len(stuck)} block(s) stuck: {shown}{more}"


def conn_counters(memory: np.ndarray, offsets: np.ndarray, column: int) -> np.ndarray:
    """The int64 counter of each ``conns`` row at byte offset ``offsets[row, column]`` of
    ``memory`` (a uint8 copy of a loopback launch's memory block)."""
    return np.array([memory[o:o + 8].view(np.int64)[0] for o in offsets[:, column]], np.int64)
