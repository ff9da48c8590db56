"""The interface every executor implements, so the runtime never asks which backend it drives.

The runtime hands a backend flat, 1-D, C-contiguous buffers of one dtype (a fused batch's
tensors, as pieces, or a single tensor) and asks for one collective at a time, always in the same
order on every rank: an all-reduce is :meth:`Backend.allreduce_pieces` (run by the algorithm
:meth:`Backend.allreduce_algorithm` answers for its call shape), with a float's pre- and
postscale factors folded in; an integer's scaling, and every other collective's, are separate
:meth:`Backend.scale` calls. So ``op`` here is always an elementwise combiner
(``ReduceOp.combiner``: SUM, MIN, MAX or PRODUCT).

A backend gets everything it needs in a :class:`BackendContext`; communicators are passed in,
never fished from globals, so a process set or a test can hand a backend its own.
"""
from __future__ import annotations

import abc
import contextlib
import dataclasses
import functools
import itertools
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .. import scaling
from ..config import Config
from ..errors import BackendError
from ..ops import ReduceOp
from ..schedule import policy
from . import adasum


@dataclasses.dataclass(frozen=True)
class Layout:
    """Who is where: worked out once by the runtime's job set-up and handed to every backend.

    Hosts are numbered by their lowest rank and ranks keep their order within a host, so local
    and cross ranks are the same on every rank (the communicators in :class:`BackendContext`
    are split by exactly this)."""

    rank: int
    hosts: Tuple[int, ...]
    """``hosts[r]``: the host index of rank ``r`` (0 = the host of rank 0)."""
    devices: Tuple[int, ...]
    """``devices[r]``: the topology device id rank ``r`` drives."""

    @property
    def size(self) -> int:
        return len(self.hosts)

    @functools.cached_property
    def host_ranks(self) -> Tuple[Tuple[int, ...], ...]:
        """``host_ranks[h]``: the ranks of host ``h`` in local-rank order."""
        out: List[List[int]] = [[] for _ in range(max(self.hosts) + 1)]
        for r, h in enumerate(self.hosts):
            out[h].append(r)
        return tuple(tuple(ranks) for ranks in out)

    @property
    def local_ranks(self) -> Tuple[int, ...]:
        """The ranks of this rank's host, in local-rank order."""
        return self.host_ranks[self.hosts[self.rank]]

    @functools.cached_property
    def local_rank_of(self) -> Tuple[int, ...]:
        """``local_rank_of[r]``: rank ``r``'s place on its host."""
        out = [0] * self.size
        for ranks in self.host_ranks:
            for i, r in enumerate(ranks):
                out[r] = i
        return tuple(out)

    @property
    def local_rank(self) -> int:
        return self.local_rank_of[self.rank]

    @property
    def local_size(self) -> int:
        return len(self.local_ranks)

    @property
    def nhosts(self) -> int:
        return len(self.host_ranks)

    @property
    def even(self) -> bool:
        """Every host has the same number of ranks."""
        return len({len(ranks) for ranks in self.host_ranks}) == 1

    def same_host(self, r: int) -> bool:
        return self.hosts[r] == self.hosts[self.rank]

    @property
    def local_devices(self) -> Tuple[int, ...]:
        return tuple(self.devices[r] for r in self.local_ranks)


@dataclasses.dataclass
class BackendContext:
    """What the runtime gives a backend at construction."""

    comm: Any
    """mpi4py communicator of the job (or process set); its ranks are the participating ranks."""
    local_comm: Any
    """Ranks on the same host, ordered by global rank (``layout.local_ranks``)."""
    cross_comm: Any
    """Ranks with the same local rank on every host, ordered by host."""
    layout: Layout
    """Who is where (hosts, local ranks, devices), the same object on every rank."""
    topology: Any
    """The job's :class:`blinkflow.topology.Topology` (already subset to the allocated devices)."""
    plan_for: Callable[..., Any]
    """``plan_for(collective, root=None) -> Plan``: verified, memoised, and the same on every
    rank (the runtime compares digests before a plan first runs). ``root`` is a device id."""
    config: Config
    timeline: Optional[Any] = None
    """An object with ``start(name, phase)`` / ``end(name, phase)`` or None."""
    failure: Optional[Callable[[], Optional[BaseException]]] = None
    """Asked while a collective waits for a peer: an error it returns (a peer found gone) is
    raised instead of waiting on for a message that may never come."""

    @property
    def devices(self) -> Tuple[int, ...]:
        """``devices[r]`` is the topology device id that rank ``r`` drives."""
        return self.layout.devices


