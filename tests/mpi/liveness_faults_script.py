"""One rank stops taking part while the others wait (issue 18, findings 4, 5 and 7), one fault
per launch: ``python liveness_faults_script.py MODE``. The victim is the last rank. Every other rank
prints ``CAUGHT rank <r> <ErrorType> rank=<blamed> after <s>s: <message>`` and then
``NEXT rank <r> <ErrorType>`` for the collective after it (which must fail at once too: the job
cannot continue), and leaves; the test checks names, causes and times.

stopped      the victim SIGSTOPs itself (BLINKFLOW_STALL_CHECK_TIME_SECONDS / _SHUTDOWN_ set by
             the test): its neighbour warns, then every other rank raises ShutdownError naming it
gil          the victim blocks 60 s in a C call that holds the GIL (libc sleep through
             ctypes.PyDLL): the same
failed_alive the victim's runtime fails (its backend raises) and it catches the ShutdownError and
             lives on: the others raise at once, naming it and its error
no_init      the victim never calls init(): the others' init() raises InitError naming it within
             BLINKFLOW_START_TIMEOUT
init_fails   rank 0's set-up fails alone (BLINKFLOW_TIMELINE names a directory: rank 0 writes that
             path, the others path.rank<r>): the others' init() raises InitError naming rank 0
"""
import ctypes
import os
import signal
import sys
import time

import numpy as np

import blinkflow as bf
from blinkflow.runtime import api as rt

MODE = sys.argv[1]


def caught(r, error, since):
    print(f"CAUGHT rank {r} {type(error).__name__} rank={getattr(error, 'rank', None)} after "
          f"{time.monotonic() - since:.1f}s: {error}", flush=True)


def next_call(r):
    try:
        bf.allreduce(np.ones(2), name="after")
    except bf.BlinkflowError as e:
        print(f"NEXT rank {r} {type(e).__name__}", flush=True)
    else:
        print(f"NEXT rank {r} returned", flush=True)


def wait_for_survivors(r, n, survivors):
    """mpirun ends the job when the first survivor exits (with status 1: its MPI cannot be
    trusted): wait, on files since MPI is broken, until every survivor has reported."""
    rendezvous = os.environ["FAULTS_DIR"]
    open(os.path.join(rendezvous, f"survivor.{r}"), "w").close()
    deadline = time.monotonic() + 60
    while len([f for f in os.listdir(rendezvous) if f.startswith("survivor.")]) < survivors and \
            time.monotonic() < deadline:
        time.sleep(0.1)


def victim_stops(r):
    if MODE == "stopped":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif MODE == "gil":
        ctypes.PyDLL(None).sleep(60)  # PyDLL keeps the GIL during the call
    elif MODE == "failed_alive":
        backend = rt.RUNTIME.engine._backends["cpu"]

        def broken(*args, **kwargs):
            raise RuntimeError("injected backend failure")

        backend.allreduce = backend.allreduce_pieces = backend.allreduce_algorithm = broken  # every way in
        try:
            bf.allreduce(np.ones(8), name="boom")
        except bf.ShutdownError as e:
            print(f"VICTIM rank {r} ShutdownError: {e}", flush=True)
        time.sleep(60)  # alive, not exiting: the others must not wait for its exit


def during_run():
    bf.init()
    r, n = bf.rank(), bf.size()
    for i in range(3):
        bf.allreduce(np.ones(8), name=f"warm.{i}")
    if r == n - 1:
        victim_stops(r)
        return
    since = time.monotonic()
    try:
        i = 0
        while True:
            bf.allreduce(np.ones(8), name="boom" if MODE == "failed_alive" else f"step.{i % 2}")
            i += 1
    except bf.ShutdownError as e:
        caught(r, e, since)
    next_call(r)
    wait_for_survivors(r, n, n - 1)


def during_init():
    from mpi4py import MPI

    r, n = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    if MODE == "no_init" and r == n - 1:
        time.sleep(60)
        return
    since = time.monotonic()
    try:
        bf.init()
    except bf.BlinkflowError as e:
        caught(r, e, since)
        if isinstance(e, bf.InitError):  # a peer's fault: init cannot start again on this job
            try:
                bf.init()
            except bf.BlinkflowError as again:
                print(f"NEXT rank {r} {type(again).__name__}", flush=True)
        wait_for_survivors(r, n, n - 1 if MODE == "no_init" else n)
        return
    print(f"STARTED rank {r}", flush=True)


if __name__ == "__main__":
    (during_init if MODE in ("no_init", "init_fails") else during_run)()
