"""The session-wide two-host cluster (blinkflow/bench/cluster.py) for every test in this folder,
and the tests' ``mpirun`` on it."""
import pytest

from blinkflow.bench.cluster import Cluster, ClusterUnavailable


class TestCluster(Cluster):
    """The cluster with the tests' ``mpirun`` (tests/mpi_launch.py flags)."""

    __test__ = False   # not a test class, whatever its name

    def mpirun(self, nprocs, argv, hosts="bfa:2,bfb:2", env=None, timeout=60):
        """The tests' ``mpirun`` started on ``bfa`` with ``-H hosts``."""
        from mpi_launch import mpirun_argv   # tests/ is on sys.path under pytest
        cmd = mpirun_argv(nprocs, [], env) + ["-H", hosts] + list(argv)
        return self.run_on(self.hosts[0], cmd, env=self.env(env), timeout=timeout)

    def require_partitions(self):
        """Skip the calling test where this kernel cannot filter packets."""
        try:
            super().require_partitions()
        except ClusterUnavailable as e:
            pytest.skip(str(e))


@pytest.fixture(scope="session")
def cluster():
    """The two-host cluster, built once per test session and removed at its end."""
    try:
        built = TestCluster().start()
    except ClusterUnavailable as e:
        pytest.skip(f"no two-host cluster: {e}")
    yield built
    built.stop()


@pytest.fixture(scope="module")
def three_hosts():
    """A three-host cluster (a bridge) for one test module, removed after it."""
    try:
        built = TestCluster(3).start()
    except ClusterUnavailable as e:
        pytest.skip(f"no three-host cluster: {e}")
    yield built
    built.stop()
