"""``python -m blinkflow.bench overlap-timeline``: a picture of one training step, showing the
gradient buckets' all-reduces against the forward pass and backprop that they overlap.

Runs the synthetic benchmark's step (:mod:`.tf_step`) through blinkrun with the runtime's
timeline on (``--timeline-filename``, Chrome-trace JSON: every bucket's QUEUED / NEGOTIATE /
ALLREDUCE phases) and the step's own marks (when forward, backprop and the update began,
recorded inside the traced step), then draws one step of every rank with matplotlib. Backprop ends where the
last bucket (the first layers' gradients) is submitted. Also prints, per rank, how much of
the all-reduce time fell inside backprop.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import click

Span = Tuple[str, str, int, int]  # (track, phase, begin us, end us)


def load_trace(path: str) -> List[Span]:
    """Begin/end pairs of a timeline file (a killed job's file may lack its closing bracket)."""
    text = open(path).read().rstrip()
    events = json.loads(text if text.endswith("]") else text.rstrip(",") + "]")
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    open_spans: Dict[Tuple[int, str], List[int]] = {}
    spans = []
    for e in events:
        key = (e.get("tid"), e.get("name"))
        if e.get("ph") == "B":
            open_spans.setdefault(key, []).append(e["ts"])
        elif e.get("ph") == "E" and open_spans.get(key):
            spans.append((tracks[e["tid"]], e["name"], open_spans[key].pop(), e["ts"]))
    return sorted(spans, key=lambda s: s[2])


def one_step(spans: List[Span], marks: List[Tuple[str, int]], step: int):
    """(forward begin, backprop begin, update begin, next forward begin, this step's bucket
    spans) of ``step``."""
    forwards = sorted(t for what, t in marks if what == "forward")
    begin, end = forwards[step], forwards[step + 1]
    backprop, update = (next(t for what, t in sorted(marks, key=lambda m: m[1]) if what == kind and begin <= t < end)
                        for kind in ("backprop", "update"))
    buckets = [s for s in spans if ".bucket." in s[0] and begin <= s[2] < end]
    return begin, backprop, update, end, buckets


def overlap_of(backprop: int, buckets: List[Span]) -> Tuple[int, int, int]:
    """(backprop end, all-reduce microseconds, of which inside backprop)."""
    submitted = [b for _, phase, b, _ in buckets if phase == "QUEUED"]
    backprop_end = max(submitted) if submitted else backprop
    total = inside = 0
    for _, phase, b, e in buckets:
        if phase == "ALLREDUCE":
            total += e - b
            inside += max(0, min(e, backprop_end) - max(b, backprop))
    return backprop_end, total, inside


def draw(steps: Dict[int, tuple], out: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = min(s[0] for s in steps.values())
    rows, labels = [], []
    for rank, (begin, backprop, update, end, buckets) in sorted(steps.items()):
        backprop_end, _, _ = overlap_of(backprop, buckets)
        rows.append([(begin, backprop, "#b0b0b0", "forward"), (backprop, backprop_end, "#4a7fc1", "backprop"),
                     (backprop_end, update, "#ffffff", "wait"), (update, end, "#8fbf8f", "update")])
        labels.append(f"rank {rank}: TensorFlow")
        for track in sorted({s[0] for s in buckets}, key=lambda t: int(t.rsplit(".", 1)[1])):
            bars = [(b, e, "#f5c16c" if phase == "NEGOTIATE" else "#d9534f", phase)
                    for name, phase, b, e in buckets if name == track and phase in ("NEGOTIATE", "ALLREDUCE")]
            rows.append(bars)
            labels.append(f"rank {rank}: {track.rsplit('.', 2)[-2]}.{track.rsplit('.', 1)[1]}")
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.8))
    for y, bars in enumerate(rows):
        for b, e, color, _ in bars:
            ax.barh(y, (e - b) / 1000, left=(b - origin) / 1000, color=color, edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds from the step's start")
    ax.set_title(title, fontsize=10)
    from matplotlib.patches import Patch

    legend = [("#b0b0b0", "forward"), ("#4a7fc1", "backprop"), ("#ffffff", "wait"), ("#8fbf8f", "update"),
              ("#f5c16c", "negotiate (waiting for the peers' submissions)"), ("#d9534f", "all-reduce")]
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", linewidth=0.3, label=t) for c, t in legend],
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=6, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


@click.command(help=__doc__.split("\n\n")[0])
@click.option("--out", default="overlap-step.png", show_default=True, help="PNG to write")
@click.option("--np", "np_", default=2, show_default=True, type=click.IntRange(2))
@click.option("--img-size", default=64, show_default=True, type=int)
@click.option("--batch-size", default=16, show_default=True, type=int)
@click.option("--step", default=10, show_default=True, type=int, help="which step of the run to draw (0: the first)")
@click.option("--keep", help="directory to keep the timeline and marks in")
def command(out, np_, img_size, batch_size, step, keep) -> None:
    work = keep or tempfile.mkdtemp(prefix="blinkflow-overlap-")
    os.makedirs(work, exist_ok=True)
    trace, marks = os.path.join(work, "timeline.json"), os.path.join(work, "marks")
    beside = os.path.join(os.path.dirname(sys.executable), "blinkrun")
    blinkrun = beside if os.path.exists(beside) else shutil.which("blinkrun")
    cmd = [blinkrun, "-np", str(np_), "--timeline-filename", trace, sys.executable, "-m", "blinkflow.bench.tf_step",
           "--side", "blinkflow", "--marks", marks, "--img-size", str(img_size), "--batch-size", str(batch_size),
           "--num-iters", "3"]
    proc = subprocess.run(cmd, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise click.ClickException(f"the job failed (status {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    steps = {}
    for rank in range(np_):
        path = trace if rank == 0 else trace.replace(".json", f".rank{rank}.json")
        with open(f"{marks}.rank{rank}.json") as f:
            rank_marks = [tuple(m) for m in json.load(f)]
        begin, backprop, update, end, buckets = steps[rank] = one_step(load_trace(path), rank_marks, step)
        backprop_end, total, inside = overlap_of(backprop, buckets)
        click.echo(f"rank {rank}: step {(end - begin) / 1000:.1f} ms: forward {(backprop - begin) / 1000:.1f}, "
                   f"backprop {(backprop_end - backprop) / 1000:.1f}, wait {(update - backprop_end) / 1000:.1f}, "
                   f"update {(end - update) / 1000:.1f}; all-reduce {total / 1000:.1f} ms, of which "
                   f"{inside / 1000:.1f} ms ({100 * inside / max(total, 1):.0f} %) inside backprop")
    bucket_bytes = os.environ.get("BLINKFLOW_BUCKET_BYTES", "default")
    draw(steps, out, f"MobileNetV2 {img_size}x{img_size}, batch {batch_size} per rank, {np_} ranks, "
                     f"BLINKFLOW_BUCKET_BYTES={bucket_bytes}: step {step} of the run")
    click.echo(f"wrote {out}" + (f"; timeline and marks in {work}" if keep else ""))
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
