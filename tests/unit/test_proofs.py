"""Proofs of schedules remembered by digest (blinkflow/schedule/proofs.py): a proof is done once
per folder, only proofs that held are remembered, and the digest covers what a proof depends on."""
import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from blinkflow.errors import ScheduleError
from blinkflow.planner import Plan, Tree
from blinkflow.schedule import proofs
from blinkflow.schedule.lower import lower

PLAN = Plan("allreduce", "t", (0, 1, 2), (Tree(0, 1.0, ((0, 1), (1, 2))),), 1.0, 1.0)
RANK_OF = {0: 0, 1: 1, 2: 2}


def broken():
    return dataclasses.replace(lower(PLAN, 10, 3), collective="reducescatter", shards=((0, 0, 5), (1, 5, 5)))


def test_a_proven_schedule_is_remembered_and_not_proven_again(tmp_path, monkeypatch):
    schedule = lower(PLAN, 10, 3)
    proofs.prove(schedule, 2, 1, RANK_OF, str(tmp_path))
    key = proofs.digest(schedule, 2, 1, RANK_OF)
    assert os.listdir(tmp_path) == [key]
    monkeypatch.setattr("blinkflow.schedule.symbolic.check", lambda s: pytest.fail("proven again"))
    proofs.prove(schedule, 2, 1, RANK_OF, str(tmp_path))


def test_a_schedule_that_fails_is_not_remembered_and_fails_everywhere(tmp_path):
    for _ in range(2):   # every process that meets it
        with pytest.raises(ScheduleError):
            proofs.prove(broken(), 2, 1, RANK_OF, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_only_the_folder_skips_a_proof(tmp_path):
    """Without a folder every call proves; a folder holding the digest skips exactly that schedule."""
    with pytest.raises(ScheduleError):
        proofs.prove(broken(), 2, 1, RANK_OF)
    (tmp_path / proofs.digest(broken(), 2, 1, RANK_OF)).write_text("")
    proofs.prove(broken(), 2, 1, RANK_OF, str(tmp_path))   # skipped: the folder says it was proven
    with pytest.raises(ScheduleError):
        proofs.prove(broken(), 3, 1, RANK_OF, str(tmp_path))   # another window: another proof


def test_the_digest_covers_the_schedule_and_the_table_parameters():
    schedule = lower(PLAN, 10, 3)
    base = proofs.digest(schedule, 2, 1, RANK_OF)
    assert base == proofs.digest(lower(PLAN, 10, 3), 2, 1, dict(reversed(list(RANK_OF.items()))))
    assert len({base, proofs.digest(lower(PLAN, 11, 3), 2, 1, RANK_OF), proofs.digest(schedule, 1, 1, RANK_OF),
                proofs.digest(schedule, 2, 2, RANK_OF), proofs.digest(schedule, 2, 1, {0: 1, 1: 0, 2: 2})}) == 5


def _claimed_by(folder, key, pid):
    (folder / f"{key}.claim").write_text(f"{socket.gethostname()} {pid}")


def test_a_process_waits_for_the_proof_another_claimed_instead_of_proving_it_too(tmp_path, monkeypatch):
    schedule = lower(PLAN, 10, 3)
    key = proofs.digest(schedule, 2, 1, RANK_OF)
    _claimed_by(tmp_path, key, os.getpid())   # a live claimant

    def claimant_finishes():
        time.sleep(0.3)
        (tmp_path / key).write_text("")
        (tmp_path / f"{key}.claim").unlink()

    monkeypatch.setattr("blinkflow.schedule.symbolic.check", lambda s: pytest.fail("proven twice"))
    thread = threading.Thread(target=claimant_finishes)
    started = time.monotonic()
    thread.start()
    proofs.prove(schedule, 2, 1, RANK_OF, str(tmp_path))
    thread.join()
    assert time.monotonic() - started >= 0.3 and os.listdir(tmp_path) == [key]


def test_a_claim_that_ends_without_a_proof_or_whose_claimant_is_gone_is_proven_here(tmp_path):
    key = proofs.digest(broken(), 2, 1, RANK_OF)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _claimed_by(tmp_path, key, int(gone.stdout))
    with pytest.raises(ScheduleError):   # the claimant died: proven (and failed) here
        proofs.prove(broken(), 2, 1, RANK_OF, str(tmp_path))
    _claimed_by(tmp_path, key, os.getpid())
    threading.Timer(0.2, (tmp_path / f"{key}.claim").unlink).start()   # the claimant's proof failed
    with pytest.raises(ScheduleError):
        proofs.prove(broken(), 2, 1, RANK_OF, str(tmp_path))
    schedule = lower(PLAN, 10, 3)
    proofs.prove(schedule, 2, 1, RANK_OF, str(tmp_path))   # a proof releases its own claim
    assert os.listdir(tmp_path) == [proofs.digest(schedule, 2, 1, RANK_OF)]
