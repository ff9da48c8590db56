"""A rank's progress bar under blinkrun: each "\\r" update reaches blinkrun's stdout as a redraw of
the rank's tagged line (through rank_exec, mpirun and blinkrun's relay), not piled into one line."""
from __future__ import annotations

import subprocess

import pytest

import blinkrun_helpers
from blinkrun_helpers import PY, blinkrun_argv

pytestmark = pytest.mark.mpi

BAR = ("import sys, time\n"
       "for i in range(3):\n"
       "    sys.stdout.write('\\b\\b\\r' + 'step %d/3' % (i + 1)); sys.stdout.flush(); time.sleep(0.2)\n"
       "print(); print('done')\n")


def test_carriage_returns_redraw_the_tagged_line():
    # the updates are 0.2 s apart, so each is read, tagged and relayed on its own
    proc = subprocess.run(blinkrun_argv() + ["-np", "1", PY, "-c", BAR], capture_output=True, timeout=90,
                          env=blinkrun_helpers.test_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (b"\r[0]<stdout>: step 1/3\r[0]<stdout>: step 2/3\r[0]<stdout>: step 3/3"
                           b"\r[0]<stdout>: step 3/3\n[0]<stdout>: done\n"), proc.stdout
