"""What a rank tells ``blinkrun`` about how the job ends here, through the hooks blinkrun's
start-up module (``launcher/ranks/pyhook/sitecustomize.py``) puts in every rank it launches; a rank
started otherwise (plain mpirun) has none, and these do nothing.

:func:`tell_cut_off`: this rank stops because ranks on another host fell silent (an elastic
side that lost the quorum, or a fixed-size job's stall shutdown naming a rank on another host).
Whether this host can still reach mpirun cannot be seen from here; if it cannot, the MPI daemon
that started this rank here would wait for mpirun until the network returns. The job is over
for this host either way, so the rank's wrapper stops that daemon when the rank ends.
"""
from __future__ import annotations

import sys


def tell_cut_off() -> None:
    hook = getattr(sys.modules.get("sitecustomize"), "blinkrun_cut_off", None)
    if hook is not None:
        hook()
