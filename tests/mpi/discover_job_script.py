"""Run by test_discover_mpi.py on every rank: discover the job, print what this rank sees."""
import json

from mpi4py import MPI

from blinkflow.config import Config
from blinkflow.errors import TopologyError
from blinkflow.runtime.discovery import discover_job

comm = MPI.COMM_WORLD
try:
    job = discover_job(comm, Config.from_env())
except TopologyError as e:
    print(json.dumps({"rank": comm.rank, "error": str(e)}), flush=True)
else:
    print(json.dumps({"rank": comm.rank, "devices": job.devices, "hosts": job.hosts,
                      "digest": job.topology.digest(), "compute": job.topology.compute_ids,
                      "topo_hosts": job.topology.hosts, "processor": MPI.Get_processor_name()}), flush=True)
