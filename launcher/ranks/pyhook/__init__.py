"""The folder ``rank_exec`` puts first on a Python rank's PYTHONPATH: its ``sitecustomize`` records
an uncaught exception and aborts the MPI job (see sitecustomize.py).

Modules, one job each:

``sitecustomize``  loaded at start-up by every Python rank: records an uncaught exception, aborts the job
"""
