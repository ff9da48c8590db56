"""What killed jobs leave behind is reclaimed at the next start (issue 18, finding 6): scratch
folders whose creator is gone, Open MPI session folders of a dead mpirun, and shared-memory
segments no live process uses; never anything still in use."""
import os
import subprocess
import sys
import time

from blinkflow.launcher.job import reclaim


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_scratch_and_session_folders_of_gone_processes_are_stale(tmp_path):
    dead = _dead_pid()
    for name in (f"blinkrun-{dead}-abc", f"blinkrun-rank3-{dead}-xyz", f"ompi.{dead}",
                 f"blinkrun-{os.getpid()}-mine", f"blinkrun-rank0-{os.getpid()}-mine", f"ompi.{os.getpid()}",
                 "blinkrun-notapid-x", "unrelated"):
        (tmp_path / name).mkdir()
    stale = {os.path.basename(p) for p in reclaim.stale_folders(str(tmp_path), reclaim.SCRATCH)}
    assert stale == {f"blinkrun-{dead}-abc", f"blinkrun-rank3-{dead}-xyz"}
    assert [os.path.basename(p) for p in reclaim.stale_folders(str(tmp_path), reclaim.SESSION)] == [f"ompi.{dead}"]


def test_segments_in_use_or_young_are_kept(tmp_path):
    now = time.time()
    for name, age in (("sm_segment.h.0.1.0", 3600), ("sm_segment.h.0.1.1", 3600), ("sm_segment.h.0.2.0", 5),
                      ("psm_other", 3600)):
        path = tmp_path / name
        path.write_bytes(b"x")
        os.utime(path, (now - age, now - age))
    in_use = {os.path.realpath(tmp_path / "sm_segment.h.0.1.1")}
    stale = reclaim.stale_segments(str(tmp_path), in_use, now=now)
    assert [os.path.basename(p) for p in stale] == ["sm_segment.h.0.1.0"]


def test_a_mapped_segment_is_seen_in_use(tmp_path):
    import mmap

    path = tmp_path / "sm_segment.h.0.3.0"
    path.write_bytes(b"\0" * 4096)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 4096):
        used = reclaim.files_in_use(str(tmp_path) + "/")
        assert used is not None and os.path.realpath(path) in used
    used = reclaim.files_in_use(str(tmp_path) + "/")
    assert used is not None and os.path.realpath(path) not in used


def test_reclaim_removes_only_what_is_stale(tmp_path):
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    dead = _dead_pid()
    (tmp / f"blinkrun-{dead}-abc").mkdir()
    (tmp / f"blinkrun-{os.getpid()}-live").mkdir()
    old = shm / "sm_segment.h.0.9.0"
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    removed = reclaim.reclaim(str(tmp), str(shm))
    assert sorted(os.path.basename(p) for p in removed) == [f"blinkrun-{dead}-abc", "sm_segment.h.0.9.0"]
    assert os.listdir(tmp) == [f"blinkrun-{os.getpid()}-live"] and os.listdir(shm) == []