class Backend(abc.ABC):
    """Executes collectives on flat contiguous buffers; every call is collective over ``comm``.
    A backend sets ``self.ctx`` (its :class:`BackendContext`) and ``self.caps`` (its
    :class:`~blinkflow.schedule.policy.Capabilities`): the collectives written once here for
    every backend (the all-to-all, Adasum) use them."""

    name: str = "abstract"

    @abc.abstractmethod
    def buffer(self, nelems: int, dtype) -> Any:
        """A working buffer of ``nelems`` elements of ``dtype`` on which the collectives below run
        fastest (a shared-memory window, device memory); the runtime packs the fusion buffer into
        it to avoid an extra copy. Peers may still read a rank's buffer after that rank's
        collective returned, so a caller writes it only between getting it from ``buffer`` and
        the collective on it (packing, prescale) and afterwards only reads it (copy-out; the
        postscale runs on the copy): to write again, it asks ``buffer`` again, which hands out
        memory no peer reads any more. Readable until the next ``buffer`` call with a larger size."""

    @abc.abstractmethod
    def allreduce(self, buf, op: ReduceOp, out=None, scale: float = 1.0) -> None:
        """Combine ``buf`` elementwise across ranks; bitwise identical on every rank.

        In place when ``out`` is None. Otherwise the result times ``scale`` lands in ``out`` (same
        size and dtype, private to this rank) and ``buf`` is left in an unspecified state: the
        backend may fold the copy out and the scaling into its last pass over the data."""

    def allreduce_pieces(self, pieces: Sequence[Any], op: ReduceOp, out, scale: float = 1.0,
                         prescale: float = 1.0) -> None:
        """All-reduce the concatenation of ``pieces`` (flat C-contiguous arrays of ``out``'s dtype, ``out.size``
        elements in all, the same shapes on every rank), each first multiplied by ``prescale``
        (:meth:`scale`'s arithmetic), into ``out`` times ``scale``. The pieces are only read, and
        not after the call returns. By default they are packed into :meth:`buffer` and reduced
        there (timeline: COPY_IN); a backend that can read its peers' pieces where they lie, or
        pack them piecewise, overrides this to skip or bound the packing copy."""
        buf = self.buffer(out.shape[0], out.dtype)
        self._mark("start", "COPY_IN")
        self._pack(pieces, buf)
        if prescale != 1.0:
            self.scale(buf, prescale)
        self._mark("end", "COPY_IN")
        self.allreduce(buf, op, out=out, scale=scale)

    def allreduce_algorithm(self, nelems: int, dtype, npieces: int, in_place: bool) -> Callable[..., None]:
        """What runs an all-reduce of ``npieces`` tensors of ``nelems`` elements of ``dtype`` in
        all (``in_place``: no prescale, so the pieces may be read where they lie): a callable
        with :meth:`allreduce_pieces`' arguments, the registered algorithm the call-shape policy
        chose. The runtime's executor asks this and calls the answer, so the pieces go straight
        to the algorithm that moves them. By default (a backend that packs every call, whatever
        runs it after: the cuda backend) :meth:`allreduce_pieces` itself."""
        return self.allreduce_pieces

    def _pack(self, pieces: Sequence[Any], buf) -> None:
        """Copy ``pieces`` back to back into ``buf``: one C loop (a step's hundreds of gradients)."""
        if pieces:
            np.concatenate(pieces, out=buf)

    @abc.abstractmethod
    def broadcast(self, buf, root: int) -> None:
        """Overwrite ``buf`` on every rank with rank ``root``'s ``buf``, in place."""

    @abc.abstractmethod
    def allgather(self, send, recv, counts: Sequence[int]) -> None:
        """``recv`` (``sum(counts)`` elements) gets every rank's ``send`` (``counts[rank]``) in rank order."""

    @abc.abstractmethod
    def reducescatter(self, send, recv, counts: Sequence[int], op: ReduceOp) -> None:
        """Combine ``send`` (``sum(counts)`` elements) across ranks; rank r gets slice r in ``recv``."""

    def alltoall(self, send, send_counts: Sequence[int], recv, recv_counts: Sequence[int]) -> None:
        """Rank r sends ``send_counts[q]`` elements to rank q (in rank order) and receives
        ``recv_counts[q]`` from each. One implementation for every backend: Blink has no trees for
        it (every pair exchanges different data), so it is MPI's ``Alltoallv`` over the context's
        communicator, on the memory :meth:`_mpi_buffers` hands MPI."""
        from mpi4py import MPI

        item = send.dtype.itemsize
        sc = [int(c) * item for c in send_counts]
        rc = [int(c) * item for c in recv_counts]
        size = self.ctx.layout.size
        if len(sc) != size or len(rc) != size or sum(sc) > send.nbytes or sum(rc) > recv.nbytes:
            raise BackendError(f"alltoall: counts {list(send_counts)} / {list(recv_counts)} do not fit buffers of "
                               f"{send.size} / {recv.size} elements on {size} ranks")
        sd = [0] + list(itertools.accumulate(sc))[:-1]
        rd = [0] + list(itertools.accumulate(rc))[:-1]
        choice = self._choose("alltoall", sum(sc), item)
        self._mark("start", choice.phase)
        try:
            with self._mpi_buffers(send, recv) as (send_bytes, recv_bytes):
                self.ctx.comm.Alltoallv([send_bytes, (sc, sd), MPI.BYTE], [recv_bytes, (rc, rd), MPI.BYTE])
        finally:
            self._mark("end", choice.phase)

    @contextlib.contextmanager
    def _mpi_buffers(self, send, recv):
        """``send`` and ``recv`` as flat byte arrays MPI can read and write, for the time of the
        call; what MPI wrote into the second is in ``recv`` afterwards. Host memory: themselves."""
        yield send.reshape(-1).view(np.uint8), recv.reshape(-1).view(np.uint8)

    def _choose(self, collective: str, nbytes: int, itemsize: int) -> policy.Choice:
        """The call-shape policy's choice for a call (backends add what they know: trees, chunks)."""
        return policy.choose(collective, nbytes, itemsize, self.ctx.layout, self.ctx.config, self.caps)

    def _mark(self, what: str, phase: str) -> None:
        """A phase on the runtime's timeline (``what``: "start" or "end"), when one is on."""
        timeline = getattr(self.ctx, "timeline", None)
        if timeline is not None:
            getattr(timeline, what)("collective", phase)

    def adasum(self, buf, counts: Sequence[int]) -> None:
        """Replace ``buf`` (flat, host memory: tensors of ``counts`` elements back to back, whose
        dot products are taken tensor by tensor) by Horovod's Adasum of every rank's ``buf``. The
        call-shape policy's ``adasum`` algorithm (:mod:`.adasum`), run on the host over the
        context's communicator by every backend alike; it needs ``self.ctx`` and ``self.caps``."""
        if hasattr(buf, "__cuda_array_interface__"):
            raise BackendError("Adasum runs on host memory: copy a device buffer to the host first")
        ctx = self.ctx
        choice = policy.choose("allreduce", buf.nbytes, buf.itemsize, ctx.layout, ctx.config, self.caps,
                               op=ReduceOp.ADASUM)
        self._mark("start", choice.phase)
        try:
            adasum.allreduce(ctx.comm, buf, counts)
        finally:
            self._mark("end", choice.phase)

    def scale(self, buf, factor: float) -> None:
        """Multiply ``buf`` by ``factor`` in place (Average, pre/postscale) with Horovod's
        arithmetic (:mod:`blinkflow.scaling`)."""
        scaling.scale(buf, factor)

    def quiesce(self) -> None:
        """Wait until nothing this rank started can still write into a peer's memory (work it
        queued on a device). Before an elastic reset's agreement, so that the survivors may then
        free their memory without a barrier (:meth:`close_after_loss`)."""

    def close_after_loss(self) -> None:
        """:meth:`close` once peers were lost and every survivor has quiesced and agreed (an
        elastic reset's shrink): nothing may use this backend's communicators for a barrier."""
        self.close()

    def close(self) -> None:
        """Release shared memory, IPC handles, streams. Safe to call twice."""
