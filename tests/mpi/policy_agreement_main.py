"""Run by test_policy_agreement.py: rank 1 alone sets one input of the call-shape policy
(``sys.argv[1]``, a BLINKFLOW_* variable, to ``sys.argv[2]``); every rank's init must fail with
a ConfigError naming the ranks, instead of ranks choosing different algorithms or chunks."""
import os
import sys

from mpi4py import MPI

if MPI.COMM_WORLD.Get_rank() == 1:
    os.environ[sys.argv[1]] = sys.argv[2]

import blinkflow as bf  # noqa: E402  (after the environment is set, as a launcher would)

try:
    bf.init()
except bf.BlinkflowError as e:
    print(f"REFUSED rank {MPI.COMM_WORLD.Get_rank()} {type(e).__name__}: {e}", flush=True)
else:
    print(f"STARTED rank {bf.rank()}", flush=True)
    bf.shutdown()
