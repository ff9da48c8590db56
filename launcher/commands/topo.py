"""``blinkrun topo``: show a topology — this machine's, a preset's or a file's (docs/topology.md).

    blinkrun topo                               # probe this machine (honours CUDA_VISIBLE_DEVICES);
                                                # without GPUs, its CPU ranks (one per core)
    blinkrun topo --preset dgx1-v100 --gpus 0,1,4
    blinkrun topo --nvidia-smi-file topo.txt    # saved `nvidia-smi topo -m` output
    blinkrun topo --nccl-xml dump.xml           # NCCL_TOPO_DUMP_FILE output
    blinkrun topo --file topo.json --json       # blinkflow's JSON, printed back as JSON
    blinkrun topo --probe -H a,b,c              # measure the network between hosts (a job of one
                                                # rank per host; what jobs on 3+ hosts plan with)

Bad input exits 2 with one line naming the file, line or field (launcher/one_line.py).
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import List, Optional

import click

from blinkflow.errors import TopologyError
from blinkflow.topology import Topology, get_preset, load_any, load_nccl_xml, load_nvidia_smi, preset_names
from blinkflow.topology.probe import probe_host_topology, visible_gpus
from blinkflow.topology.table import format_table

from ..one_line import OneLineErrorCommand

SOURCES = ("preset", "nvidia_smi_file", "nccl_xml", "file")


@click.command(cls=OneLineErrorCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--preset", metavar="NAME", help=f"A preset: {', '.join(preset_names())} (cpu-host:N; Nx<preset> for N hosts).")
@click.option("--nvidia-smi-file", metavar="FILE", help="A file holding `nvidia-smi topo -m` output.")
@click.option("--nccl-xml", metavar="FILE", help="An NCCL topology dump (NCCL_TOPO_DUMP_FILE).")
@click.option("--file", "file_", metavar="FILE", help="A topology file of any format (JSON, NCCL XML, nvidia-smi text).")
@click.option("--gpus", metavar="LIST", help="Keep only these devices, e.g. 0,1,4.")
@click.option("--json", "as_json", is_flag=True, help="Print the topology as JSON (the schema of `topo --json`).")
@click.option("--probe", is_flag=True, help="Measure each pair of the hosts of -H (one rank per host, launched "
                                           "like `blinkrun -H`) and print the rates jobs on them plan with.")
@click.option("-H", "--hosts", "probe_hosts", metavar="HOSTS", help="With --probe: the hosts, e.g. a,b,c or a:4,b:4 "
                                                                     "(slots are ignored: one rank per host).")
def command(preset, nvidia_smi_file, nccl_xml, file_, gpus, as_json, probe, probe_hosts):
    """Show the interconnect of a machine as a device x device table, or as JSON."""
    if probe or probe_hosts:
        launch_probe(probe, probe_hosts, given=any((preset, nvidia_smi_file, nccl_xml, file_, gpus, as_json)))
        return
    devices = parse_gpus(gpus)
    topology = load_source(preset, nvidia_smi_file, nccl_xml, file_)
    if devices is not None:
        topology = topology.subset(devices, where="--gpus")
    click.echo(json.dumps(topology.to_dict(), indent=2) if as_json else format_table(topology))


def launch_probe(probe: bool, hosts_text: Optional[str], given: bool) -> None:
    """``--probe -H``: launch ``blinkflow.runtime.link_probe`` with one rank per host through
    blinkrun's own launch path, which prints the measured table on rank 0."""
    import sys

    from ..cli import main
    from ..job.hosts import hosts_arg, parse_hosts_arg

    if not probe:
        raise click.UsageError("-H names the hosts of --probe; add --probe (blinkrun topo --probe -H a,b,c)")
    if given:
        raise click.UsageError("--probe measures the network between hosts; it takes only -H")
    if not hosts_text:
        raise click.UsageError("--probe needs the hosts to measure: blinkrun topo --probe -H a,b,c")
    hosts = [dataclasses.replace(h, slots=1) for h in parse_hosts_arg(hosts_text)]
    if len(hosts) < 2:
        raise click.UsageError(f"-H {hosts_text!r} names one host; the probe measures pairs of hosts")
    main(["-np", str(len(hosts)), "-H", hosts_arg(hosts), sys.executable, "-m", "blinkflow.runtime.link_probe"])


def load_source(preset: Optional[str], nvidia_smi_file: Optional[str], nccl_xml: Optional[str],
                file_: Optional[str]) -> Topology:
    given = [(name, value) for name, value in zip(SOURCES, (preset, nvidia_smi_file, nccl_xml, file_)) if value]
    if len(given) > 1:
        names = " and ".join("--" + name.replace("_", "-") for name, _ in given)
        raise click.UsageError(f"{names} both name a topology; give at most one")
    if preset:
        return get_preset(preset)
    if nvidia_smi_file:
        return load_nvidia_smi(nvidia_smi_file)
    if nccl_xml:
        return load_nccl_xml(nccl_xml)
    if file_:
        return load_any(file_)
    return probe_this_machine()


def probe_this_machine() -> Topology:
    """The GPUs of this machine, cut down to CUDA_VISIBLE_DEVICES when it is set; on a machine
    without GPUs, the CPU ranks blinkflow would run there (the cpu backend), one per core as
    Open MPI places them by default, with a note on stderr saying so."""
    topology = probe_host_topology()
    if topology is None:
        from .run import local_cores
        cores = local_cores()
        click.echo(f"blinkrun topo: no NVIDIA GPU found (no NVML, no nvidia-smi); this machine runs blinkflow on "
                   f"its CPUs: {cores} rank(s), one per core, sharing memory (preset cpu-host:{cores})", err=True)
        return get_preset(f"cpu-host:{cores}")
    visible = visible_gpus()
    if visible is not None:
        if not visible:
            raise TopologyError("CUDA_VISIBLE_DEVICES hides every GPU", "this machine")
        topology = topology.subset(visible, where="CUDA_VISIBLE_DEVICES")
    return topology


def parse_gpus(text: Optional[str]) -> Optional[List[int]]:
    """``--gpus`` of ``topo`` and ``plan``: comma-separated device indexes, spaces allowed.

    Only ASCII digits count (``str.isdigit`` takes ``²``, ``int`` takes ``1_0`` and ``-1``).
    Repeats and unknown devices are left to :meth:`Topology.subset`, which names them.
    """
    if text is None:
        return None
    out = []
    for token in text.split(","):
        token = token.strip()
        if not re.fullmatch(r"[0-9]+", token):
            raise click.UsageError(f"--gpus {text!r}: {token!r} is not a device index; write e.g. --gpus 0,1,4")
        out.append(int(token))
    return out
