"""Fault scenarios of the runtime, one per launch: ``kill``, ``stall``, ``timeline [abort]``.

kill     the last rank SIGKILLs itself mid-run; every other rank must raise ShutdownError naming it
         within 30 s (run under mpirun options that keep the job alive after a death). With
         ``shutdown`` the survivors then call ``bf.shutdown()`` and ``bf.init()`` (which must
         raise) and must still exit.
crash    the last rank's background loop fails; it raises and exits, and the others notice.
stall    the last rank never submits tensor 'stuck': rank 0 warns, then shuts the job down
         (BLINKFLOW_STALL_CHECK_TIME_SECONDS / _SHUTDOWN_TIME_SECONDS set by the test).
timeline runs a few collectives with BLINKFLOW_TIMELINE set; with ``abort`` every rank then
         SIGKILLs itself, leaving the trace without its closing bracket.
config   the last rank starts with another setting: init raises ConfigError everywhere.
cma      the last rank's cross-memory reads fail inside a single-copy all-reduce: all raise.
"""
import os
import signal
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt


def kill(then_shutdown=False):
    r, n = bf.rank(), bf.size()
    victim = n - 1
    for i in range(5):
        bf.allreduce(np.ones(8), name=f"warm.{i}")
    if r == victim:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    # From when this survivor starts waiting (the victim dies about 0.5 s later): a time from
    # the victim's death would be a guess, and negative ("-0.0s") when a survivor came late.
    began = time.monotonic()
    try:
        i = 0
        while True:
            bf.allreduce(np.ones(8), name=f"step.{i % 3}")
            i += 1
    except bf.ShutdownError as e:
        print(f"SURVIVOR rank {r} ShutdownError rank={e.rank} after {time.monotonic() - began:.1f}s: {e}", flush=True)
    # A later call fails at once with the same error instead of hanging.
    try:
        bf.allreduce(np.ones(1), name="after")
    except bf.ShutdownError as e:
        print(f"AGAIN rank {r} rank={e.rank}", flush=True)
    if then_shutdown:  # what a user does after the error: exit must still not wait for the dead rank
        bf.shutdown()
        bf.shutdown()
        try:
            bf.init()  # on the world communicator with a dead rank: would hang in MPI
        except bf.ShutdownError as e:
            print(f"REINIT rank {r} rank={e.rank}", flush=True)
    wait_for_survivors(r, n)


def wait_for_survivors(r, n):
    """mpirun ends the job when the first survivor exits (and a survivor that looks later sees
    two dead ranks): wait, on files since MPI is broken, until every survivor has reported."""
    file_barrier(r, n - 1, "survivor")


def file_barrier(r, count, tag):
    """Wait (30 s at most) until ``count`` ranks have reached this point, on files in FAULTS_DIR
    because the runtime (and perhaps MPI) is broken. A rank whose runtime failed exits with
    status 1 and mpirun then kills the rest, perhaps before they have printed their report."""
    rendezvous = os.environ["FAULTS_DIR"]
    open(os.path.join(rendezvous, f"{tag}.{r}"), "w").close()
    deadline = time.monotonic() + 30
    while len([f for f in os.listdir(rendezvous) if f.startswith(f"{tag}.")]) < count and time.monotonic() < deadline:
        time.sleep(0.1)


def crash():
    """The last rank's background loop dies mid-run (its backend raises): it gets ShutdownError
    and exits without hanging in MPI_Finalize; the others then see it gone."""
    r, n = bf.rank(), bf.size()
    bf.allreduce(np.ones(8), name="warm")
    if r == n - 1:
        backend = rt.RUNTIME.engine._backends["cpu"]

        def broken(*args, **kwargs):
            raise RuntimeError("injected backend failure")

        # every way into an all-reduce: the executor's (the algorithm of the call shape) and a direct call's
        backend.allreduce = backend.allreduce_pieces = backend.allreduce_algorithm = broken
    died = time.monotonic()
    try:
        bf.allreduce(np.ones(8), name="boom")
    except bf.ShutdownError as e:
        print(f"CRASHED rank {r} rank={e.rank} after {time.monotonic() - died:.1f}s: {e}", flush=True)
    if r != n - 1:
        wait_for_survivors(r, n)


def stall():
    r, n = bf.rank(), bf.size()
    for _ in range(2):  # cached: the stall must be seen through the ranks' reports of cache hits
        bf.allreduce(np.ones(4), name="stuck")
        bf.allreduce(np.ones(4), name="only.mine")
    name = "only.mine" if r == n - 1 else "stuck"
    try:
        bf.allreduce(np.ones(4), name=name)
    except bf.ShutdownError as e:
        print(f"STALLED rank {r}: {e}", flush=True)
        return
    raise AssertionError("the stalled allreduce returned")


