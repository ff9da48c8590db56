"""Measuring the network between a job's hosts at start-up (collective over the job).

The figures feed :func:`blinkflow.topology.measured_links.with_measured_links`, which replaces
the nominal network switch of the job's topology by a mesh of the measured pairs, so that the
planner's trees carry less over a slow pair of hosts (see that module for the model).

How it measures. The first rank of every host (its *leader*) meets every other leader once, in
rounds of a round-robin tournament (the circle method): in a round every leader has at most one
partner, so no NIC serves two measurements at once and each pair is measured alone, both
directions at the same time as an all-reduce uses them. A meeting is three exchanges on a
private duplicate of the job's communicator: a small one that opens the connection, a 1 MiB
one whose time both ends turn into the size of the timed ones (about :data:`TARGET_S` of
traffic, a power of two between :data:`MIN_BYTES` and :data:`MAX_BYTES`; each end proposes,
both take the larger), and :data:`TIMED_EXCHANGES` timed ones, each direction timed by both ends
so that a figure can only be too slow (the receiver from telling the sender to go until the data
is in, the sender until the receiver's acknowledgement is back: :func:`_exchange`), of which each
end keeps its fastest. Every rank then gathers every report and takes
the lowest figure of each direction (:func:`~blinkflow.topology.measured_links.agree`), so all
ranks plan with the same figures even when one end's measurement is off.

Cost: ``H - 1`` rounds for ``H`` hosts (``H`` when odd), each about ``TIMED_EXCHANGES x
TARGET_S`` plus the sizing exchange; 8 hosts at 1 Gbit/s take about 0.7 s. Jobs of two hosts skip it (all their
data crosses the one pair, so no plan can route around it), as do jobs whose hosts are
``BLINKFLOW_SPLIT_HOSTS`` blocks of one machine and jobs given a topology.

``python -m blinkflow.runtime.link_probe`` (what ``blinkrun topo --probe`` launches) measures
and prints the table on rank 0.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..backends import quiet_wait, teardown
from ..errors import TopologyError
from ..topology.measured_links import LinkRates, agree

#: Seconds of traffic each of a pair's timed exchanges aims at, and how many it times.
TARGET_S = 0.03
TIMED_EXCHANGES = 3
MIN_BYTES = 1 << 20
MAX_BYTES = 64 << 20
_SIZING_BYTES = 1 << 20
_OPEN_BYTES = 4096
_TAG = 0x4C50  # "LP"

Pair = Tuple[str, str]


def rounds(count: int) -> List[List[Tuple[int, int]]]:
    """Round-robin pairings of ``count`` players (the circle method): every pair meets once,
    nobody twice in a round; with an odd count one player sits each round out.

    >>> rounds(4)
    [[(0, 3), (1, 2)], [(0, 2), (1, 3)], [(0, 1), (2, 3)]]
    """
    players: List[Optional[int]] = list(range(count)) + ([None] if count % 2 else [])
    n = len(players)
    out = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = players[i], players[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        players = [players[0], players[-1]] + players[1:-1]
    return out


def wanted(config, hosts: Sequence[str]) -> bool:
    """Whether a job on ``hosts`` (``hosts[r]``: rank r's) measures its links at start-up."""
    return bool(config.link_probe) and not config.topology and not config.split_hosts and len(set(hosts)) >= 3


def measured_topology(comm, config, topology, hosts: Sequence[str]):
    """``topology`` planned on measured links when :func:`wanted` (collective), else itself."""
    if not wanted(config, hosts):
        return topology
    from ..topology.measured_links import with_measured_links
    from .log import logger

    rates = probe_links(comm, hosts)
    if comm.Get_rank() == 0:
        logger.info("measured links, GB/s:\n%s\n%s", rates.table(), rates.verdict())
    try:
        return with_measured_links(topology, rates)
    except TopologyError as e:   # the same figures and topology on every rank: all keep the nominal one
        if comm.Get_rank() == 0:
            logger.warning("planning on nominal rates although the pairs of hosts differ: %s", e)
        return topology


def probe_links(comm, hosts: Sequence[str]) -> LinkRates:
    """Collective over ``comm``: the agreed rate of every ordered pair of the hosts.

    ``hosts[r]`` is rank r's host; each host's lowest rank measures, the others wait in the
    final gather."""
    rank = comm.Get_rank()
    order = list(dict.fromkeys(hosts))
    leaders = [hosts.index(h) for h in order]
    report: Dict[Pair, float] = {}
    probe = comm.Dup()
    try:
        if rank in leaders:
            me = leaders.index(rank)
            buffers = _Buffers()
            for pairs in rounds(len(order)):
                for a, b in pairs:
                    if me in (a, b):
                        peer = b if me == a else a
                        report.update(_meet(probe, leaders[peer], order[me], order[peer], buffers))
        # Ranks done first (the non-leaders at once) must not spin a core in a blocking
        # collective while pairs are still timing their transfers on the same machine.
        quiet_wait.wait(probe.Ibarrier())
        reports = probe.allgather(report)
    finally:
        teardown.free(probe)
    return LinkRates.of(order, agree(reports))


class _Buffers:
    """Send and receive buffers, grown as the sizes need."""

    def __init__(self):
        self.send = np.zeros(0, np.uint8)
        self.recv = np.zeros(0, np.uint8)
        self.token, self.go, self.ack = (np.zeros(1, np.uint8) for _ in range(3))

    def get(self, nbytes: int):
        if self.send.nbytes < nbytes:
            self.send = np.ones(nbytes, np.uint8)
            self.recv = np.empty(nbytes, np.uint8)
        return self.send[:nbytes], self.recv[:nbytes]


def _meet(comm, peer: int, me: str, other: str, buffers: _Buffers) -> Dict[Pair, float]:
    """Both ends of one pair run this at once; returns this end's figures for both directions."""
    _open(comm, peer, buffers)
    _, received = _exchange(comm, peer, _SIZING_BYTES, buffers)
    mine = _size_for(_SIZING_BYTES / received)
    theirs = comm.sendrecv(mine, dest=peer, sendtag=_TAG, source=peer, recvtag=_TAG)
    size = max(mine, theirs)
    # The best of a few: a transfer is only ever slowed (TCP's ramp, a scheduler's hiccup),
    # never sped up, so the fastest is the closest to what the pair carries.
    times = [_exchange(comm, peer, size, buffers) for _ in range(TIMED_EXCHANGES)]
    sent, received = min(t[0] for t in times), min(t[1] for t in times)
    return {(me, other): size / sent / 1e9, (other, me): size / received / 1e9}


def _open(comm, peer: int, buffers: _Buffers) -> None:
    """A small exchange that opens the connection; waited for without spinning, since the
    peer may still be meeting someone else (this leader sat the last round out)."""
    from mpi4py import MPI

    send, recv = buffers.get(_OPEN_BYTES)
    for request in (comm.Irecv([recv, MPI.BYTE], source=peer, tag=_TAG),
                    comm.Isend([send, MPI.BYTE], dest=peer, tag=_TAG)):
        quiet_wait.wait(request)


def _exchange(comm, peer: int, nbytes: int, buffers: _Buffers) -> Tuple[float, float]:
    """Send and receive ``nbytes`` with ``peer`` at once; seconds this end's data took to reach
    the peer and the peer's data took to reach this end, each measured so it can only be too
    long, never too short (one message latency over): a receiver times from the moment it told
    the sender to go until the data is in, a sender from its start until the receiver's
    acknowledgement is back. A send's own completion would say nothing (MPI returns once the
    data is in the socket's buffer, megabytes early), and two ends' clocks do not start together."""
    from mpi4py import MPI

    send, recv = buffers.get(nbytes)
    token = buffers.token
    data_in = comm.Irecv([recv, MPI.BYTE], source=peer, tag=_TAG)
    go_in = comm.Irecv([buffers.go, MPI.BYTE], source=peer, tag=_TAG + 1)
    ack_in = comm.Irecv([buffers.ack, MPI.BYTE], source=peer, tag=_TAG + 2)
    told = time.perf_counter()
    go_out = comm.Isend([token, MPI.BYTE], dest=peer, tag=_TAG + 1)
    go_in.Wait()
    started = time.perf_counter()
    data_out = comm.Isend([send, MPI.BYTE], dest=peer, tag=_TAG)
    sent_s = received_s = 0.0
    ack_out = MPI.REQUEST_NULL
    waiting = [data_in, ack_in]
    for _ in waiting:
        index = MPI.Request.Waitany(waiting)  # a completed request becomes MPI_REQUEST_NULL
        if index == 0:
            received_s = time.perf_counter() - told
            ack_out = comm.Isend([token, MPI.BYTE], dest=peer, tag=_TAG + 2)
        else:
            sent_s = time.perf_counter() - started
    MPI.Request.Waitall([go_out, data_out, ack_out])
    return max(sent_s, 1e-9), max(received_s, 1e-9)


def _size_for(bytes_per_s: float) -> int:
    """The largest power of two of bytes within ``TARGET_S`` of traffic at this rate, kept
    between ``MIN_BYTES`` and ``MAX_BYTES``."""
    want = bytes_per_s * TARGET_S
    size = MIN_BYTES
    while size * 2 <= want and size * 2 <= MAX_BYTES:
        size *= 2
    return size


def main() -> None:
    """``python -m blinkflow.runtime.link_probe``: measure the job's hosts, print on rank 0."""
    from mpi4py import MPI

    from ..config import get_config
    from .discovery import host_of

    comm = MPI.COMM_WORLD
    config = get_config()
    host = host_of(comm.Get_rank(), comm.Get_size(), config.split_hosts, MPI.Get_processor_name())
    hosts = comm.allgather(host)
    if len(set(hosts)) < 2:
        if comm.Get_rank() == 0:
            print(f"one host ({hosts[0]}): nothing to measure; launch on several hosts (blinkrun topo --probe -H ...)")
        return
    start = time.perf_counter()
    rates = probe_links(comm, hosts)
    took = time.perf_counter() - start
    if comm.Get_rank() == 0:
        print(f"measured links between {len(set(hosts))} hosts, GB/s (1e9 B/s), in {took:.2f} s:")
        print(rates.table())
        print(rates.verdict())


if __name__ == "__main__":
    main()
