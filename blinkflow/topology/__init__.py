"""The hardware graph: model, presets, parsers, JSON, live discovery (DESIGN §2).

Imports only the standard library, numpy and networkx — never MPI, CuPy or TensorFlow.
"""
from .io import load_topology, save_topology, topology_from_dict
from .model import COMPUTE_KINDS, LINK_KINDS, NODE_KINDS, Link, Node, Topology, bidirectional

__all__ = [
    "COMPUTE_KINDS", "LINK_KINDS", "NODE_KINDS", "Link", "Node", "Topology", "bidirectional",
    "load_topology", "save_topology", "topology_from_dict",
]
