"""The per-rank wrapper without MPI: tagging whole lines, per-rank logs, and the failure event
(exception, exit status, signal) it sends blinkrun."""
import json
import os
import subprocess
import sys

from blinkflow.launcher.ranks import events, rank_exec
from blinkflow.launcher.ranks.rank_exec import exit_status, log_dir

PY = sys.executable


def wrap(command, rank="3", extra=()):
    env = dict(os.environ, OMPI_COMM_WORLD_RANK=rank, OMPI_COMM_WORLD_SIZE="12")
    return subprocess.run([PY, "-m", "blinkflow.launcher.ranks.rank_exec", *extra, "--", *command],
                          capture_output=True, text=True, timeout=60, env=env)


def split_events(stderr):
    text, found = [], []
    for line in stderr.splitlines(keepends=True):
        plain, event = events.split(line)
        text.append(plain)
        found += [event] if event else []
    return "".join(text), found


def test_lines_are_tagged_and_a_last_partial_line_completed(tmp_path):
    code = "import sys; print('a'); print('b', file=sys.stderr); sys.stdout.write('no newline')"
    proc = wrap([PY, "-c", code], extra=("--output-dir", str(tmp_path)))
    assert proc.returncode == 0
    assert proc.stdout == "[3]<stdout>: a\n[3]<stdout>: no newline\n"
    text, found = split_events(proc.stderr)
    assert text == "[3]<stderr>: b\n"
    assert [e["event"] for e in found] == [events.STARTED, events.EXITED] and found[0]["rank"] == 3
    assert found[1]["status"] == 0  # blinkrun learns of every end, also a clean one
    assert (tmp_path / "rank.03" / "stdout").read_text() == "a\nno newline\n"   # padded: 12 ranks
    assert (tmp_path / "rank.03" / "stderr").read_text() == "b\n"


def test_uncaught_exception_is_recorded():
    proc = wrap([PY, "-c", "def f():\n    raise KeyError('missing')\nf()"])
    assert proc.returncode == 1
    _, found = split_events(proc.stderr)
    failed = next(e for e in found if e["event"] == events.FAILED)
    assert failed["event"] == events.FAILED and failed["status"] == 1 and failed["rank"] == 3
    assert failed["exc"] == "KeyError: 'missing'"
    assert failed["tail"][0] == "Traceback (most recent call last):" and "in f" in "\n".join(failed["tail"])


def test_exit_status_and_signal_are_reported():
    proc = wrap(["sh", "-c", "echo boom >&2; exit 7"])
    assert proc.returncode == 7
    failed = split_events(proc.stderr)[1][-1]
    assert (failed["status"], failed["signal"], failed["exc"], failed["tail"]) == (7, None, None, ["boom"])
    proc = wrap(["sh", "-c", "kill -9 $$"])
    assert proc.returncode == 137
    failed = split_events(proc.stderr)[1][-1]
    assert (failed["status"], failed["signal"]) == (137, "SIGKILL")


def test_a_rank_open_mpi_ended_as_declared_dead_says_so_in_its_exit_event():
    # after a pause longer than the failure detector's timeout, Open MPI prints this and aborts
    said = "[h:1] ompi_proc_mark_as_failed: I have been reported dead by someone else. Aborting."
    proc = wrap([PY, "-c", f"import os, sys; print({said!r}, file=sys.stderr, flush=True); os.abort()"])
    exited = next(e for e in split_events(proc.stderr)[1] if e["event"] == events.EXITED)
    assert (exited["status"], exited.get("declared_dead")) == (134, True), proc.stderr
    # the abort then dumps every thread's stack (faulthandler): more lines than the wrapper's tail
    # keeps (a training process has dozens of threads), which once pushed the line out of sight
    dump = "\n".join(f'  File "x.py", line {i} in f' for i in range(3 * rank_exec.TAIL_LINES))
    proc = wrap([PY, "-c", f"import os, sys; print({said!r}, file=sys.stderr); print({dump!r}, file=sys.stderr, "
                           "flush=True); os.abort()"])
    exited = next(e for e in split_events(proc.stderr)[1] if e["event"] == events.EXITED)
    assert (exited["status"], exited.get("declared_dead")) == (134, True), proc.stderr[-2000:]
    proc = wrap([PY, "-c", "import os, sys; print('something else', file=sys.stderr, flush=True); os.abort()"])
    exited = next(e for e in split_events(proc.stderr)[1] if e["event"] == events.EXITED)
    assert (exited["status"], exited.get("declared_dead")) == (134, None), proc.stderr


