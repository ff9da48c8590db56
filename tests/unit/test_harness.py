"""The multi-process test harness itself (tests/harness.py), without MPI: a case that returns
early fails, a case that does not apply is skipped with its reason, ranks that disagree fail,
a job that dies reports every case it did not reach, and the one float rule."""
import ast
import contextlib
import io
import os
import pathlib

import numpy as np
import pytest

import harness

TESTS = pathlib.Path(harness.__file__).resolve().parent


def run_in_process(namespace, size=2):
    """Every rank's output of ``run_cases`` over ``namespace``, as one job's stdout."""
    out = io.StringIO()
    stops = []
    with contextlib.redirect_stdout(out):
        for rank in range(size):
            harness.run_cases(namespace, rank, size, stop=lambda: stops.append(True))
    return out.getvalue(), stops


def job(namespace, size=2, returncode=0):
    stdout, _ = run_in_process(namespace, size)
    return harness.Launch(size, stdout, "", returncode, [name for name, _ in harness.case_functions(namespace)])


def case_returns_early(r, n):
    if n == 2:
        return
    assert False, "never reached at 2 ranks"


def case_does_not_apply(r, n):
    if n == 2:
        harness.skip("needs three ranks")


def case_passes(r, n):
    assert n == 2


def case_skips_on_one_rank_only(r, n):
    if r == 1:
        harness.skip("rank 1 thinks it does not apply")


def case_fails_on_rank_1(r, n):
    assert r != 1, "rank 1 is wrong"


def case_after_the_failure(r, n):
    pass


def test_a_case_that_returns_early_fails_with_the_line():
    launch = job({"case_returns_early": case_returns_early})
    status, why = launch.verdict("returns_early")
    assert status == harness.FAIL and "returns early" in why and "skip(reason)" in why, why


def test_a_case_that_does_not_apply_is_skipped_with_its_reason():
    launch = job({"case_does_not_apply": case_does_not_apply, "case_passes": case_passes})
    assert launch.verdict("does_not_apply") == (harness.SKIP, "needs three ranks")
    assert launch.verdict("passes") == (harness.PASS, "")
    with pytest.raises(pytest.skip.Exception, match="needs three ranks"):
        launch.expect("does_not_apply")


def test_ranks_that_disagree_whether_a_case_applies_fail():
    status, why = job({"case_skips_on_one_rank_only": case_skips_on_one_rank_only}).verdict("skips_on_one_rank_only")
    assert status == harness.FAIL and "disagree" in why


def test_a_failure_names_the_rank_and_the_cases_it_kept_from_running():
    namespace = {"case_passes": case_passes, "case_fails_on_rank_1": case_fails_on_rank_1,
                 "case_after_the_failure": case_after_the_failure}
    stdout, stops = run_in_process(namespace)
    assert stops == [True]   # the failing rank stopped the job
    # What the job printed before rank 1 took it down: rank 1 never reached the last case.
    cut = stdout[:stdout.index('"case": "after_the_failure", "rank": 1')]
    cut = cut[:cut.rindex("\n")]
    launch = harness.Launch(2, cut, "", 1, ["passes", "fails_on_rank_1", "after_the_failure"])
    assert launch.verdict("passes")[0] == harness.PASS
    status, why = launch.verdict("fails_on_rank_1")
    assert status == harness.FAIL and "rank 1:" in why and "rank 1 is wrong" in why
    status, why = launch.verdict("after_the_failure")
    assert status == harness.FAIL and "ended in case 'fails_on_rank_1', before this one" in why
    with pytest.raises(pytest.fail.Exception):
        launch.expect("fails_on_rank_1")


def test_every_case_passing_is_not_enough_when_the_job_did_not_end_cleanly():
    launch = job({"case_passes": case_passes}, returncode=1)
    status, why = launch.verdict("passes")
    assert status == harness.FAIL and "did not end cleanly" in why
    killed = harness.Launch(2, "", "", None, ["passes"])
    assert killed.verdict("passes")[0] == harness.FAIL and "killed at its timeout" in killed.verdict("passes")[1]


