"""blinkrun's elastic driver: which new ranks it asks for, and what it does with the ranks' events."""
import json

import pytest

from blinkflow.launcher.ranks import events
from blinkflow.launcher.elastic.discovery import DiscoveryError
from blinkflow.launcher.elastic.driver import LOST, PENDING, RUNNING, ElasticDriver, initial_slots
from blinkflow.launcher.elastic.spec import ElasticSpec


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make(tmp_path, found, np=2, hosts=(("localhost", 2),), **spec):
    said, clock = [], Clock()
    answers = iter(found)

    def discover():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    driver = ElasticDriver(ElasticSpec(min_np=1, **spec), hosts_file=str(tmp_path / "hosts.json"), hosts=list(hosts),
                           np=np, slot_argv=lambda slot: ["python", "-m", "wrapper", "--rank", str(slot)],
                           wdir="/work", say=said.append,
                           discover=discover, clock=clock)
    return driver, said, clock


def published(tmp_path):
    return json.loads((tmp_path / "hosts.json").read_text())


def test_ranks_are_placed_like_map_by_slot():
    slots = initial_slots(5, [("a", 2), ("b", 2)], now=0.0)
    assert [s.host for s in slots.values()] == ["a", "a", "b", "b", "b"]


def test_no_request_while_the_hosts_are_full(tmp_path):
    driver, said, _ = make(tmp_path, [{"localhost": 2}])
    driver.poll()
    assert published(tmp_path)["requests"] == [] and not said


def test_a_new_slot_becomes_a_request_with_its_wrapper_and_wdir(tmp_path):
    driver, _, _ = make(tmp_path, [{"localhost": 3}, {"localhost": 3, "b": 1}])
    driver.poll()
    body = published(tmp_path)
    assert body["requests"] == [{"id": 1, "host": "localhost", "info_key": "host",
                                 "procs": [{"slot": 2, "argv": ["python", "-m", "wrapper", "--rank", "2"]}]}]
    assert body["wdir"] == "/work"
    driver.poll()   # the pending slot counts: only host b is new, and mpirun must be told of it
    assert [(r["id"], r["host"], r["info_key"], [p["slot"] for p in r["procs"]]) for r in published(tmp_path)["requests"]] \
        == [(1, "localhost", "host", [2]), (2, "b", "add-host", [3])]


def test_max_np_bounds_the_job(tmp_path):
    driver, _, _ = make(tmp_path, [{"localhost": 8}], max_np=3)
    driver.poll()
    assert [len(r["procs"]) for r in published(tmp_path)["requests"]] == [1]


def test_a_failed_rank_frees_its_slot_but_blacklists_its_host(tmp_path):
    driver, said, _ = make(tmp_path, [{"localhost": 2, "b": 1}], hosts=(("localhost", 2), ("b", 1)))
    driver.on_event({"event": events.FAILED, "rank": 1, "status": 137, "signal": "SIGKILL"})
    driver.poll()
    assert published(tmp_path)["requests"] == [{"id": 1, "host": "b", "info_key": "host",
                                                "procs": [{"slot": 2, "argv": ["python", "-m", "wrapper", "--rank", "2"]}]}]
    assert said == ["rank 1 (host localhost) lost: killed by SIGKILL; host blacklisted"]


def test_a_cooled_down_host_gets_its_slot_back(tmp_path):
    driver, _, clock = make(tmp_path, [{"localhost": 2}] * 2, blacklist_cooldown_range=(1, 1))
    driver.on_event({"event": events.EXITED, "rank": 0, "status": 137})
    driver.poll()
    assert published(tmp_path)["requests"] == []
    clock.now += 1.0
    driver.poll()
    assert [p["slot"] for p in published(tmp_path)["requests"][0]["procs"]] == [2]


