"""The one multi-process test harness: launch a script on N ranks through mpirun, and the one
result protocol its case scripts speak.

A case script (run on every rank) defines ``case_<name>(rank, size)`` functions and hands them
to :func:`run_cases`. A case passes by returning, fails by raising, and reports that it does not
apply at this world size or on this machine by calling :func:`skip` with the reason; it never
returns early (the runner fails a case whose body holds a ``return``, so a case that did nothing
cannot show green). Each rank prints one record per case and, once every case ran, the one
completion marker; scripts that are not split into cases print the marker with :func:`done`.

Under ``--with-ft ulfm`` a rank's last lines may never reach mpirun's output: once about half
of a job's ranks have exited with a failure status, Open MPI closes the others' output (their
next write fails with EIO) and may end them (measured: 3 ranks, 2 leaving with ``os._exit(1)``:
the third's next 19 prints of 20 failed; 5 ranks, all printing one line then leaving so: 10 to
18 lines lost in 100; none with status 0 or by a signal). A script whose ranks end that way says
its result lines with :func:`say`, which first writes them to a file of the job's own; the job's
result carries them as ``said``.

The pytest side launches a script once per configuration (:func:`launch`, memoised, so one
mpirun launch serves every case of it) and reports each case as its own test
(:meth:`Launch.expect`): passed on every rank, skipped (with the reason) on every rank, or
failed, with the failing ranks' tracebacks. :func:`launch_scripts` runs the cases of several
scripts in one job, every rank importing them into one process (:func:`run_scripts`), so what
they import, TensorFlow above all, is imported once per rank. :func:`launch_alone` runs a case
script as one plain process, for programs that must not start MPI.

:func:`close` is the one float comparison rule: the rounding bound a reduction can do.

Nothing here imports pytest, mpi4py or numpy at module level: the ranks import this file too.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

TESTS = os.path.dirname(os.path.abspath(__file__))
FAKE_CUPY = os.path.join(TESTS, "fake_cupy")
#: A case's record: ``@@case {"case": ..., "rank": ..., "status": "pass"|"skip"|"fail", "text": ...}``.
RECORD = "@@case "
#: The one completion marker: ``@@done <rank>``, printed by every rank that finished its script.
DONE = "@@done "
#: The folder, one per job, where :func:`say` writes each rank's lines (one file per process).
SAID = "TESTS_SAID"
PASS, SKIP, FAIL = "pass", "skip", "fail"
DEFAULT_TIMEOUT = 240
#: A failing rank waits this long before taking the job down, so peers failing the same case
#: report it too.
FAIL_GRACE_S = 1.0
_TEXT_LIMIT = 3000   # characters of a record's text: one line of the job's output, not a log


# ----------------------------------------------------------------------------- the ranks' side

class Skip(Exception):
    """Raised by :func:`skip`: the case does not apply here."""


def skip(reason: str) -> None:
    """End the current case as skipped (every rank must decide alike; the reason says why)."""
    raise Skip(reason)


def returns_early(fn: Callable) -> Optional[int]:
    """The line of the first ``return`` in ``fn``'s own body (nested functions aside), or None."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    first = ast.parse(source).body[0]
    todo = list(first.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            return fn.__code__.co_firstlineno + node.lineno - 1
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return None


def record(case: str, rank: int, status: str, text: str = "", seconds: float = 0.0) -> None:
    line = json.dumps({"case": case, "rank": rank, "status": status, "text": text[-_TEXT_LIMIT:],
                       "seconds": round(seconds, 3)})
    print(f"\n{RECORD}{line}", flush=True)


def done(rank: int) -> None:
    """Print the completion marker: this rank ran its whole script."""
    print(f"\n{DONE}{rank}", flush=True)


def say(line: str) -> None:
    """Keep ``line`` in the job's own record of what its ranks said, then print it: the record
    survives what mpirun's output may not (see the module docstring)."""
    folder = os.environ.get(SAID)
    if folder:
        try:
            with open(os.path.join(folder, str(os.getpid())), "a") as said:
                said.write(line + "\n")
        except OSError as e:   # the job's folder out of reach (another host): the printed line is left
            print(f"harness.say: could not keep the line in {folder}: {e}", file=sys.stderr, flush=True)
    print(line, flush=True)


def abort_job() -> None:
    """Take the whole job down after a failed case (the other ranks may be waiting on this one)."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(FAIL_GRACE_S)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(1)
    os._exit(1)


def case_functions(namespace: Mapping[str, object], only: Sequence[str] = ()) -> List[Tuple[str, Callable]]:
    """``case_*`` functions of a module's globals, in definition order (``only``: those names)."""
    found = [(name[5:], fn) for name, fn in namespace.items() if name.startswith("case_") and callable(fn)]
    unknown = set(only) - {name for name, _ in found}
    if unknown:
        raise ValueError(f"no case named {sorted(unknown)}; the script has {[name for name, _ in found]}")
    return [(name, fn) for name, fn in found if not only or name in only]


def run_cases(namespace: Mapping[str, object], rank: int, size: int, only: Sequence[str] = (),
              stop: Callable[[], None] = abort_job, prefix: str = "", finish: bool = True) -> None:
    """Run every case of ``namespace`` (a module's globals), or those named in ``only``, in order,
    printing one record per case (named ``prefix`` + its name); after a failure, ``stop()`` (by
    default: end the whole job). Prints the completion marker when every case ran (``finish``)."""
    for name, fn in case_functions(namespace, only):
        line = returns_early(fn)
        if line is not None:
            record(prefix + name, rank, FAIL, f"case_{name} returns early (line {line}): a case that does not "
                                              "apply calls skip(reason), so the harness reports it skipped")
            stop()
            continue
        began = time.monotonic()
        try:
            fn(rank, size)
        except Skip as e:
            record(prefix + name, rank, SKIP, str(e), time.monotonic() - began)
        except BaseException:  # noqa: BLE001 - any failure, reported with its traceback
            record(prefix + name, rank, FAIL, traceback.format_exc(), time.monotonic() - began)
            stop()
        else:
            record(prefix + name, rank, PASS, seconds=time.monotonic() - began)
    if finish:
        done(rank)


def job_rank_size() -> Tuple[int, int]:
    """This process's rank and the job's size, from the launcher's environment: known before MPI
    starts, so a case script may start it its own way (``blinkflow.init``, a process set)."""
    for rank, size in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def split_spec(spec: str) -> Tuple[str, List[str]]:
    """``"path/x_script.py:a,b"`` -> (the script, the cases it runs: here a and b; none named: all)."""
    path, _, cases = spec.partition(":")
    return path, [c for c in cases.split(",") if c]


def script_stem(path: str) -> str:
    """The name a script's cases carry in a launch of several scripts: ``<stem>.<case>``."""
    return os.path.splitext(os.path.basename(path))[0]


def run_scripts(specs: Sequence[str], rank: int, size: int, stop: Callable[[], None] = abort_job) -> None:
    """Import each case script of ``specs`` (``path`` or ``path:case,case``) in this one process
    and run its cases in order, each named ``<stem>.<case>``; then the completion marker. One
    process serves them all: what they import (TensorFlow: seconds per rank) is imported once.
    A script whose import fails fails its first case (the job then ends there)."""
    import importlib.util

    for spec in specs:
        path, only = split_spec(spec)
        stem = script_stem(path)
        directory = os.path.dirname(os.path.abspath(path))
        if directory not in sys.path:
            sys.path.insert(0, directory)
        try:
            module_spec = importlib.util.spec_from_file_location(stem, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[stem] = module
            module_spec.loader.exec_module(module)
        except BaseException:  # noqa: BLE001 - reported as the first case's failure
            first = (only or case_names(path) or ["import"])[0]
            record(f"{stem}.{first}", rank, FAIL, f"importing {path} failed:\n{traceback.format_exc()}")
            stop()
            continue
        run_cases(vars(module), rank, size, only, stop, prefix=f"{stem}.", finish=False)
    done(rank)


# ------------------------------------------------------------------------- the one float rule

def close(got, want, magnitude=0.0, ranks: int = 1, rounding=None, what: str = "") -> None:
    """Assert ``got`` equals ``want`` (same shape) within the rounding a reduction can do: eps of
    ``rounding`` (the dtype the reduction ran in; ``got``'s by default) times (ranks + 1) times
    ``magnitude``, the inputs' summed magnitudes (scalar or per element). Each of a reduction's at
    most ``ranks`` partial results, and a scaled result once more, is rounded by at most eps/2 of
    a value no larger than that sum. ``magnitude=0`` asks for equality (copies, integers, sums of
    small whole numbers). Dtypes are the caller's to check."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    label = f"{what}: " if what else ""
    assert got.shape == want.shape, f"{label}shape {got.shape}, expected {want.shape}"
    kind = np.dtype(rounding or got.dtype)
    if kind.kind not in "fc" or not np.any(magnitude):
        assert np.array_equal(got, want, equal_nan=kind.kind in "fc"), f"{label}{got!r}, expected {want!r}"
        return
    bound = np.broadcast_to(np.finfo(kind).eps * (ranks + 1) * np.abs(np.asarray(magnitude, np.float64)), got.shape)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = ~(err <= bound) & ~(np.isnan(got) & np.isnan(want))
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.shape else ()
        raise AssertionError(f"{label}element {i} is {got[i]!r}, expected {want[i]!r} (within {bound[i]!r})")


# ----------------------------------------------------------------------------- launching ranks

@functools.lru_cache(maxsize=1)
def _mpi():
    from blinkflow.launcher.job.mpi_impl import detect
    return detect()


def with_tests_on_path(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` with tests/ on PYTHONPATH (case scripts import this file), after what it holds."""
    env = dict(env)
    paths = [p for p in env.get("PYTHONPATH", os.environ.get("PYTHONPATH", "")).split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([TESTS] if TESTS not in paths else []))
    return env


def mpirun_command(n: int, argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
                   mpi_options: Sequence[str] = ()) -> List[str]:
    """mpirun's argv from the launcher's builder: this interpreter's mpirun, the flags this machine
    needs, ``env`` set on every rank, ``mpi_options`` (e.g. ``--enable-recovery``), then ``argv``."""
    from blinkflow.launcher.job.mpirun_argv import LaunchSpec, build_mpirun_argv
    from blinkflow.launcher.commands.run import local_cores

    # The test process's BLINKFLOW_* settings reach every rank, on this host or another (a rank
    # elsewhere sees only what -x names, and ranks must agree on them).
    settings = {k: v for k, v in os.environ.items() if k.startswith("BLINKFLOW_")}
    settings.update(env or {})
    spec = LaunchSpec(np=n, command=tuple(argv), settings=settings, mpi_args=tuple(mpi_options), wrapped=False)
    # A variable set for the ranks is forwarded with its value only, not again from this process.
    environ = {k: v for k, v in os.environ.items() if k not in settings}
    return build_mpirun_argv(_mpi(), spec, python=sys.executable, environ=environ,
                             is_root=hasattr(os, "geteuid") and os.geteuid() == 0, local_cores=local_cores())


def _argv(script: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(script, str):
        return [sys.executable, script]
    argv = list(script)
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    return argv


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


class LaunchTimeout(AssertionError):
    def __init__(self, message: str, stdout: str, stderr: str):
        super().__init__(message)
        self.stdout, self.stderr = stdout, stderr


def run_ranks(n: int, script: Union[str, Sequence[str]], env: Optional[Mapping[str, str]] = None,
              timeout: float = DEFAULT_TIMEOUT, check: bool = True, mpi_options: Sequence[str] = (),
              cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run ``script`` (a Python file, or an argv whose ``"python"`` means this interpreter) on
    ``n`` ranks. A job that outlives ``timeout`` is killed whole (its process group) and raises
    :class:`LaunchTimeout` with every rank's output; ``check``: a non-zero exit raises too. The
    result's ``said`` holds what the ranks gave :func:`say`."""
    with tempfile.TemporaryDirectory(prefix="tests-said-") as folder:
        env = with_tests_on_path(dict(env or {}, **{SAID: folder}))
        return _run(mpirun_command(n, _argv(script), env, mpi_options), env, timeout, check, cwd,
                    f"mpirun -np {n}")


def run_alone(script: Union[str, Sequence[str]], env: Optional[Mapping[str, str]] = None,
              timeout: float = DEFAULT_TIMEOUT, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``script`` as one plain process, without mpirun (a program that must not start MPI),
    under :func:`run_ranks`'s rules."""
    with tempfile.TemporaryDirectory(prefix="tests-said-") as folder:
        return _run(_argv(script), with_tests_on_path(dict(env or {}, **{SAID: folder})), timeout, check, None,
                    "the process")


def _run(cmd: List[str], env: Mapping[str, str], timeout: float, check: bool, cwd: Optional[str],
         what: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    full_env.update(env)
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        said = _said(env[SAID])
        raise LaunchTimeout(f"{what} timed out after {timeout}s: {' '.join(cmd)}\n"
                            f"--- stdout ---\n{_text(out)[-4000:]}\n--- stderr ---\n{_text(err)[-4000:]}"
                            + (f"\n--- said ---\n{said[-2000:]}" if said else ""), _text(out), _text(err)) from None
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    result.said = _said(env[SAID])
    if check and result.returncode != 0:
        raise AssertionError(f"{what} exited {result.returncode}: {' '.join(cmd)}\n"
                             f"--- stdout ---\n{out[-6000:]}\n--- stderr ---\n{err[-6000:]}"
                             + (f"\n--- said ---\n{result.said[-2000:]}" if result.said else ""))
    return result


def _said(folder: str) -> str:
    """What the job's processes gave :func:`say`: each process's lines in order, processes in
    no particular order."""
    return "".join(open(os.path.join(folder, name)).read() for name in sorted(os.listdir(folder)))


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def finished_ranks(stdout: str) -> List[int]:
    """The ranks that printed the completion marker."""
    return sorted(int(r) for r in re.findall(rf"^{re.escape(DONE)}(\d+)$", stdout, re.M))


def assert_done(proc: subprocess.CompletedProcess, n: int) -> str:
    """Every one of ``n`` ranks ran its whole script (the completion marker) and the job exited 0;
    returns the job's stdout."""
    ranks = finished_ranks(proc.stdout)
    assert proc.returncode == 0 and ranks == list(range(n)), (
        f"exit status {proc.returncode}, finished ranks {ranks} of {n}\n--- stdout ---\n{proc.stdout[-4000:]}"
        f"\n--- stderr ---\n{proc.stderr[-4000:]}")
    return proc.stdout


def fake_cupy_env(**settings: str) -> Dict[str, str]:
    """The environment of ranks that import ``tests/fake_cupy`` as CuPy, plus ``settings``."""
    paths = [FAKE_CUPY] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(paths), **settings}


# ------------------------------------------------------------------- cases as pytest tests

def case_names(script: str) -> List[str]:
    """The ``case_*`` names a case script defines, in order (read, not imported: for parametrize)."""
    with open(script) as f:
        tree = ast.parse(f.read())
    return [node.name[5:] for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("case_")]


def parse_records(stdout: str) -> Dict[str, Dict[int, Tuple[str, str]]]:
    """case -> rank -> (status, text) from a job's output."""
    found: Dict[str, Dict[int, Tuple[str, str]]] = {}
    for line in stdout.splitlines():
        if line.startswith(RECORD):
            try:
                item = json.loads(line[len(RECORD):])
            except ValueError:
                continue   # a line another rank's output cut into: that rank's case shows missing
            found.setdefault(item["case"], {})[item["rank"]] = (item["status"], item["text"])
    return found


@dataclasses.dataclass
class Launch:
    """One job's outcome, read case by case."""

    n: int
    stdout: str
    stderr: str
    returncode: Optional[int]    # None: killed at its timeout
    order: List[str]              # the cases the job was asked to run, in the order they run

    @property
    def records(self) -> Dict[str, Dict[int, Tuple[str, str]]]:
        return parse_records(self.stdout)

    def _tail(self) -> str:
        return f"\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"

    def _first_unfinished(self, records) -> Optional[str]:
        """The first case, in running order, that failed or lacks a record from some rank: where
        the job ended, if it ended early."""
        for name in self.order:
            mine = records.get(name, {})
            if len(mine) < self.n or any(status == FAIL for status, _ in mine.values()):
                return name
        return None

    def verdict(self, case: str) -> Tuple[str, str]:
        """(PASS|SKIP|FAIL, why) of ``case`` over every rank."""
        records = self.records
        mine = records.get(case, {})
        failed = {r: text for r, (status, text) in mine.items() if status == FAIL}
        if failed:
            return FAIL, "\n".join(f"rank {r}:\n{text}" for r, text in sorted(failed.items()))
        stopped_at = self._first_unfinished(records)
        missing = [r for r in range(self.n) if r not in mine]
        if missing:
            if stopped_at is not None and stopped_at != case and case in self.order and \
                    self.order.index(stopped_at) < self.order.index(case):
                return FAIL, f"not run: the job ended in case {stopped_at!r}, before this one"
            how = "was killed at its timeout" if self.returncode is None else f"exited {self.returncode}"
            return FAIL, f"no record from ranks {missing}: the job {how} during this case" + self._tail()
        statuses = {status for status, _ in mine.values()}
        if statuses == {SKIP}:
            reasons = sorted({text for _, text in mine.values()})
            return SKIP, "; ".join(reasons)
        if statuses != {PASS}:
            return FAIL, f"ranks disagree whether the case applies: {sorted(mine.items())}"
        if stopped_at is None and (self.returncode != 0 or finished_ranks(self.stdout) != list(range(self.n))):
            return FAIL, (f"every rank passed every case, but the job did not end cleanly (exit status "
                          f"{self.returncode}, finished ranks {finished_ranks(self.stdout)})" + self._tail())
        return PASS, ""

    def expect(self, case: str) -> None:
        """Report ``case`` to pytest: return (passed), ``pytest.skip`` or ``pytest.fail``."""
        import pytest

        status, why = self.verdict(case)
        if status == SKIP:
            pytest.skip(why)
        if status == FAIL:
            pytest.fail(f"case {case!r} at {self.n} ranks: {why}", pytrace=False)


_LAUNCHES: Dict[tuple, Launch] = {}
#: The program :func:`launch_scripts` runs on every rank: :func:`run_scripts` over its arguments.
SCRIPTS_RUNNER = os.path.join(TESTS, "run_case_scripts.py")


#: A file to which every launch appends its wall time and its cases' (slowest rank's) seconds, one
#: JSON line per launch, when the suite runs with this variable set: where the suite's time goes.
CASE_TIMES = "TESTS_CASE_TIMES"


def _note_times(argv: Sequence[str], n: int, seconds: float, stdout: str) -> None:
    path = os.environ.get(CASE_TIMES)
    if not path:
        return
    cases: Dict[str, float] = {}
    for line in stdout.splitlines():
        if line.startswith(RECORD):
            try:
                item = json.loads(line[len(RECORD):])
            except ValueError:
                continue
            cases[item["case"]] = max(cases.get(item["case"], 0.0), float(item.get("seconds", 0.0)))
    with open(path, "a") as f:
        f.write(json.dumps({"argv": [os.path.basename(a) for a in argv[1:]], "n": n, "seconds": round(seconds, 2),
                            "cases": cases}) + "\n")


def _launch(key: tuple, n: int, argv: Sequence[str], order: List[str], env: Optional[Mapping[str, str]],
            timeout: float, mpi_options: Sequence[str] = (), alone: bool = False) -> Launch:
    if key not in _LAUNCHES:
        began = time.monotonic()
        try:
            if alone:
                proc = run_alone(list(argv), env=env, timeout=timeout, check=False)
            else:
                proc = run_ranks(n, list(argv), env=env, timeout=timeout, check=False, mpi_options=mpi_options)
            result = Launch(n, proc.stdout, proc.stderr, proc.returncode, order)
        except LaunchTimeout as e:
            result = Launch(n, e.stdout, e.stderr, None, order)
        _note_times(argv, n, time.monotonic() - began, result.stdout)
        _LAUNCHES[key] = result
    return _LAUNCHES[key]


def launch(n: int, script: str, args: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
           timeout: float = DEFAULT_TIMEOUT, cases: Sequence[str] = (), mpi_options: Sequence[str] = ()) -> Launch:
    """Run ``script`` (its ``cases``, or all) once on ``n`` ranks and remember the outcome: every
    test of one of its cases reads the same launch."""
    key = (n, script, tuple(args), tuple(sorted((env or {}).items())), tuple(cases), tuple(mpi_options))
    order = [name for name in case_names(script) if not cases or name in cases]   # as run_cases runs them
    return _launch(key, n, [sys.executable, script, *args, *cases], order, env, timeout, mpi_options)


def launch_alone(script: str, args: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Launch:
    """Run every case of ``script`` once in one plain process (no mpirun, one rank: rank 0 of 1)
    and remember the outcome, as :func:`launch` does."""
    key = ("alone", script, tuple(args), tuple(sorted((env or {}).items())))
    return _launch(key, 1, [sys.executable, script, *args], case_names(script), env, timeout, alone=True)


def scripts_order(specs: Sequence[str]) -> List[str]:
    """The cases a launch of ``specs`` runs, as :func:`run_scripts` names and orders them."""
    order = []
    for spec in specs:
        path, only = split_spec(spec)
        order += [f"{script_stem(path)}.{name}" for name in case_names(path) if not only or name in only]
    return order


def launch_scripts(n: int, specs: Sequence[str], env: Optional[Mapping[str, str]] = None,
                   timeout: float = DEFAULT_TIMEOUT) -> Launch:
    """Run several case scripts (``path`` or ``path:case,case``) in one job on ``n`` ranks, one
    process per rank for all of them, and remember the outcome; read case ``c`` of
    ``x_script.py`` as ``"x_script.c"``."""
    key = ("scripts", n, tuple(specs), tuple(sorted((env or {}).items())))
    return _launch(key, n, [sys.executable, SCRIPTS_RUNNER, *specs], scripts_order(specs), env, timeout, ())
