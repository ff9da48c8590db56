"""Shared test fixtures. Tests import the installed package (``make test`` installs it)."""
import json
import os
import pathlib
import shutil
import tempfile

import pytest

# Every new call shape of every test (and of the ranks it launches) is proven before it runs,
# once per session: the launches prove the same schedules again and again, so they share their
# proofs in one folder (blinkflow/schedule/proofs.py), made by the first process that loads this
# file (pytest-xdist's workers inherit it from the controller) and removed by it at the end.
os.environ.setdefault("BLINKFLOW_CHECK_SCHEDULES", "1")
_OWN_PROOFS = "BLINKFLOW_CHECK_CACHE" not in os.environ
if _OWN_PROOFS:
    os.environ["BLINKFLOW_CHECK_CACHE"] = tempfile.mkdtemp(prefix="blinkflow-proofs-")


# The suite runs several jobs at once (up to 8 ranks on a 2-core machine) while each job alone
# fits its slots, so Open MPI does not know the machine is oversubscribed, and its blocking calls
# spin at full speed, taking the CPU the other jobs' ranks need: an elastic soak took twice the
# CPU and wall time beside other jobs. Waiting ranks yield the CPU instead, as Open MPI makes them
# do itself in a job it knows is oversubscribed. (Inherited by every launch, as are the above.)
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")

# For the same reason, TensorFlow's thread pools: by default every rank that imports TensorFlow
# starts one intra-op thread per core, whose idle threads spin before they sleep, beside the
# other jobs' ranks. One intra-op thread per rank (scripts that set their own still do) cut a
# 2-rank Horovod benchmark's system time from 6 to 2 CPU-seconds.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")

# And NumPy's OpenBLAS, which starts a thread per core when NumPy is imported, in every one of the
# suite's thousand-odd processes, though no test leans on its BLAS: one thread cut a 2-rank
# launch of init and one all-reduce from 0.96 to 0.83 CPU-seconds (ten launches each way).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# The session's groups of tests (below): a file the first worker writes and the scheduler reads.
_OWN_GROUPS = "TESTS_XDIST_GROUPS" not in os.environ
if _OWN_GROUPS:
    os.environ["TESTS_XDIST_GROUPS"] = os.path.join(tempfile.mkdtemp(prefix="blinkflow-groups-"), "groups.json")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        if _OWN_PROOFS:
            shutil.rmtree(os.environ["BLINKFLOW_CHECK_CACHE"], ignore_errors=True)
        if _OWN_GROUPS:
            shutil.rmtree(os.path.dirname(os.environ["TESTS_XDIST_GROUPS"]), ignore_errors=True)


FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixtures_dir():
    return FIXTURES


#: The folders whose tests run first, in this order: they hold the longest groups (the two-host
#: tests share one cluster and run one after another, 1.5 minutes before the partition, pause and
#: fixed-size cut jobs, which add about 4.5 minutes on a loaded machine; the elastic soak about 1),
#: and pytest-xdist hands out groups in collection order, so started last they
#: would leave one worker running them alone at the end. The unit tests, many and short, come last
#: and fill the end.
FIRST_FOLDERS = ("multihost", "elastic", "tf", "mpi")


def _folder_order(item) -> int:
    folder = item.path.parent.name
    if folder in FIRST_FOLDERS:
        return FIRST_FOLDERS.index(folder)
    return len(FIRST_FOLDERS) + (folder == "unit")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The longest groups first (:data:`FIRST_FOLDERS`), and the groups. Tests parametrized by
    ``case`` read one launch per set of their other parameters (tests/harness.py runs it once
    per process): under pytest-xdist's ``--dist loadgroup`` those tests form one group, so the
    launch runs once, on one worker. A test may name its group itself (``@pytest.mark.xdist_group``) when several test functions share a launch. The
    two-host tests share one session-wide cluster of network namespaces, which several workers would
    each build under the same names: they form one group too."""
    items.sort(key=_folder_order)   # stable: within a folder, the order pytest found them in
    for item in items:
        if item.path.parent.name == "multihost" and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("multihost"))
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is None or "case" not in callspec.params or item.get_closest_marker("xdist_group"):
            continue
        others = {k: v for k, v in callspec.params.items() if k != "case"}
        item.add_marker(pytest.mark.xdist_group(launch_group(item.module.__name__, item.originalname, others)))


def launch_group(module: str, function: str, params) -> str:
    """The xdist group of the tests of one launch: one name per set of parameters. pytest-xdist
    reads a test's group from its id's text after the last ``@`` only when no ``]`` follows it,
    and otherwise schedules the test alone (each worker then runs the launch itself): the name
    holds neither."""
    text = ",".join(f"{k}={params[k]}" for k in sorted(params))
    return f"{module}.{function}:" + text.translate(str.maketrans("[]@", "()_"))


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's worker reports its collection
def pytest_collection_finish(session):
    """The first worker writes every grouped test's group, by test id, for the scheduler."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is None or workerinput.get("workerid") != "gw0":
        return
    groups = {}
    for item in session.items:
        names = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
        if names:
            groups[item.nodeid] = "_".join(names)
    path = os.environ["TESTS_XDIST_GROUPS"]
    with open(path + ".tmp", "w") as f:
        json.dump(groups, f)
    os.replace(path + ".tmp", path)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` that groups by the groups the workers recorded. pytest-xdist finds a
    test's group in a suffix it appends to the test's id, which pytest 9 no longer lets it set
    (ids are derived): every test then ran alone, and both workers ran the launch of most
    case scripts."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class RecordedGroupScheduling(LoadScopeScheduling):
        _groups = None

        def _split_scope(self, nodeid):
            if self._groups is None:
                self._groups = _recorded_groups(os.environ["TESTS_XDIST_GROUPS"])
            if nodeid in self._groups:
                return "group:" + self._groups[nodeid]
            if nodeid.rfind("@") > nodeid.rfind("]"):   # a pytest-xdist that can set the suffix
                return nodeid.split("@")[-1]
            return nodeid

    return RecordedGroupScheduling(config, log)


def _recorded_groups(path, wait_s=60.0):
    """The groups the first worker wrote (it writes them before it reports its collection, so
    they are there; a moment's wait covers a slow file system). None found: no groups."""
    import time

    deadline = time.monotonic() + wait_s
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return {}


#: A file to which every test appends its wall and CPU seconds (its own process and every child it
#: waited for: the ranks of its launches), when it began (the epoch's seconds) and on which worker,
#: one JSON line per test, when the suite runs with this variable set: which tests wait and which
#: compute (the suite's workers share two cores), and when a worker was left alone.
CPU_TIMES = "TESTS_CPU_TIMES"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get(CPU_TIMES)
    if not path:
        yield
        return
    import resource
    import time

    def cpu():
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))
    began, used, start = time.monotonic(), cpu(), time.time()
    yield
    with open(path, "a") as f:
        f.write(json.dumps({"test": item.nodeid, "wall": round(time.monotonic() - began, 2),
                            "cpu": round(cpu() - used, 2), "start": round(start, 2),
                            "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}) + "\n")

