"""The watchdog over MPI's start-up is a process: it kills a process whose guarded block overran
(even one holding the GIL in C code, as MPI_Init does), with a message, and leaves a process
whose block finished in time alone. Not started under blinkrun."""
import json
import os
import subprocess
import sys
import textwrap
import time

GUARDED = textwrap.dedent("""
    import json, sys, time
    from blinkflow.runtime.mpi_start import mpi_start_watch
    with mpi_start_watch(1.0, json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"PMIX_RANK": "5"}):
        if sys.argv[1] == "gil":  # a C call that keeps the GIL the whole time, as MPI_Init does
            import ctypes
            ctypes.PyDLL(None).sleep(30)
        time.sleep(float(sys.argv[1]) if sys.argv[1] != "gil" else 0)
    print("finished", flush=True)
""")


def _run(arg, environ=None):
    began = time.monotonic()
    argv = [sys.executable, "-c", GUARDED, arg] + ([json.dumps(environ)] if environ else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return proc, time.monotonic() - began


def test_a_block_that_overruns_is_killed_with_a_message():
    for arg in ("30", "gil"):
        proc, took = _run(arg)
        assert proc.returncode == -9 and "finished" not in proc.stdout, (arg, proc.returncode, proc.stderr)
        assert "blinkflow: rank 5: MPI's start-up (MPI_Init, in blinkflow.init()) did not complete within 1 s" \
            in proc.stderr, proc.stderr
        assert took < 15, took


def test_a_block_that_finishes_in_time_is_left_alone():
    proc, _ = _run("0.1")
    assert proc.returncode == 0 and proc.stdout == "finished\n" and proc.stderr == "", proc.stderr


def test_no_watchdog_under_blinkrun():
    from blinkflow.runtime.mpi_start import mpi_start_watch

    before = time.monotonic()
    with mpi_start_watch(0.01, {"BLINKRUN_WRAPPER_PID": "1"}):
        time.sleep(0.2)  # would be killed if a watchdog had started
    assert time.monotonic() - before >= 0.2


def _job(session, rank, size, local, namespace="prterun-vm-1@1"):
    return {"PMIX_RANK": str(rank), "OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(local), "PMIX_NAMESPACE": namespace, "PMIX_SERVER_TMPDIR": str(session)}


def test_the_watchdog_names_the_ranks_that_never_began(tmp_path):
    # Ranks 0 and 2 of 4 on one host began (their marks); rank 3 marks itself and overruns.
    from blinkflow.runtime.mpi_start import presence_folder

    folder = presence_folder(_job(tmp_path, 0, 4, 4))
    assert folder == os.path.join(str(tmp_path), "blinkflow-started-prterun-vm-1@1")
    os.makedirs(folder)
    for rank in (0, 2):
        open(os.path.join(folder, str(rank)), "w").close()
    proc, _ = _run("30", _job(tmp_path, 3, 4, 4))
    assert proc.returncode == -9, proc.stderr
    assert sorted(os.listdir(folder)) == ["0", "2", "3"]
    assert ("blinkflow: rank 3: MPI's start-up (MPI_Init, in blinkflow.init()) did not complete within 1 s "
            "(BLINKFLOW_START_TIMEOUT): rank 1 never began it: it exited before blinkflow.init()") in proc.stderr, \
        proc.stderr


def test_across_hosts_the_watchdog_says_what_its_host_can_tell(tmp_path):
    # Ranks 0 and 1 of 4 share this host: with rank 0 missing, one of the host's two never began;
    # with both there, the missing rank is on another host.
    proc, _ = _run("30", _job(tmp_path, 1, 4, 2))
    assert proc.returncode == -9 and "1 of this host's 2 ranks never began it (those that did: rank 1)" \
        in proc.stderr, proc.stderr
    from blinkflow.runtime.mpi_start import presence_folder

    open(os.path.join(presence_folder(_job(tmp_path, 0, 4, 2)), "0"), "w").close()
    proc, _ = _run("30", _job(tmp_path, 1, 4, 2))
    assert proc.returncode == -9 and ("the 2 ranks on this host (ranks [0, 1]) all began it: the rank that never "
                                      "did is on another host") in proc.stderr, proc.stderr