def test_missing_command_is_127():
    proc = wrap(["no-such-command-blinkflow"])
    assert proc.returncode == 127
    assert "cannot start 'no-such-command-blinkflow'" in proc.stderr


def test_the_hook_stays_out_of_grandchildren():
    # A Python started by the rank raises: the rank itself exits 0, so nothing is recorded.
    code = f"import subprocess; subprocess.run([{PY!r}, '-c', 'raise SystemError(1)'])"
    proc = wrap([PY, "-c", code])
    assert proc.returncode == 0
    assert [e["event"] for e in split_events(proc.stderr)[1]] == [events.STARTED, events.EXITED]


def test_helpers():
    assert exit_status(0) == 0 and exit_status(3) == 3 and exit_status(-9) == 137
    assert log_dir("/l", 7, 8) == "/l/rank.7" and log_dir("/l", 7, 100) == "/l/rank.07"


def test_event_lines_round_trip_and_stay_short():
    line = events.encode({"event": "failed", "rank": 1, "tail": ["x" * 100] * 200})
    assert len(line) <= events.MAX_LINE and line.endswith("\n")
    text, event = events.split(line)
    assert text == "" and event["rank"] == 1 and 0 < len(event["tail"]) < 200 and event["tail"][-1] == "x" * 100
    text, event = events.split("banner text " + line)
    assert text == "banner text \n" and event["event"] == "failed"
    assert events.split("ordinary\n") == ("ordinary\n", None)
    assert events.split(events.MARK + "{not json\n") == (events.MARK + "{not json\n", None)
    assert json.loads(line[len(events.MARK):])["event"] == "failed"


def test_a_long_exception_message_is_shortened_not_cut_mid_json():
    # Cutting the line made it invalid JSON: blinkrun lost the failure and printed the raw line.
    exc = "TensorMismatchError: " + "shape (1, 2, 3) vs " * 400
    line = events.encode({"event": "failed", "rank": 3, "status": 1, "exc": exc, "tail": ["y" * 4000]})
    assert len(line) <= events.MAX_LINE and line.endswith("\n")
    text, event = events.split(line)
    assert text == "" and event["rank"] == 3 and event["status"] == 1 and event["tail"] == []
    assert event["exc"].startswith("TensorMismatchError: shape (1, 2, 3)") and event["exc"].endswith(" ...")
    assert len(line) > events.MAX_LINE - 100  # shortened to fit, not emptied
    wide = events.encode({"event": "failed", "rank": 0, "exc": "\u00e9" * 5000})  # 6 characters each in JSON
    assert events.MAX_LINE - 100 < len(wide) <= events.MAX_LINE and events.split(wide)[1]["exc"].endswith(" ...")