def test_a_job_that_dies_inside_a_case_blames_that_case_alone():
    """A rank that dies without a record (a crash, a watchdog): the cases every rank finished
    before it pass, the case it died in fails with the job's output, the later ones did not run."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):   # rank 0 died in the second case, rank 1 finished it
        for rank, case in ((0, "passes"), (1, "passes"), (1, "after_the_failure")):
            harness.record(case, rank, harness.PASS)
    launch = harness.Launch(2, out.getvalue(), "Timeout (0:01:30)!", 1, ["passes", "after_the_failure", "never_reached"])
    assert launch.verdict("passes") == (harness.PASS, "")
    status, why = launch.verdict("after_the_failure")
    assert status == harness.FAIL and "during this case" in why and "Timeout (0:01:30)!" in why
    assert "ended in case 'after_the_failure'" in launch.verdict("never_reached")[1]


def _case_scripts():
    return sorted(p for p in TESTS.rglob("*.py") if "run_cases(" in p.read_text() and p.name != "harness.py"
                  and p.parent.name != "unit")


def test_no_case_script_returns_early_from_a_case():
    """Every case of every case script reports a case that does not apply with skip(reason)."""
    scripts = _case_scripts()
    assert len(scripts) >= 4, scripts
    early = []
    for path in scripts:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("case_"):
                todo = list(node.body)
                while todo:
                    item = todo.pop()
                    if isinstance(item, ast.Return):
                        early.append(f"{path.relative_to(TESTS)}:{item.lineno} {node.name}")
                    elif not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                        todo.extend(ast.iter_child_nodes(item))
    assert not early, f"cases that return early instead of calling skip(reason): {early}"


def test_case_names_are_read_in_order_without_importing():
    names = harness.case_names(str(TESTS / "mpi" / "runtime_script.py"))
    assert names[0] == "basics" and "restart" in names and len(names) == len(set(names))


def test_the_launch_is_the_launchers_mpirun_argv_with_the_command_itself():
    argv = harness.mpirun_command(3, ["python-here", "script.py"], {"BLINKFLOW_X": "1"}, ["--enable-recovery"])
    assert argv[1:3] == ["-np", "3"] and argv[-3:] == ["--enable-recovery", "python-here", "script.py"]
    assert "BLINKFLOW_X=1" in argv and "rank_exec" not in " ".join(argv)


def test_close_allows_the_rounding_of_a_sum_and_nothing_more():
    inputs = [np.float32(0.1), np.float32(0.2), np.float32(0.3)]
    got = np.float32(inputs[0] + inputs[1] + inputs[2])
    want = np.float64(inputs[0]) + np.float64(inputs[1]) + np.float64(inputs[2])
    harness.close(got, want, magnitude=sum(abs(float(x)) for x in inputs), ranks=3)
    eps_bound = np.finfo(np.float32).eps * 4 * 0.6
    with pytest.raises(AssertionError, match="element"):
        harness.close(np.float32(want + 2 * eps_bound), want, magnitude=0.6, ranks=3)
    with pytest.raises(AssertionError):
        harness.close(np.float32(0.1) + np.float32(1e-7), np.float32(0.1))   # magnitude 0: exact
    with pytest.raises(AssertionError, match="shape"):
        harness.close(np.zeros(2), np.zeros(3))
    harness.close(np.array([1, 2], np.int32), np.array([1, 2], np.int64))
    half = np.full(3, 1.5, np.float16)
    harness.close(half + np.float16(0.0009765625), np.full(3, 1.5), magnitude=1.5, ranks=1)


def test_one_process_runs_several_scripts_and_names_each_case_by_its_script(tmp_path):
    first, second = tmp_path / "first_script.py", tmp_path / "second_script.py"
    first.write_text("import harness\nSEEN = []\n\ndef case_a(r, n):\n    SEEN.append('a')\n\n"
                     "def case_b(r, n):\n    harness.skip('not here')\n")
    second.write_text("import first_script\n\ndef case_a(r, n):\n    assert first_script.SEEN == ['a']\n\n"
                      "def case_c(r, n):\n    pass\n")
    specs = [str(first), f"{second}:c,a"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        harness.run_scripts(specs, 0, 1, stop=lambda: None)
    order = harness.scripts_order(specs)
    assert order == ["first_script.a", "first_script.b", "second_script.a", "second_script.c"]
    launch = harness.Launch(1, out.getvalue(), "", 0, order)
    assert launch.verdict("first_script.a") == (harness.PASS, "")
    assert launch.verdict("first_script.b") == (harness.SKIP, "not here")
    assert launch.verdict("second_script.a") == (harness.PASS, "")   # the scripts share one process
    assert launch.verdict("second_script.c") == (harness.PASS, "")


def test_a_script_that_fails_to_import_fails_its_first_case_and_the_later_ones_did_not_run(tmp_path):
    broken, after = tmp_path / "broken_script.py", tmp_path / "after_script.py"
    broken.write_text("raise RuntimeError('no such device')\n\ndef case_x(r, n):\n    pass\n")
    after.write_text("def case_y(r, n):\n    pass\n")
    specs = [str(broken), str(after)]
    out, stops = io.StringIO(), []
    with contextlib.redirect_stdout(out):
        harness.run_scripts(specs, 0, 1, stop=lambda: stops.append(True))
    assert stops == [True]
    cut = out.getvalue()[:out.getvalue().index('"case": "after_script.y"')]   # the job ended at the stop
    launch = harness.Launch(1, cut[:cut.rindex("\n")], "", 1, harness.scripts_order(specs))
    status, why = launch.verdict("broken_script.x")
    assert status == harness.FAIL and "no such device" in why
    assert "ended in case 'broken_script.x'" in launch.verdict("after_script.y")[1]


def test_a_rank_knows_its_place_from_the_launcher_before_mpi_starts(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "3")
    assert harness.job_rank_size() == (2, 3)


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by basename (tests/ has no packages): two of one name anywhere
    under tests/ stop the whole suite's collection."""
    seen = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_the_tests_of_one_launch_run_on_one_worker(tmp_path):
    """Under ``-n 2 --dist loadgroup`` the tests of one group (one launch) all run on one worker,
    through this suite's conftest: pytest-xdist's own grouping needs a test id it can no longer
    set under pytest 9, and both workers then ran every launch."""
    import shutil
    import subprocess
    import sys

    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_groups.py").write_text(
        "import os, time\nimport pytest\n\n"
        "@pytest.mark.parametrize('config', [1, 2])\n@pytest.mark.parametrize('case', range(4))\n"
        "def test_case(config, case):\n    time.sleep(0.2)\n"
        "    with open(f'ran-{config}-{case}', 'w') as f:\n        f.write(os.environ['PYTEST_XDIST_WORKER'])\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TESTS_XDIST_GROUPS", "BLINKFLOW_CHECK_CACHE")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                          "--dist", "loadgroup", str(tmp_path / "test_groups.py")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240).stdout
    workers = {}
    for ran in tmp_path.glob("ran-*"):
        workers.setdefault(ran.name.split("-")[1], set()).add(ran.read_text())
    assert sorted(workers) == ["1", "2"] and all(len(w) == 1 for w in workers.values()), (workers, out[-2000:])


