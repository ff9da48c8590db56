"""The session-wide two-host cluster (see cluster.py) for every test in this folder."""
from cluster import cluster  # noqa: F401  (a pytest fixture, found by name)