def test_a_users_own_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITE = 'loaded'\n")
    env_path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    env = dict(os.environ, PYTHONPATH=env_path, OMPI_COMM_WORLD_RANK="0")
    proc = subprocess.run([PY, "-m", "blinkflow.launcher.ranks.rank_exec", "--", PY, "-c",
                           "import sys; print(USER_SITE, sys.excepthook.__name__)"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.stdout == "[0]<stdout>: loaded _record_and_abort\n", proc.stderr


def test_the_hook_folder_is_packaged():
    # A non-editable install must carry pyhook/ (rank_exec puts it on the ranks' PYTHONPATH).
    import configparser
    import pathlib
    setup = pathlib.Path(__file__).resolve().parents[2] / "setup.cfg"
    if not setup.is_file():
        import pytest
        pytest.skip("not running from a source checkout")
    parser = configparser.ConfigParser()
    parser.read(setup)
    assert "blinkflow.launcher.ranks.pyhook" in parser["options"]["packages"].split()


def _pumped(chunks, timestamp=False):
    """What the rank's tagged stream holds after the child wrote ``chunks`` (one read each)."""
    import os as _os
    from blinkflow.launcher.ranks.rank_exec import _Pump

    read_fd, write_fd = _os.pipe()
    pump = _Pump(None, write_fd, b"[0]<stdout>: ", None, timestamp=timestamp)
    pending = b""
    for chunk in chunks:
        pending = pump.feed(pending + chunk)
    if pending:
        pump.feed(pending + b"\n")
    _os.close(write_fd)
    with _os.fdopen(read_fd, "rb") as f:
        return f.read()


def test_a_carriage_return_redraws_the_tagged_line():
    # Keras's progress bar: backspaces and "\r" before each update, a newline at the end
    out = _pumped([b"\b\b\r1/3 [==", b"\b\b\b\r2/3 [====", b"\b\r3/3 [======]\n", b"done\n"])
    assert out == (b"\r[0]<stdout>: 1/3 [==\r[0]<stdout>: 2/3 [====\r[0]<stdout>: 3/3 [======]\n"
                   b"[0]<stdout>: done\n")


def test_plain_and_crlf_lines_are_unchanged():
    assert _pumped([b"a\nb", b"c\n", b"d\r", b"\n"]) == b"[0]<stdout>: a\n[0]<stdout>: bc\n[0]<stdout>: d\n"
    assert _pumped([b"no newline at the end"]) == b"[0]<stdout>: no newline at the end\n"


def test_timestamped_lines():
    import re as _re

    out = _pumped([b"x\n"], timestamp=True).decode()
    assert _re.fullmatch(r"\w{3} \w{3} [ 0-9]\d \d\d:\d\d:\d\d \d{4} \[0\]<stdout>: x\n", out), out


def test_a_ranks_own_event_line_passes_untagged():
    # the survivors' events.LOST comes from the rank itself; blinkrun reads it as its wrapper's
    line = events.encode({"event": events.LOST, "ranks": [2, 3]}).encode()
    assert _pumped([b"before\n" + line + b"after\n"]) == b"[0]<stdout>: before\n" + line + b"[0]<stdout>: after\n"


def test_a_rank_cut_off_by_a_network_partition_stops_the_daemon_that_started_it(tmp_path):
    # the side of a cut that does not go on (PartitionError) calls pyhook's blinkrun_cut_off();
    # its wrapper then stops its parent, the host's MPI daemon, which would wait for mpirun forever
    daemon = tmp_path / "prted"
    daemon.write_text('#!/bin/sh\n"$@"\nsleep 30\n')
    daemon.chmod(0o755)
    rank = "import sitecustomize; sitecustomize.blinkrun_cut_off(); raise SystemExit(0)"
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="4")
    done = subprocess.run([str(daemon), PY, "-m", "blinkflow.launcher.ranks.rank_exec", "--", PY, "-c", rank],
                          capture_output=True, text=True, timeout=25, env=env)
    assert done.returncode == -15, done.stderr


def test_an_ordinary_end_leaves_the_parent_alone(tmp_path):
    daemon = tmp_path / "prted"
    daemon.write_text('#!/bin/sh\n"$@"\necho parent-lives\n')
    daemon.chmod(0o755)
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="4")
    done = subprocess.run([str(daemon), PY, "-m", "blinkflow.launcher.ranks.rank_exec", "--", PY, "-c", "pass"],
                          capture_output=True, text=True, timeout=25, env=env)
    assert done.returncode == 0 and "parent-lives" in done.stdout, done.stderr
