"""Horovod's variables set a job up under blinkrun as under horovodrun: ``HOROVOD_TIMELINE=x.json``
writes the timeline; a ``BLINKFLOW_*`` twin wins over its ``HOROVOD_*`` one, with a note."""
from __future__ import annotations

import json

import pytest

from blinkrun_helpers import PY, run_blinkrun

pytestmark = pytest.mark.mpi

STEP = ("import numpy as np, blinkflow as bf; bf.init(); "
        "print(bf.rank(), bf.allreduce(np.ones(4, np.float32), name='grad.w', op=bf.Sum)[0]); bf.shutdown()")


def _tracks(path):
    with open(path) as f:
        events = json.load(f)
    return {e["args"]["name"] for e in events if e["name"] == "thread_name"}, {e["name"] for e in events}


def test_horovod_timeline_writes_the_timeline(tmp_path):
    path = tmp_path / "x.json"
    proc = run_blinkrun(["-np", "2", PY, "-c", STEP], env={"HOROVOD_TIMELINE": str(path)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(line.split()[-2:] for line in proc.stdout.splitlines()) == [["0", "2.0"], ["1", "2.0"]]
    tracks, names = _tracks(path)
    assert "grad.w" in tracks and "ALLREDUCE" in names, (tracks, names)
    assert "HOROVOD_TIMELINE" not in proc.stderr   # honoured, so nothing to say


def test_the_blinkflow_twin_wins_and_says_so(tmp_path):
    horovod, blinkflow = tmp_path / "horovod.json", tmp_path / "blinkflow.json"
    proc = run_blinkrun(["-np", "2", PY, "-c", STEP],
                        env={"HOROVOD_TIMELINE": str(horovod), "BLINKFLOW_TIMELINE": str(blinkflow)})
    assert proc.returncode == 0, proc.stderr
    assert blinkflow.exists() and not horovod.exists()
    assert f"HOROVOD_TIMELINE={horovod} is ignored: BLINKFLOW_TIMELINE is set and wins" in proc.stderr
