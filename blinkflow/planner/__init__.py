"""Pure planning: Topology in, Plan out (DESIGN §2). Imports no MPI, CuPy or TensorFlow."""
from .plan import COLLECTIVES, CrossGroup, Plan, Route, Tree, split_counts

__all__ = ["COLLECTIVES", "CrossGroup", "Plan", "Route", "Tree", "split_counts"]
