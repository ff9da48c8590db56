"""The op libraries' build and cache (blinkflow/tensorflow/_op_library.py, _library_cache.py):
nothing left behind by a killed build, nothing loaded that another user could have written.

The compiler is a stand-in ``g++`` first on PATH (a shell script), so a build is a bounded,
observable process tree instead of a real compile against TensorFlow's headers."""
import gc
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

tf = pytest.importorskip("tensorflow")

from blinkflow.tensorflow import _op_library  # noqa: E402

# A compiler that records its pid and its child's, then waits on the child (as g++ waits on
# cc1plus); FAIL=1: fails at once; otherwise with BUILD=1 it writes its -o file and ends.
FAKE_GXX = """#!/bin/sh
if [ -n "$FAIL" ]; then echo "g++: error: stand-in failure" >&2; exit 1; fi
if [ -n "$BUILD" ]; then
  while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then printf built > "$2"; fi; shift; done
  exit 0
fi
echo $$ >> "$PIDS"
sleep 300 &
echo $! >> "$PIDS"
wait
"""


@pytest.fixture
def fake_gxx(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gxx = bin_dir / "g++"
    gxx.write_text(FAKE_GXX)
    gxx.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BLINKFLOW_", "OMPI_", "PMIX_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", HOME=str(tmp_path / "home"),
               PIDS=str(tmp_path / "pids"))
    env.pop("XDG_CACHE_HOME", None)
    monkeypatch.setenv("PATH", env["PATH"])
    return env


def _gone(pid: int) -> bool:
    """Whether ``pid`` ended (a zombie nobody reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


LOAD = "from blinkflow.tensorflow import _op_library; print(_op_library.load() is None)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_build_takes_its_compiler_along_and_leaves_no_temporary_file(fake_gxx, tmp_path):
    env = dict(fake_gxx, XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"))   # where either version looks
    parent = subprocess.Popen([sys.executable, "-c", LOAD], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    pids = []
    try:
        deadline = time.monotonic() + 180   # TensorFlow's import on a loaded machine
        while len(pids) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
            if os.path.exists(env["PIDS"]):
                pids = [int(line) for line in open(env["PIDS"]).read().split()]
        assert len(pids) == 2, f"the stand-in compiler did not start (parent status {parent.poll()})"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in pids if not _gone(pid)] == [], "the compiler outlived the process that ran it"
    finally:
        parent.kill()
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    folder = tmp_path / "home" / ".cache" / "blinkflow"
    assert [p.name for p in folder.glob("*.so")], "the killed build made no temporary file to clean"
    done = subprocess.run([sys.executable, "-c", LOAD], env=dict(env, FAIL="1"), capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.split()[-1:] == ["True"], done.stderr[-2000:]   # the stand-in fails: no library
    assert [p.name for p in folder.glob("*.so")] == [], "the next start left the killed build's file"


def test_the_cache_honours_xdg_cache_home_and_is_private(fake_gxx, tmp_path):
    env = dict(fake_gxx, XDG_CACHE_HOME=str(tmp_path / "xdg"), BUILD="1")
    done = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = tmp_path / "xdg" / "blinkflow"
    assert [p.name for p in folder.glob("blinkflow_ops-*.so")], sorted(os.listdir(tmp_path))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not (tmp_path / "home" / ".cache" / "blinkflow").exists()


def _untrusted(path, how):
    path.write_bytes(b"planted")
    if how == "group-writable":
        path.chmod(0o664)
    elif how == "other-writable":
        path.chmod(0o646)
    elif how == "another user's":
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(path, 65534, 65534)
    elif how == "a link":
        target = path.parent / "elsewhere.so"
        target.write_bytes(b"planted")
        path.unlink()
        path.symlink_to(target)


@pytest.mark.parametrize("how", ["group-writable", "other-writable", "another user's", "a link"])
def test_a_library_others_could_have_written_is_rebuilt_not_loaded(fake_gxx, tmp_path, monkeypatch, how):
    monkeypatch.setenv("BUILD", "1")
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)
    target = folder / "blinkflow_ops-test.so"
    _untrusted(target, how)
    built = _op_library._build_once(_op_library.SOURCES, [], str(target))
    assert target.read_bytes() == b"built"
    info = os.lstat(target)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022
    assert built in (None, str(target))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_trusted_library_is_loaded_as_built(fake_gxx, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL", "1")   # no build may run
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    target = folder / "blinkflow_ops-test.so"
    target.write_bytes(b"mine")
    target.chmod(0o700)
    _op_library._build_once(_op_library.SOURCES, [], str(target))
    assert target.read_bytes() == b"mine"


def test_xla_callbacks_go_with_the_function_that_traced_them():
    from blinkflow.tensorflow.crossing import xla as _xla

    if _op_library.load_xla() is None:
        pytest.skip("blinkflow's XLA op cannot be built here (g++ or TensorFlow's XLA headers)")
    before = len(_xla._calls)

    @tf.function(jit_compile=True)
    def double_then_add(x):
        y = _xla.call(lambda arrays: [a * 2 for a in arrays], [x], [x.dtype], [x.shape], "double")[0]
        return tf.cond(tf.reduce_sum(y) > 0,
                       lambda: _xla.call(lambda arrays: [a + 1 for a in arrays], [y], [y.dtype], [y.shape], "add")[0],
                       lambda: y)

    assert double_then_add(tf.constant([1.0, 2.0])).numpy().tolist() == [3.0, 5.0]
    assert double_then_add(tf.constant([1.0, 2.0, 3.0])).numpy().tolist() == [3.0, 5.0, 7.0]   # a second trace
    assert len(_xla._calls) >= before + 4
    del double_then_add
    gc.collect()
    assert len(_xla._calls) == before, "the callbacks outlived the function that traced them"


def test_an_unknown_xla_call_fails_its_step_with_a_message():
    import ctypes

    from blinkflow.tensorflow.crossing import xla as _xla

    error = ctypes.create_string_buffer(512)
    code = _xla._run(10**12, 0, None, None, 0, None, None, None, error, 512)
    assert code != 0 and b"whose graph is gone" in error.value
