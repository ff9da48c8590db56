"""The folder ``rank_exec`` puts first on a Python rank's PYTHONPATH: its ``sitecustomize`` records
an uncaught exception and aborts the MPI job (see sitecustomize.py)."""
