"""The hardware graph: model, presets, parsers, JSON, and reading this machine.

Imports only the standard library, numpy and networkx — never MPI, CuPy or TensorFlow. The
protocol that probes every rank of a job and merges the answers is the runtime's
(``blinkflow.runtime.discovery``); here are its pure halves (``probe``, ``merge``).

Modules, one job each:

``model``            the hardware graph: devices, switches, NICs and directed links
``presets``          topologies of well-known machines, each with its figures' source
``io``               blinkflow's own topology JSON, with a schema version
``nvidia_smi``       parses ``nvidia-smi topo -m`` text (parsing only)
``nccl_xml``         parses NCCL's topology dump
``resolve``          one entry point for every way a user names a topology
``table``            a device × device table of a Topology, like ``nvidia-smi topo -m``
``probe``            reading this machine's GPUs (NVML, else ``nvidia-smi``)
``merge``            rank 0's half of discovery: every rank's probe in, the job's topology out
``visible_devices``  which GPU each local rank drives, by PCI bus id and uuid
``measured_links``   host pairs' measured rates agreed, and the mesh of NIC links they describe
"""
from .io import load_topology, save_topology, topology_from_dict
from .model import COMPUTE_KINDS, LINK_KINDS, NODE_KINDS, Link, Node, Topology, bidirectional
from .nccl_xml import load_nccl_xml, topology_from_nccl_xml
from .nvidia_smi import load_nvidia_smi, topology_from_nvidia_smi
from .presets import get_preset, preset_names
from .resolve import load_any, resolve_topology

__all__ = [
    "COMPUTE_KINDS", "LINK_KINDS", "NODE_KINDS", "Link", "Node", "Topology", "bidirectional",
    "load_topology", "save_topology", "topology_from_dict",
    "load_nccl_xml", "topology_from_nccl_xml", "load_nvidia_smi", "topology_from_nvidia_smi",
    "get_preset", "preset_names", "load_any", "resolve_topology",
]
