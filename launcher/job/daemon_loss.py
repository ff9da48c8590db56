"""Which host's MPI daemon mpirun says it lost, read from mpirun's own output.

Open MPI runs one daemon per host (``prted`` under Open MPI 5's PRRTE, ``orted`` before); a rank's
output and its end reach mpirun through it. When a daemon goes (killed, its ssh session ended,
its host gone while the network stays up), mpirun prints one of PRRTE's help messages and ends
the whole job, and the ranks on that host can no longer report anything: blinkrun sees no rank
fail, only mpirun's status. The help message is then the one place that names the host, in one of
two forms (PRRTE 3.0's ``help-plm-base.txt`` "no-callback" and ``help-errmgr-base.txt``
"node-died")::

    A daemon failed to report back after being spawned. ...
      Local host:    bfa
      Remote host:   bfb

    PRTE has lost communication with a remote daemon.
      HNP daemon   : [prterun-bfa-1@0,0] on node bfa
      Remote daemon: [prterun-bfa-1@0,1] on node bfb

:class:`DaemonLoss` is fed mpirun's output (PRRTE prints these on stdout, Open MPI's own help
messages on stderr) and keeps the hosts named; ranks' lines (tagged ``[r]<stdout>:`` by their
wrappers) are not mpirun's and are skipped.
"""
from __future__ import annotations

import re
from typing import List

HEADLINES = ("A daemon failed to report back", "has lost communication with a remote daemon")
HOST_LINES = (re.compile(r"^\s*Remote host:\s*(\S+)"), re.compile(r"^\s*Remote daemon\s*:.*\bon node\s+(\S+)"))
RANK_LINE = re.compile(r"^\[\d+\]<std(out|err)>:")
WITHIN_LINES = 20
"""The host line follows its headline within this many lines."""


class DaemonLoss:
    """The hosts whose daemon mpirun said it lost, in the order it said so."""

    def __init__(self):
        self.hosts: List[str] = []
        self._after = -1   # lines since the last headline; -1: none pending
        self._partial = b""

    def feed_bytes(self, chunk: bytes) -> None:
        """Output as it comes (whole lines or not)."""
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()[-4096:]
        for line in lines:
            self.feed(line.replace(b"\0", b"").decode(errors="replace"))

    def feed(self, line: str) -> None:
        if RANK_LINE.match(line):
            return
        if any(headline in line for headline in HEADLINES):
            self._after = 0
            return
        if self._after < 0:
            return
        self._after += 1
        for pattern in HOST_LINES:
            found = pattern.match(line)
            if found:
                if found.group(1) not in self.hosts:
                    self.hosts.append(found.group(1))
                self._after = -1
                return
        if self._after > WITHIN_LINES:
            self._after = -1