def timeline(abort=False):
    r, n = bf.rank(), bf.size()
    hs = [rt.allreduce_async(np.ones(1000, np.float32), name=f"tl.{i}") for i in range(4)]
    for h in hs:
        rt.synchronize(h)
    bf.allreduce(np.ones(1 << 17, np.float32), name="tl.large")  # 512 KiB: the runner's schedule, not MPI's call
    bf.broadcast(np.ones(3), 0, name="tl.bcast")
    bf.allgather(np.ones((r + 1, 2)), name="tl.gather")
    try:  # an error response closes its NEGOTIATE too
        bf.allreduce(np.ones(2 + r), name="tl.mismatch")
    except bf.TensorMismatchError:
        pass
    else:
        if n > 1:  # one rank alone has nobody to disagree with
            raise AssertionError("shapes 2 and 3 for 'tl.mismatch' did not raise TensorMismatchError")
    if abort:
        bf.barrier()
        os.kill(os.getpid(), signal.SIGKILL)
    bf.shutdown()


def config_mismatch(setting="BLINKFLOW_CPU_SINGLE_COPY=0"):
    """The last rank alone has ``setting`` (single copy off by default; a topology, which rank 0
    alone reads, was silently ignored): init must raise ConfigError on every rank, naming the
    setting and the ranks on each side, instead of hanging in a collective only some ranks run."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    r, n = world.Get_rank(), world.Get_size()
    if r == n - 1:
        variable, value = setting.split("=", 1)
        os.environ[variable] = value
    try:
        bf.init()
    except bf.ConfigError as e:
        print(f"CONFIG rank {r}: {e}", flush=True)
    else:
        raise AssertionError("init accepted ranks with different settings")


def cma_failure(setup: bool):
    """The last rank's cross-memory reads fail mid-all-reduce (as if the kernel refused), or
    (``setup``) the rank cannot even set up its chunk reducer after the entry barrier: every
    rank must raise, naming it, instead of the others waiting in the exit barrier forever."""
    from blinkflow.backends.cpu import single_copy, single_copy_path
    from blinkflow.schedule import policy

    r, n = bf.rank(), bf.size()
    backend = rt.RUNTIME.engine._backends["cpu"]
    if backend.single_copy is None:
        print(f"NOCMA rank {r}", flush=True)
        return
    policy.SINGLE_COPY_MIN_SHARD_BYTES = 0  # on every rank: this all-reduce takes the path
    if r == n - 1 and setup:
        def no_memory(*args, **kwargs):
            raise MemoryError("injected: no scratch")

        single_copy.ChunkReducer.__init__ = no_memory
    elif r == n - 1:
        def refused(*args, **kwargs):
            open(os.path.join(os.environ["FAULTS_DIR"], "refused"), "w").close()
            raise bf.BackendError("injected: process_vm_readv refused")

        backend.single_copy.memory.read = backend.single_copy.memory.read_span = refused
    if not setup and r != n - 1:
        # The others start reducing once the last rank's first read was refused: a rank that
        # came late would otherwise find its shard done by its helper and its neighbour's by
        # that neighbour, and read nothing at all (the all-reduce then rightly succeeds).
        reduce_balanced = single_copy.reduce_balanced

        def after_the_refusal(*args, **kwargs):
            deadline = time.monotonic() + 60
            refusal = os.path.join(os.environ["FAULTS_DIR"], "refused")
            while not os.path.exists(refusal) and time.monotonic() < deadline:
                time.sleep(0.01)
            return reduce_balanced(*args, **kwargs)

        single_copy.reduce_balanced = after_the_refusal
    try:
        bf.allreduce(np.ones(1 << 20, np.float32), op=bf.Sum, name="cma")
    except bf.ShutdownError as e:
        print(f"CMAFAIL rank {r}: {e}", flush=True)
        file_barrier(r, n, "cmafail")
    else:
        raise AssertionError("the all-reduce returned")


def main():
    mode = sys.argv[1]
    if mode == "config":
        config_mismatch(*sys.argv[2:3])
        return
    bf.init()
    if mode == "kill":
        kill(then_shutdown="shutdown" in sys.argv[2:])
    elif mode == "crash":
        crash()
    elif mode == "stall":
        stall()
    elif mode == "cma":
        cma_failure(setup="setup" in sys.argv[2:])
    elif mode == "timeline":
        timeline(abort="abort" in sys.argv[2:])
    print(f"END rank {bf.rank() if bf.is_initialized() else '?'}", flush=True)


if __name__ == "__main__":
    main()
