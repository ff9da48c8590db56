"""The framework-neutral runtime API on numpy (and cupy) arrays: the public names, over this
process's :class:`~.global_state.Runtime`.

``blinkflow.allreduce`` & co. dispatch numpy/cupy arrays here; ``blinkflow.init`` and the other
names of ``blinkflow._RUNTIME_NAMES`` are served from this module. Where each job lives:
starting and stopping in :mod:`.lifecycle`; the collectives (``allreduce`` & co.) in
:mod:`.collectives`, where their arguments become a request and are queued; handles in
:mod:`.enqueue`, ``barrier``/``join`` in :mod:`.barriers`, object collectives in :mod:`.objects`,
the process-set registry in :mod:`.process_sets`.

Asynchronous interface (the TensorFlow bindings build on it; it is stable):

* ``allreduce_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
  compression=Compression.none) -> int``, and likewise ``grouped_allreduce_async(tensors, ...)``,
  ``allgather_async(tensor, name=None)``, ``grouped_allgather_async(tensors, name=None)``,
  ``broadcast_async(tensor, root_rank, name=None)``, ``reducescatter_async(tensor, op=Average,
  name=None)``, ``alltoall_async(tensor, splits=None, name=None)``: submit and return a handle
  (a positive int) at once. The input must not be modified until the handle completes.
* ``poll(handle) -> bool``: whether ``synchronize`` would return without waiting. Never blocks.
* ``synchronize(handle)``: wait, forget the handle, and return what the synchronous call returns
  (a new array; a list for grouped calls; ``(output, received_splits)`` for ``alltoall`` with
  splits) or raise its error (TensorMismatchError, ShutdownError, ...). Safe from any thread.

Collectives are matched across ranks by name; unnamed calls are named ``<op>.noname.<n>`` with a
per-op counter (Horovod's rule), so ranks must issue unnamed calls in the same order. Results are
new arrays; inputs are never written and may be non-contiguous.
"""
from __future__ import annotations

from ..config import get_config
from . import lifecycle
from .barriers import barrier, join  # noqa: F401
from .collectives import (  # noqa: F401 - public names, defined where they become requests
    allreduce_async, grouped_allreduce_async, allgather_async, grouped_allgather_async, broadcast_async,
    grouped_broadcast_async, reducescatter_async, grouped_reducescatter_async, alltoall_async, refused_async,
    allreduce, grouped_allreduce, allgather, grouped_allgather, broadcast, grouped_broadcast, reducescatter,
    grouped_reducescatter, alltoall)
from .enqueue import poll, synchronize  # noqa: F401
from .global_state import RUNTIME
from .lifecycle import is_initialized, shutdown  # noqa: F401
from .objects import allgather_object, broadcast_object  # noqa: F401
from .process_sets import (add_process_set, comm_process_set_id, get_process_set_ids_and_ranks,  # noqa: F401
                           process_set_ranks, remove_process_set)

auto_name = RUNTIME.auto_name


def init(comm=None, process_sets=None) -> None:
    """Start the runtime (:func:`.lifecycle.init`). A rank that a running elastic job started to
    add it (``BLINKFLOW_ELASTIC_JOINING=1``, set by the spawning ranks) joins that job instead:
    :func:`blinkflow.elastic.grow.join_running_job`."""
    if comm is None and not is_initialized() and get_config().elastic_joining:
        from ..elastic.grow import join_running_job

        join_running_job()
        return
    lifecycle.init(comm, process_sets)
"""The next automatic name of an op in a process set; the TensorFlow bindings draw theirs here
too when eager."""


# ---- who is where --------------------------------------------------------------------------------
def size() -> int:
    return RUNTIME.running("blinkflow.size()").job.size


def rank() -> int:
    return RUNTIME.running("blinkflow.rank()").job.rank


def local_size() -> int:
    return RUNTIME.running("blinkflow.local_size()").job.local_size


def local_rank() -> int:
    return RUNTIME.running("blinkflow.local_rank()").job.local_rank


def cross_size() -> int:
    return RUNTIME.running("blinkflow.cross_size()").job.cross_size


def cross_rank() -> int:
    return RUNTIME.running("blinkflow.cross_rank()").job.cross_rank


def is_homogeneous() -> bool:
    """Whether every host runs the same number of ranks."""
    return RUNTIME.running("blinkflow.is_homogeneous").job.layout.even


def mpi_threads_supported() -> bool:
    """Whether MPI runs with ``MPI_THREAD_MULTIPLE`` (the user may call MPI from any thread)."""
    return RUNTIME.running("blinkflow.mpi_threads_supported()").mpi_threads_supported


# ---- timeline ------------------------------------------------------------------------------------
def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start writing the Chrome-trace timeline to ``file_path`` (rank r > 0: ``.rank<r>`` before
    the suffix), as ``BLINKFLOW_TIMELINE`` does from the start. ``mark_cycles`` is accepted for
    Horovod's signature; negotiation rounds are not marked."""
    RUNTIME.running("blinkflow.start_timeline").start_timeline(file_path)


def stop_timeline() -> None:
    """Stop the timeline started by :func:`start_timeline` (or ``BLINKFLOW_TIMELINE``) and close it."""
    RUNTIME.running("blinkflow.stop_timeline").stop_timeline()
