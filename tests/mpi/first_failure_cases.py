"""The rank at fault is the one named (issue 18, finding 8), one case per launch:
``python first_failure_cases.py MODE``; the last rank is at fault.

killed     it SIGKILLs itself; the others raise ShutdownError (uncaught). Run under blinkrun with
           --enable-recovery: blinkrun must name it, not a survivor that reported first.
exit0      it leaves with os._exit(0) while the others run collectives; blinkrun must name it.
uncaught   it raises an uncaught ValueError (plain mpirun: no blinkrun hook aborts the job); the
           others, waiting for it in a collective, are told why, not "shutdown() was called".
"""
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
if r == n - 1:
    time.sleep(0.5)
    if MODE == "killed":
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
while True:  # until the runtime raises ShutdownError naming the rank at fault; left uncaught
    bf.allreduce(np.ones(2), name="step")
