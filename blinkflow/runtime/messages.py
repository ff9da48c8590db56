"""The small control messages the background threads exchange (pickled by mpi4py).

A :class:`Request` is what one rank says about one tensor it wants to run a collective on; a
:class:`Response` is rank 0's decision, which every rank executes in the same order. Both are
plain data so they pickle small and compare cheaply.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Optional, Tuple

#: The name a join travels under (not a legal tensor name: user names cannot start with "__bf").
JOIN_NAME = "__bf_join__"
#: Characters of a tensor name (or of a rank's reason) that messages show; the rest is elided.
#: Names are the user's: a 10-million-character name must not turn a one-line warning into
#: megabytes on every rank's stderr.
SHOWN_CHARS = 200


def shown(value, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` (a tensor name, a user's argument), cut to ``limit`` characters with the
    full length said."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def clipped(text: str, limit: int = 4 * SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters (a rank's reason for refusing a call)."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class Kind(enum.IntEnum):
    ALLREDUCE = 0
    ALLGATHER = 1
    BROADCAST = 2
    REDUCESCATTER = 3
    ALLTOALL = 4
    BARRIER = 5
    JOIN = 6
    ERROR = 7
    ADD_PROCESS_SET = 8
    """Global set only: every rank adds the process set of ``Request.shape`` (its ranks)."""
    REMOVE_PROCESS_SET = 9
    """Global set only: every rank removes the process set ``Request.root``."""

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclasses.dataclass(frozen=True)
class Request:
    """One rank's description of a tensor submitted under ``name``.

    ``signature`` is everything that must agree across ranks (Horovod's validation), except for
    the first dimension of an all-gather / all-to-all and the splits, which may differ per rank.
    """

    name: str
    kind: Kind
    dtype: str
    shape: Tuple[int, ...]
    op: int = 0
    root: int = -1
    prescale: float = 1.0
    postscale: float = 1.0
    splits: Optional[Tuple[int, ...]] = None
    device: str = "cpu"
    parts: Optional[Tuple[Tuple[str, Tuple[int, ...]], ...]] = None
    """A grouped all-reduce, all-gather, broadcast or reduce-scatter: (dtype, shape) of each member. The group is
    negotiated, cached, validated and completed as one unit (Horovod negotiates each member: at
    a few hundred gradients per step that per-tensor bookkeeping would cost more than the
    reduction itself, and a rank with another member count would leave the others waiting for
    the members it lacks). ``dtype`` is then the members' common dtype (or "mixed") and
    ``shape`` is (members,)."""
    waited: float = dataclasses.field(default=0.0, compare=False)
    """Seconds the tensor had waited on its rank when this request was sent (a late report of a
    cache hit); lets the stall inspector date it from its submission. Not part of equality."""
    rejected: str = ""
    """Why this rank refused the call (bad arguments), or "". A refused call still travels under
    the name it would have had, so the coordinator answers every rank with one error naming this
    rank and its reason, and no rank's later calls pair with the others' earlier ones."""
    rejected_as: str = ""
    """The error class every rank raises for this refusal ("" for InvalidArgumentError)."""

    def signature(self) -> tuple:
        """What must be identical on every rank for the request to be valid."""
        gathered = self.kind in (Kind.ALLGATHER, Kind.ALLTOALL)
        shape = self.shape[1:] if gathered else self.shape
        return (self.kind, self.dtype, shape, self.op, self.root, self.prescale, self.postscale, self.device,
                self.member_signature())

    def member_signature(self):
        """The group's members as they must agree: all-gathered members may differ in their
        first dimension, like a single all-gather."""
        if self.parts is None or self.kind is not Kind.ALLGATHER:
            return self.parts
        return tuple((dtype, shape[1:]) for dtype, shape in self.parts)

    def members(self) -> Tuple[Tuple[str, Tuple[int, ...]], ...]:
        """(dtype, shape) of every tensor this request moves: a group's members, else itself."""
        return self.parts if self.parts is not None else ((self.dtype, self.shape),)

    def describe(self) -> str:
        """Human-readable, for mismatch messages."""
        if self.rejected:
            return f"{self.kind.label} refused: {self.rejected}"
        if self.kind is Kind.ADD_PROCESS_SET:
            return f"add_process_set of ranks {list(self.shape)}"
        if self.kind is Kind.REMOVE_PROCESS_SET:
            return f"remove_process_set of set {self.root}"
        if self.parts is not None:
            members = ", ".join(f"{d}{list(s)}" for d, s in self.parts[:4])
            more = f", ... ({len(self.parts)} in all)" if len(self.parts) > 4 else ""
            parts = [f"{self.kind.label} group of {len(self.parts)} tensors [{members}{more}]"]
        else:
            parts = [self.kind.label, f"dtype={self.dtype}", f"shape={list(self.shape)}"]
        if self.kind in (Kind.ALLREDUCE, Kind.REDUCESCATTER):
            from ..ops import ReduceOp

            parts.append(f"op={ReduceOp(self.op).name.title()}")
        if self.kind in (Kind.ALLREDUCE, Kind.REDUCESCATTER) and (self.prescale != 1.0 or self.postscale != 1.0):
            parts.append(f"prescale={self.prescale:g} postscale={self.postscale:g}")
        if self.kind is Kind.BROADCAST:
            parts.append(f"root={self.root}")
        if self.device != "cpu":
            parts.append(f"device={self.device}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class Response:
    """A collective every rank runs now, in broadcast order.

    ``requests[r]`` is rank r's request (first dims and splits differ per rank for all-gather
    and all-to-all, and a joined rank needs the shape it did not submit). ``error`` is set for
    :data:`Kind.ERROR`; ``error_type`` names the exception class the handle raises; ``owed_to``
    the ranks an error still has to reach (below).
    """

    kind: Kind
    name: str
    requests: Tuple[Optional[Request], ...] = ()
    error: str = ""
    error_type: str = ""
    last_joined: int = -1
    owed_to: Tuple[int, ...] = ()
    """An error decided before every rank submitted the name (:mod:`.fences`): the ranks (set
    indices) that had made none of the verdict's calls and so may still make this one. Each keeps
    the error and gives it to its own call under the name when that call comes
    (:class:`~.negotiation.Negotiator`)."""

    def first(self) -> Request:
        return next(r for r in self.requests if r is not None)