class MovingClockStop:
    """Stands for the driver's stop event in ``_loop``: each wait moves the fake clock on by its
    timeout instead of sleeping; the last of ``rounds`` waits stops the loop."""

    def __init__(self, clock, rounds):
        self.clock, self.rounds, self.waits = clock, rounds, []

    def wait(self, seconds):
        self.waits.append(round(seconds, 6))
        self.clock.now += seconds
        return len(self.waits) >= self.rounds


def test_a_host_is_offered_again_the_moment_its_cooldown_ends_not_at_the_next_discovery(tmp_path):
    driver, _, clock = make(tmp_path, [{"localhost": 2}] * 3, blacklist_cooldown_range=(1, 1))
    driver.on_event({"event": events.EXITED, "rank": 0, "status": 137})   # blacklisted until 1001.0
    clock.now += 0.4                                                        # next discovery at 1001.4
    driver._stop = MovingClockStop(clock, rounds=2)
    driver._loop()
    assert driver._stop.waits == [0.6, 0.4]   # woke when the cooldown ended, then waited for the discovery
    request, = published(tmp_path)["requests"]
    assert [p["slot"] for p in request["procs"]] == [2]
    assert driver.slots[2].since == pytest.approx(1001.0)   # asked for at the cooldown's end


def test_a_new_rank_that_never_starts_is_lost_after_the_elastic_timeout(tmp_path):
    driver, said, clock = make(tmp_path, [{"localhost": 3}] * 3, elastic_timeout=30)
    driver.poll()
    driver.on_event({"event": events.STARTED, "rank": 2})   # a started rank is not late
    assert driver.slots[2].state == RUNNING
    driver.slots[2].state = PENDING
    clock.now += 31
    driver.poll()
    assert driver.slots[2].state == LOST
    assert said == ["new rank (slot 2) on host localhost did not start within 30 s (--elastic-timeout); "
                    "host blacklisted"]


def test_a_failed_discovery_is_said_once_and_keeps_the_hosts(tmp_path):
    bad = DiscoveryError("host discovery script 'x' exited with status 1")
    driver, said, _ = make(tmp_path, [{"localhost": 3}, bad, bad, {"localhost": 3}])
    for _ in range(4):
        driver.poll()
    assert said == ["host discovery script 'x' exited with status 1; keeping the hosts of its last good run"]
    assert len(published(tmp_path)["requests"]) == 1


def test_a_finishing_job_asks_for_no_one(tmp_path):
    driver, _, _ = make(tmp_path, [{"localhost": 3}])
    driver.on_event({"event": events.EXITED, "rank": 0, "status": 0})
    driver.poll()
    assert published(tmp_path)["requests"] == []


@pytest.mark.parametrize("ends, finished", [
    ([(0, 0), (1, 0)], True),
    ([(1, 137), (0, 0)], True),      # a loss, then the survivor ended the job well
    ([(0, 0), (1, 137)], False),     # the last rank to end failed
    ([(0, 0)], False),               # rank 1 still running
])
def test_finished(tmp_path, ends, finished):
    driver, _, clock = make(tmp_path, [])
    for rank, status in ends:
        clock.now += 1
        driver.on_event({"event": events.EXITED, "rank": rank, "status": status})
    assert driver.finished() is finished


def test_a_rank_killed_by_a_signal_is_said_so(tmp_path):
    driver, said, _ = make(tmp_path, [])
    driver.on_event({"event": events.EXITED, "rank": 1, "status": 137})
    driver.on_event({"event": events.FAILED, "rank": 1, "status": 137, "signal": "SIGKILL"})
    assert said == ["rank 1 (host localhost) lost: killed by SIGKILL; host blacklisted"]


def test_a_new_rank_that_ends_before_mpi_stops_the_job(tmp_path):
    driver, said, _ = make(tmp_path, [{"localhost": 3}] * 2)
    driver.poll()
    assert driver.on_event({"event": events.STARTED, "rank": 2}) is False
    assert driver.on_event({"event": events.EXITED, "rank": 2, "status": 3}) is True
    assert said == ["new rank 2 (host localhost) exited with status 3 before it began MPI's start-up; the ranks "
                    "starting it cannot go on (MPI_Comm_spawn waits for it): stopping the job"]


