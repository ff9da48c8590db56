"""The rank at fault is the one named (issue 18, finding 8), one case per launch:
``python first_failure_script.py MODE``; the last rank is at fault.

killed     it SIGKILLs itself; the others raise ShutdownError (uncaught). Run under blinkrun with
           --enable-recovery: blinkrun must name it, not a survivor that reported first.
exit0      it leaves with os._exit(0) while the others run collectives; blinkrun must name it.
uncaught   it raises an uncaught ValueError (plain mpirun: no blinkrun hook aborts the job); the
           others, waiting for it in a collective, are told why, not "shutdown() was called".
recovery   (mpirun --enable-recovery) it SIGKILLs itself; rank 0 notices and leaves at once
           (os._exit(0)), while rank 1 holds the GIL for 3 s (a C call) and so looks only after
           rank 0 is gone too: rank 1 must still blame the killed rank, not rank 0.
long_name  rank 0 submits a tensor with a 10-million-character name the others never submit
           (stall times set by the test): the stall warning and the shutdown error show its start
           and length, and the job ends.
"""
import ctypes
import os
import signal
import sys
import time

import numpy as np

import blinkflow as bf

MODE = sys.argv[1]
bf.init()
r, n = bf.rank(), bf.size()
bf.allreduce(np.ones(2), name="warm")
if MODE == "long_name":
    try:
        bf.allreduce(np.ones(2), name="y" * 10_000_000 if r == 0 else "other")
    except bf.ShutdownError as e:
        print(f"STALLED rank {r} chars={len(str(e))}: {str(e)[:300]}", flush=True)
    sys.exit(0)
if MODE == "recovery" and r == 1:
    ctypes.PyDLL(None).sleep(3)  # holds the GIL: its watchdog looks only after rank 0 left
if r == n - 1:
    time.sleep(0.5)
    if MODE in ("killed", "recovery"):
        os.kill(os.getpid(), signal.SIGKILL)
    elif MODE == "exit0":
        os._exit(0)
    raise ValueError(f"rank {r} fails on purpose")
if MODE == "uncaught":
    try:
        bf.allreduce(np.ones(2), name="never.there")
    except bf.ShutdownError as e:
        print(f"CAUGHT rank {r} rank={e.rank}: {e}", flush=True)
    sys.exit(0)
if MODE == "recovery":
    try:
        while True:
            bf.allreduce(np.ones(2), name="step")
    except bf.ShutdownError as e:
        print(f"CAUGHT rank {r} rank={e.rank}: {e}", flush=True)
    if r == 0:
        os._exit(0)  # at once, and quietly: a non-zero status would make mpirun end the job
    sys.exit(0)
while True:  # until the runtime raises ShutdownError naming the rank at fault; left uncaught
    bf.allreduce(np.ones(2), name="step")
