"""Small hand-built schedules for testing executors without the planner's lowering.

Chains are Blink's simplest spanning trees; two chains in opposite directions on two channels
exercise per-channel streams and slots the way a packed tree set does.
"""
from typing import Dict, List, Sequence

from blinkflow.planner.schedule import Schedule, Step


def chain_allreduce(devices: Sequence[int], nelems: int, chunk: int, nchannels: int = 1) -> Schedule:
    """Reduce up a chain to its last device, then broadcast back down, chunk by chunk.

    With ``nchannels`` > 1 the buffer is split into that many parts; part c rides channel c on
    the chain rotated by c (so roots differ and both directions of the links are used)."""
    devices = list(devices)
    programs: Dict[int, List[Step]] = {d: [] for d in devices}
    parts = [(c * nelems // nchannels, (c + 1) * nelems // nchannels) for c in range(nchannels)]
    for c, (lo, hi) in enumerate(parts):
        order = devices[c:] + devices[:c]
        n = len(order)
        for start in range(lo, hi, chunk):
            cnt = min(chunk, hi - start)
            for i, d in enumerate(order):  # reduce towards order[-1]
                if n == 1:
                    break
                if i == 0:
                    programs[d].append(Step("send", start, cnt, peer=order[1], channel=c))
                elif i < n - 1:
                    programs[d].append(Step("recv_reduce_send", start, cnt, peer=order[i - 1], send_to=order[i + 1], channel=c))
                else:
                    programs[d].append(Step("recv_reduce", start, cnt, peer=order[i - 1], channel=c))
            for i in range(n - 1, -1, -1):  # broadcast back down from the root
                d = order[i]
                if n == 1:
                    break
                if i == n - 1:
                    programs[d].append(Step("send", start, cnt, peer=order[i - 1], channel=c))
                elif i > 0:
                    programs[d].append(Step("recv_send", start, cnt, peer=order[i + 1], send_to=order[i - 1], channel=c))
                else:
                    programs[d].append(Step("recv", start, cnt, peer=order[1], channel=c))
    schedule = Schedule(collective="allreduce", devices=tuple(devices), nelems=nelems, chunk_elems=chunk,
                        programs=tuple((d, tuple(programs[d])) for d in devices), nchannels=nchannels)
    schedule.validate()
    return schedule