def test_a_new_rank_lost_after_it_began_mpi_is_an_ordinary_loss(tmp_path):
    driver, said, _ = make(tmp_path, [{"localhost": 3}] * 2)
    driver.poll()
    driver.on_event({"event": events.STARTED, "rank": 2})
    driver.on_event({"event": events.MPI_STARTING, "rank": 2})
    assert driver.on_event({"event": events.FAILED, "rank": 2, "status": 137, "signal": "SIGKILL"}) is False
    assert said == ["rank 2 (host localhost) lost: killed by SIGKILL; host blacklisted"]


def test_ranks_the_survivors_went_on_without_are_lost_once_and_the_job_can_finish(tmp_path):
    # a host that goes silent takes its ranks' wrappers with it: only the survivors can tell
    driver, said, clock = make(tmp_path, [], np=4, hosts=(("a", 2), ("b", 2)))
    assert driver.on_event({"event": events.LOST, "ranks": [2, 3]}) is False
    assert said == [f"rank {r} (host b) lost: no heartbeat from it reached the other ranks, which went on "
                    "without it; host blacklisted" for r in (2, 3)]
    driver.on_event({"event": events.FAILED, "rank": 3, "status": 137, "signal": "SIGKILL"})  # said already
    driver.on_event({"event": events.LOST, "ranks": [3, 7, "x"]})   # known, unknown, malformed: nothing
    assert len(said) == 2
    assert not driver.finished()   # ranks 0 and 1 still run
    for rank in (0, 1):
        clock.now += 1
        driver.on_event({"event": events.EXITED, "rank": rank, "status": 0})
    assert driver.finished()


def test_a_rank_open_mpi_ended_as_declared_dead_is_lost_for_want_of_a_heartbeat_whoever_reports_first(tmp_path):
    # two ranks paused past the detector's timeout: one is declared dead, and both run again at
    # once; the declared one is aborted by Open MPI as the survivors (the other one among them)
    # report it lost, in either order
    first = {}
    for order in ("wrapper first", "survivors first"):
        driver, said, _ = make(tmp_path, [], np=4, hosts=(("a", 2), ("b", 2)))
        ended = {"event": events.EXITED, "rank": 3, "status": 134, "declared_dead": True}
        lost = {"event": events.LOST, "ranks": [3]}
        for event in ((ended, lost) if order == "wrapper first" else (lost, ended)):
            driver.on_event(event)
        assert len(said) == 1 and said[0].startswith("rank 3 (host b) lost: no heartbeat from it reached the other "
                                                     "ranks"), (order, said)
        first[order] = said[0]
    assert "declared it dead and ended it (killed by SIGABRT) once it ran again" in first["wrapper first"], first


def test_a_new_rank_still_before_mpi_when_the_ranks_starting_it_are_gone_stops_the_job(tmp_path):
    driver, said, _ = make(tmp_path, [{"localhost": 3}] * 2)
    driver.poll()
    driver.on_event({"event": events.STARTED, "rank": 2})
    assert driver.on_event({"event": events.FAILED, "rank": 0, "status": 1}) is False   # rank 1 still runs
    assert driver.on_event({"event": events.FAILED, "rank": 1, "status": 1}) is True
    assert said[-1] == ("new rank 2 did not begin MPI's start-up and no rank of the job is left to start it: "
                        "stopping the job")


def test_a_new_rank_that_began_mpi_outlives_the_ranks_that_started_it(tmp_path):
    driver, said, _ = make(tmp_path, [{"localhost": 3}] * 2)
    driver.poll()
    driver.on_event({"event": events.STARTED, "rank": 2})
    driver.on_event({"event": events.MPI_STARTING, "rank": 2})
    driver.on_event({"event": events.FAILED, "rank": 0, "status": 1})
    assert driver.on_event({"event": events.FAILED, "rank": 1, "status": 1}) is False
