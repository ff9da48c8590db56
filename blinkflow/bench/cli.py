"""The benchmark command line. Each suite lives in its own module and registers a click command."""
from __future__ import annotations

import importlib

import click

# suite name -> module defining a click command called ``command``
SUITES = {
    "planner": "blinkflow.bench.planner",
    "paper": "blinkflow.bench.paper",
    "allreduce": "blinkflow.bench.allreduce",
    "separate": "blinkflow.bench.separate",
    "latency": "blinkflow.bench.latency",
    "cross-host": "blinkflow.bench.cross_host",
    "gpu": "blinkflow.bench.gpu",
    "runner-actions": "blinkflow.bench.runner_actions",
    "tf-peers": "blinkflow.bench.tf_peers",
    "overlap-timeline": "blinkflow.bench.overlap_timeline",
    "scale": "blinkflow.bench.scale",
    "control": "blinkflow.bench.control",
    "autotune": "blinkflow.bench.autotune",
    "elastic-loss": "blinkflow.bench.elastic_loss",
    "elastic-gain": "blinkflow.bench.elastic_gain",
}


class _LazySuites(click.Group):
    def list_commands(self, ctx):
        return sorted(SUITES)

    def get_command(self, ctx, name):
        module = SUITES.get(name)
        if module is None:
            return None
        return importlib.import_module(module).command


@click.group(cls=_LazySuites, help="blinkflow benchmarks; every suite measures its peers in the same run.")
def main():
    pass
