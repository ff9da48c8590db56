"""Entry point of the ``blinkrun`` console script.

``blinkrun -np N COMMAND ...`` launches a job; ``blinkrun topo|plan|simulate ...`` are tools
that inspect topologies and plans without launching anything. Each lives in its own module and
is imported only when used, so ``blinkrun topo`` never loads MPI.
"""
from __future__ import annotations

import importlib
import sys
from typing import List, Optional

# subcommand -> module that defines a click command called ``command``
SUBCOMMANDS = {
    "topo": "blinkflow.launcher.commands.topo",
    "plan": "blinkflow.launcher.commands.plan",
    "simulate": "blinkflow.launcher.commands.simulate",
}


def main(argv: Optional[List[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        command = importlib.import_module(SUBCOMMANDS[argv[0]]).command
        command.main(argv[1:], prog_name=f"blinkrun {argv[0]}")
        return
    command = importlib.import_module("blinkflow.launcher.commands.run").command
    command.main(argv, prog_name="blinkrun")


if __name__ == "__main__":
    main()
