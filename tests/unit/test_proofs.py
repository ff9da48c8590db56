"""Proofs of schedules remembered by digest (blinkflow/schedule/proofs.py): a proof is done once
per folder, only proofs that held are remembered, and the digest covers what a proof depends on."""
import dataclasses
import os

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
