"""A job where rank 1 never reaches MPI: with ``exit`` it ends with status 0 before it imports
blinkflow, with ``sleep`` it sleeps there; every other rank calls ``blinkflow.init()``."""
import os
import sys
import time

if int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0"))) == 1:
    if sys.argv[1] == "exit":
        sys.exit(0)
    time.sleep(600)

import blinkflow as bf  # noqa: E402

bf.init()
print("INIT returned", flush=True)  # never: MPI's start-up needs rank 1
