"""Runs the responses of a cycle on the backend and completes the entries they answer.

Called on the background thread with the cycle's responses (identical on every rank). All-reduces
are fused (see :mod:`fusion`) and each batch is one call of the algorithm the backend answers for
its call shape (``backend.allreduce_algorithm``, with ``allreduce_pieces``' arguments, on every
backend: packed or read in place, prescaled, reduced, written scaled into a private array), then
unpacked into views of that array. Other collectives run one by one on fresh arrays. A rank that
has *joined* takes part in collectives it did not submit with zeros (all-reduce) or nothing
(all-gather).
Results are always new arrays; inputs are never written.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Dict, List, NamedTuple, Optional

import numpy as np

from .. import scaling
from ..errors import (BlinkflowError, DuplicateNameError, InvalidArgumentError, PlanError, ProcessSetError,
                      ScheduleError, ShutdownError, TensorMismatchError)
from ..ops import ReduceOp
from .fusion import Batch, make_batches
from .messages import Kind, Request, Response, shown
from .result_pool import ResultPool
from .state import Entry, SharedState

#: Lists of responses whose batches the executor remembers (a training loop cycles through a few).
_PLANS_KEPT = 64
#: Responses those plans may hold alive in all: a step's worth of per-tensor responses fits, and
#: calls that never recur (thousands of unnamed fire-and-forget calls) are not kept by the
#: thousand.
_RESPONSES_KEPT = 4096
_ON_A_DEVICE = frozenset({Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST, Kind.REDUCESCATTER, Kind.ALLTOALL})
"""The kinds whose arrays live where their requests say (cpu, or a device the backend drives)."""
_ERRORS = {"TensorMismatchError": TensorMismatchError, "ShutdownError": ShutdownError,
           "InvalidArgumentError": InvalidArgumentError, "DuplicateNameError": DuplicateNameError,
           "ProcessSetError": ProcessSetError}


class _Step(NamedTuple):
    """A batch and what running it needs that depends only on the responses: worked out once per
    list of responses (a training loop repeats a few), not on every step, where it would run
    right after a large reduction flushed the caches."""

    batch: Batch
    names: List[str]
    """The names of the responses with pieces in the batch."""
    first: Optional[Request] = None
    """An all-reduce's request (the first of the first piece's response): op, scale, device."""
    dtype: Optional[np.dtype] = None
    op: Optional[ReduceOp] = None


class _Plan(NamedTuple):
    responses: List[Response]
    """The very responses it was made for (the key is their ids: kept alive, never reused)."""
    steps: List[_Step]
    members: List[int]
    """Pieces of each response (a group's members; 1 otherwise; 0 for an empty group)."""
    allreduce_bytes: int
    """Bytes the plan's all-reduces reduce (the autotuner's measure of work done)."""


def _plan_of(responses: List[Response], threshold: int) -> _Plan:
    steps = []
    allreduce_bytes = 0
    for batch in make_batches(responses, threshold):
        names = [responses[i].name for i in batch.responses]
        if batch.kind is Kind.ALLREDUCE:
            first = responses[batch.pieces[0].response].first()
            dtype = np.dtype(batch.pieces[0].dtype)
            steps.append(_Step(batch, names, first, dtype, ReduceOp(first.op)))
            allreduce_bytes += batch.total * dtype.itemsize
        else:
            steps.append(_Step(batch, names))
    members = [len(r.first().members()) if r.kind is Kind.ALLREDUCE else 1 for r in responses]
    return _Plan(list(responses), steps, members, allreduce_bytes)


def _xp(device: str):
    if device == "cuda":
        import cupy  # only a cupy tensor brings us here

        return cupy
    return np


def _count(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


class BatchTimeline:
    """What ``BackendContext.timeline`` points at: a backend's phase lands on the track of every
    tensor of the batch being run (the backend does not know their names)."""

    def __init__(self):
        self.timeline = None
        self.tracks: List[str] = []

    def start(self, name: str, phase: str) -> None:
        if self.timeline is not None:
            for track in self.tracks:
                self.timeline.start(track, phase, {"step": name})

    def end(self, name: str, phase: str) -> None:
        if self.timeline is not None:
            for track in self.tracks:
                self.timeline.end(track, phase)


class Executor:
    def __init__(self, rank: int, size: int, comm, backend_for: Callable[[str], Any], state: SharedState,
                 fusion_threshold: int, timeline=None, batch_timeline: Optional[BatchTimeline] = None,
                 hooks: Optional[Dict[Kind, Callable[[Response], Any]]] = None, ranks=None):
        self.hooks = hooks or {}
        """Runs a response of a kind the runtime above handles (adding, removing process sets);
        its return value completes the call."""
        self.index_of = {g: i for i, g in enumerate(ranks if ranks is not None else range(size))}
        """A process set's index of a global rank (broadcast roots are global ranks, Horovod's rule)."""
        self.rank = rank
        self.size = size
        self.comm = comm
        self.backend_for = backend_for
        self.state = state
        self.fusion_threshold = fusion_threshold
        self.timeline = timeline
        self.batch_timeline = batch_timeline or BatchTimeline()
        self.batch_timeline.timeline = timeline
        self.results = ResultPool(capacity=max(4 * fusion_threshold, 256 << 20))
        """Recycled host memory for all-reduce results (fresh pages cost more than the reduction)."""
        self._plans: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
        self._responses_kept = 0
        self.running: Optional[tuple] = None
        """(kind, names) of the batch being executed, for the error if the backend fails in it."""
        self.last_allreduce_bytes = 0
        """Bytes the all-reduces of the last :meth:`run` reduced."""

    def set_fusion_threshold(self, threshold: int) -> None:
        """Fuse with ``threshold`` from the next :meth:`run` on (every rank switches at the same
        place in the order of responses: the plans made with the old one are dropped)."""
        self.fusion_threshold = threshold
        self._plans.clear()
        self._responses_kept = 0

    def describe_running(self) -> str:
        if self.running is None:
            return ""
        kind, names = self.running
        more = f" and {len(names) - 8} more" if len(names) > 8 else ""
        return f"{kind.label} of {', '.join(shown(n) for n in names[:8])}{more}"

    def run(self, responses: List[Response], pending: Dict[str, Any],
            on_done: Callable[[Response], None]) -> None:
        """Run the cycle's ``responses`` in order. ``pending`` holds the names this rank submitted
        that wait for their response (the negotiator's): a response's name is popped from it,
        and its entry taken from the state's table (none where this rank did not submit it: a
        joined rank, or an error owed to it; a failure meanwhile leaves drained entries there,
        :meth:`.state.SharedState.fail`)."""
        plan = self._plan(responses)
        self.last_allreduce_bytes = plan.allreduce_bytes
        entry_of = self.state.entry
        entries = [entry_of(r.name) if pending.pop(r.name, None) is not None else None for r in responses]
        # Results per response, member by member; a response completes with its last piece.
        outputs: List[List[Any]] = [[None] * count for count in plan.members]
        remaining = list(plan.members)
        for index, count in enumerate(plan.members):
            if count == 0:  # an empty group: nothing to move
                response = responses[index]
                self._mark([response.name], "E", "NEGOTIATE")
                self._finish(response, entries[index], [], on_done)
        started = set()
        for step in plan.steps:
            batch = step.batch
            if batch.kind is Kind.ERROR:
                index = batch.pieces[0].response
                response, entry = responses[index], entries[index]
                self._mark([response.name], "E", "NEGOTIATE")  # keep the track's begin/end balanced
                error = _ERRORS.get(response.error_type, BlinkflowError)
                if entry is not None:
                    self.state.complete(entry, error=error(response.error, response.name)
                                        if error is TensorMismatchError else error(response.error))
                on_done(response)
                continue
            names = step.names
            if self.timeline is not None:
                self._mark([n for n in names if n not in started], "E", "NEGOTIATE")
                started.update(names)  # a group split over several batches ends negotiating once
                self._mark(names, "B", batch.kind.name)
            self.batch_timeline.tracks = names
            self.running = (batch.kind, names)
            try:
                results = self._execute(step, responses, entries)
            except (PlanError, ScheduleError, ProcessSetError) as error:
                # Raised on every rank at this batch, before anything moved: plans are agreed and
                # lowered alike everywhere, process sets are added and removed alike. The batch's
                # calls fail with it; the runtime goes on.
                self.running = None
                self._fail_batch(batch, responses, entries, error, on_done)
                continue
            self.running = None
            self.batch_timeline.tracks = []
            self._mark(names, "E", batch.kind.name)
            # A finished call's results are let go of here at once: a user who dropped the
            # handle must get the memory back when the call completes (a later call of this cycle,
            # say a barrier, may complete before this method returns).
            if batch.whole is not None:  # one response, all its pieces: nothing to assemble
                self._finish(responses[batch.whole], entries[batch.whole], results, on_done)
                entries[batch.whole] = results = None
                continue
            for piece, result in zip(batch.pieces, results):
                index = piece.response
                outputs[index][piece.member] = result
                remaining[index] -= 1
                if remaining[index] == 0:
                    self._finish(responses[index], entries[index], outputs[index], on_done)
                    entries[index] = outputs[index] = None
            results = result = None

    def _fail_batch(self, batch: Batch, responses, entries, error: BlinkflowError, on_done) -> None:
        self._mark(self.batch_timeline.tracks, "E", batch.kind.name)
        self.batch_timeline.tracks = []
        for index in dict.fromkeys(piece.response for piece in batch.pieces):
            if entries[index] is not None:
                self.state.complete(entries[index], error=error)
                entries[index] = None  # a group split over several batches fails once
            on_done(responses[index])

    def _plan(self, responses: List[Response]) -> _Plan:
        """The plan of ``responses``, remembered for the last lists of responses seen. The
        response cache returns the very same Response objects every step, so identity is the
        key (hashing them would hash every rank's request of every member); the plan keeps its
        responses alive, so an id cannot be reused while it is remembered."""
        key = tuple(map(id, responses))
        known = self._plans.get(key)
        if known is not None:
            self._plans.move_to_end(key)
            return known
        plan = _plan_of(responses, self.fusion_threshold)
        if len(key) > _RESPONSES_KEPT:
            return plan
        self._plans[key] = plan
        self._responses_kept += len(key)
        while len(self._plans) > _PLANS_KEPT or self._responses_kept > _RESPONSES_KEPT:
            self._responses_kept -= len(self._plans.popitem(last=False)[0])
        return plan

    def _finish(self, response: Response, entry: Optional[Entry], outputs: List[Any], on_done) -> None:
        """Complete ``response`` with its pieces' results: a group gets the list, others the one."""
        if entry is not None:
            grouped = response.kind is Kind.ALLREDUCE and response.first().parts is not None
            self.state.complete(entry, outputs if grouped else outputs[0])
        on_done(response)

    # ---- timeline -----------------------------------------------------------------------------
    def _mark(self, names: List[str], ph: str, what: str) -> None:
        if self.timeline is None:
            return
        for name in names:
            (self.timeline.start if ph == "B" else self.timeline.end)(name, what)

    # ---- one batch ----------------------------------------------------------------------------
    def _execute(self, step: _Step, responses: List[Response], entries: List[Optional[Entry]]) -> List[Any]:
        batch = step.batch
        device = "cpu"
        if batch.kind in _ON_A_DEVICE:
            device = (step.first or responses[batch.pieces[0].response].first()).device
        if device == "cpu":
            return self._run_batch(step, responses, entries)
        # Every array of a device batch (packing, zeros for joined ranks, results) is made and
        # written on the GPU the backend drives, in that device's stream order; this thread may
        # have started on any device (CUDA starts every thread on device 0).
        with self.backend_for(device).device_scope():
            return self._run_batch(step, responses, entries)

    def _run_batch(self, step: _Step, responses: List[Response], entries: List[Optional[Entry]]) -> List[Any]:
        batch = step.batch
        if batch.kind is Kind.ALLREDUCE:
            return self._allreduce(step, responses, entries)
        index = batch.pieces[0].response
        response, entry = responses[index], entries[index]
        if batch.kind is Kind.BARRIER:
            self.comm.Barrier()
            return [None]
        if batch.kind is Kind.JOIN:
            return [response.last_joined]
        hook = self.hooks.get(batch.kind)
        if hook is not None:
            return [hook(response)]
        mine = response.requests[self.rank]
        array = entry.array if entry is not None else None
        run = {Kind.ALLGATHER: self._allgather, Kind.BROADCAST: self._broadcast,
               Kind.REDUCESCATTER: self._reducescatter, Kind.ALLTOALL: self._alltoall}[batch.kind]
        return [run(response, mine, array)]

    def _allreduce(self, step: _Step, responses: List[Response], entries: List[Optional[Entry]]) -> List[Any]:
        batch, names, first, dtype, op = step
        pieces = batch.pieces
        total = batch.total
        xp = _xp(first.device)
        if total == 0:
            return [xp.empty(p.shape, dtype) for p in pieces]
        backend = self.backend_for(first.device)
        whole = entries[batch.whole] if batch.whole is not None else None
        if whole is not None and whole.request.parts is not None:
            inputs = [a.ravel() for a in whole.array]  # a whole group: its members, in order
        else:
            inputs = []
            for piece in pieces:
                entry = entries[piece.response]
                if entry is None:
                    inputs.append(xp.zeros(piece.size, dtype))  # a joined rank adds nothing
                else:
                    array = entry.array[piece.member] if entry.request.parts is not None else entry.array
                    inputs.append(array.ravel())  # contiguous: a strided 1-d view is copied, not passed on
        if not op.elementwise:
            return self._adasum(step, backend, inputs)
        # One route on every backend: the algorithm the backend answers for the call shape (the
        # policy's) packs the inputs (timeline: COPY_IN) or reads them in place, reduces, and
        # writes the result into a private array (every result is a slice of it; a backend's
        # buffer is reused by the next batch), the factor blinkflow/scaling.py folds (a float's
        # Average and postscale) in that last write; it then finishes what was not folded (an
        # integer's), with Horovod's arithmetic.
        average = op is ReduceOp.AVERAGE
        private = self._result(first.device, total, dtype)
        algorithm = backend.allreduce_algorithm(total, dtype, len(inputs), first.prescale == 1.0)
        algorithm(inputs, op.combiner, private, scaling.folded_factor(average, first.postscale, self.size, dtype),
                  first.prescale)
        self._mark(names, "B", "COPY_OUT")  # the unpacking: the copy out ran in the backend
        scaling.finish(private, average, first.postscale, self.size, backend.scale)
        slices, shaped = batch.views  # hundreds of gradients: a C-level map over slices made once
        results = list(map(private.__getitem__, slices))
        for i, shape in shaped:
            results[i] = results[i].reshape(shape)
        self._mark(names, "E", "COPY_OUT")
        return results

    def _result(self, device: str, nelems: int, dtype: np.dtype):
        """A private array for a batch's result, where the batch's tensors live: recycled host
        memory (:class:`ResultPool`), or new memory on this rank's GPU."""
        if device == "cpu":
            return self.results.empty(nelems * dtype.itemsize).view(dtype)
        return _xp(device).empty(nelems, dtype)

    def _adasum(self, step: _Step, backend, inputs: List[Any]) -> List[Any]:
        """An Adasum batch: packed on the host (a device tensor is copied there and its result
        back: Adasum's is a host path), prescaled, combined tensor by tensor, postscaled."""
        batch, names, first, dtype, _ = step
        xp = _xp(first.device)
        self._mark(names, "B", "COPY_IN")
        # Packed where the tensors live (on a GPU, in this thread's stream order after their
        # producers), then copied to the host in one transfer.
        packed = xp.concatenate(inputs) if inputs else xp.empty(0, dtype)
        host = packed if first.device == "cpu" else packed.get()
        self._mark(names, "E", "COPY_IN")
        scaling.scale(host, first.prescale)
        backend.adasum(host, [p.size for p in batch.pieces])
        scaling.scale(host, first.postscale)
        result = xp.asarray(host)
        slices, shaped = batch.views
        results = list(map(result.__getitem__, slices))
        for i, shape in shaped:
            results[i] = results[i].reshape(shape)
        return results

    def _allgather(self, response: Response, mine: Optional[Request], array):
        first = response.first()
        if first.parts is not None:  # a group travels as one request: its members, in order
            return [self._gather(first.device, dtype, shape[1:],
                                 [q.parts[i][1][0] if q is not None else 0 for q in response.requests],
                                 array[i] if array is not None else None)
                    for i, (dtype, shape) in enumerate(first.parts)]
        return self._gather(first.device, first.dtype, first.shape[1:],
                            [q.shape[0] if q is not None else 0 for q in response.requests], array)

    def _gather(self, device: str, dtype: str, tail, rows: List[int], array):
        tail = tuple(tail)
        row = _count(tail)
        dtype = np.dtype(dtype)
        xp = _xp(device)
        counts = [n * row for n in rows]
        send = xp.ascontiguousarray(array).reshape(-1) if array is not None else xp.empty(0, dtype)
        recv = xp.empty(sum(counts), dtype)
        if sum(counts):
            self.backend_for(device).allgather(send, recv, counts)
        return recv.reshape((sum(rows),) + tail)

    def _broadcast(self, response: Response, mine: Optional[Request], array):
        first = response.first()
        root = self.index_of[first.root]
        if first.parts is not None:  # a group travels as one request: its members, in order
            return [self._cast(first.device, root, dtype, shape, array[i] if array is not None else None)
                    for i, (dtype, shape) in enumerate(first.parts)]
        return self._cast(first.device, root, first.dtype, first.shape, array)

    def _cast(self, device: str, root: int, dtype: str, shape, array):
        xp = _xp(device)
        if self.rank == root:
            buf = xp.array(array, dtype=np.dtype(dtype), order="C", copy=True).reshape(-1)
        else:
            buf = xp.empty(_count(shape), np.dtype(dtype))
        if buf.size:
            self.backend_for(device).broadcast(buf, root)
        return buf.reshape(shape)

    def _reducescatter(self, response: Response, mine: Request, array):
        if mine.parts is not None:  # a group travels as one request: its members, in order
            return [self._scatter(mine, dtype, shape, array[i]) for i, (dtype, shape) in enumerate(mine.parts)]
        return self._scatter(mine, mine.dtype, mine.shape, array)

    def _scatter(self, mine: Request, dtype: str, shape, array):
        """One reduce-scatter: prescaled (Horovod's rules, :meth:`Backend.scale`), reduced,
        this rank's block kept, then averaged and postscaled."""
        xp = _xp(mine.device)
        tail = tuple(shape[1:])
        row = _count(tail)
        rows = split_rows(shape[0], self.size)
        counts = [n * row for n in rows]
        send = xp.ascontiguousarray(array).reshape(-1)
        recv = xp.empty(counts[self.rank], np.dtype(dtype))
        backend = self.backend_for(mine.device)
        op = ReduceOp(mine.op)
        if sum(counts):
            if mine.prescale != 1.0:
                send = send.copy()  # inputs are never written
                backend.scale(send, mine.prescale)
            backend.reducescatter(send, recv, counts, op.combiner)
            if op is ReduceOp.AVERAGE:
                scaling.average(recv, self.size, mine.postscale, scale=backend.scale)
            else:
                backend.scale(recv, mine.postscale)
        return recv.reshape((rows[self.rank],) + tail)

    def _alltoall(self, response: Response, mine: Request, array):
        xp = _xp(mine.device)
        tail = tuple(mine.shape[1:])
        row = _count(tail)
        received = [q.splits[self.rank] for q in response.requests]
        send = xp.ascontiguousarray(array).reshape(-1)
        recv = xp.empty(sum(received) * row, np.dtype(mine.dtype))
        if any(sum(q.splits) for q in response.requests):  # a global condition: all ranks agree
            self.backend_for(mine.device).alltoall(send, [s * row for s in mine.splits], recv,
                                                   [s * row for s in received])
        return recv.reshape((sum(received),) + tail), np.asarray(received, dtype=np.int32)


def split_rows(n: int, size: int) -> List[int]:
    """Rows of a reduce-scatter per rank: the first ``n % size`` ranks get one extra."""
    base, extra = divmod(n, size)
    return [base + (1 if r < extra else 0) for r in range(size)]
