"""The watchdog over MPI's start-up is a process: it kills a process whose guarded block overran
(even one holding the GIL in C code, as MPI_Init does), with a message, and leaves a process
whose block finished in time alone. Not started under blinkrun."""
import subprocess
import sys
import textwrap
import time

GUARDED = textwrap.dedent("""
    import sys, time
    from blinkflow.runtime.mpi_start import mpi_start_watch
    with mpi_start_watch(1.0, {"PMIX_RANK": "5"}):
        if sys.argv[1] == "gil":  # a C call that keeps the GIL the whole time, as MPI_Init does
            import ctypes
            ctypes.PyDLL(None).sleep(30)
        time.sleep(float(sys.argv[1]) if sys.argv[1] != "gil" else 0)
    print("finished", flush=True)
""")


def _run(arg):
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", GUARDED, arg], capture_output=True, text=True, timeout=60)
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
