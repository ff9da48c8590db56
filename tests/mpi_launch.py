"""``mpirun_argv``: the harness's mpirun command (tests/harness.py) for callers that add hosts
(``-H``) after it, as the two-host tests do."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from harness import mpirun_command


def mpirun_argv(nprocs: int, argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> List[str]:
    """mpirun's argv for ``argv`` on ``nprocs`` ranks, ``env`` set on every rank. Callers add
    hosts (``-H``) after it, which the builder cannot count slots of: ranks may oversubscribe."""
    cmd = mpirun_command(nprocs, argv, env)
    if "--oversubscribe" not in cmd:
        cmd.insert(3, "--oversubscribe")
    return cmd