def test_what_a_process_says_reaches_the_result_even_when_its_output_cannot(tmp_path):
    """``say`` keeps a line in the job's own record before printing it: a process whose output
    is closed (as Open MPI closes a rank's once most ranks left with a failure status) and that
    leaves with status 1 still has its lines in ``said``, in order."""
    script = tmp_path / "says.py"
    script.write_text("import os, sys\nfrom harness import say\nsay('first')\nsay('second')\n"
                      "os.close(1)\ntry:\n    say('third')\nexcept OSError:\n    os._exit(1)\n")
    result = harness.run_alone(["python", str(script)], check=False)
    assert result.returncode == 1, result.stderr
    assert result.said == "first\nsecond\nthird\n"
    assert result.stdout == "first\nsecond\n"


#: Programs of the suite that are not scripts of a test's ranks: the harness's own entry on every
#: rank, the Horovod port's wrapper (it runs a Horovod script, which is the rank script), the
#: compatibility run's driver, and the TensorFlow jobs' table.
NOT_RANK_SCRIPTS = {"harness.py", "run_case_scripts.py", "horovod_compat/run.py", "tf/horovod_port.py",
                    "tf/tf_jobs.py"}


def test_every_rank_script_ends_in_script_py():
    """One suffix for the scripts a test runs on its ranks: a file of the suite that defines cases
    or runs as a program is ``*_script.py`` (or one of the few programs named above)."""
    misnamed = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py") or "fake_cupy" in rel:
            continue
        tree = ast.parse(path.read_text())
        cases = any(isinstance(n, ast.FunctionDef) and n.name.startswith("case_") for n in tree.body)
        program = any(isinstance(n, ast.If) and "__main__" in ast.dump(n.test) for n in tree.body)
        if (cases or program) and not rel.endswith("_script.py") and rel not in NOT_RANK_SCRIPTS:
            misnamed.append(rel)
    assert not misnamed, f"name these *_script.py (the suite's one suffix for rank scripts): {misnamed}"
    assert any(TESTS.rglob("*_script.py")) and all((TESTS / p).is_file() for p in NOT_RANK_SCRIPTS)
