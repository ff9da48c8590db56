"""Which rank blinkrun names as the one that failed first, from what the ranks' wrappers said.

A failure is a rank's own, or a casualty of another's: a rank that stops because a peer
failed (blinkflow's ShutdownError / InitError name that peer in ``rank``) reports it in its
record as ``blames``. Casualties may report before their cause (a survivor noticing a dead
peer can exit before the dead rank's wrapper has written its event, and a peer that left
with status 0 reports no failure at all), so the earliest *own* failure is the one named; when
every failure is a casualty, the rank they blame is named with what they say about it. A rank
that ended first with status 0 while mpirun then failed (``os._exit(0)``, a script ending
without ``MPI_Finalize``) is named too: mpirun stops a job when one rank ends that way.
"""
from __future__ import annotations

from typing import Dict, List, Optional


def is_casualty(failure: dict) -> bool:
    blamed = failure.get("blames")
    return isinstance(blamed, int) and blamed != failure.get("rank")


def first_cause(failures: List[dict]) -> Optional[dict]:
    """The earliest failure that is the rank's own, else None."""
    own = [f for f in failures if not is_casualty(f)]
    return min(own, key=_when) if own else None


def blamed_rank(failures: List[dict]) -> Optional[int]:
    """The rank the earliest casualty blames."""
    casualties = [f for f in failures if is_casualty(f)]
    return min(casualties, key=_when)["blames"] if casualties else None


def describe_blamed(rank: int, failures: List[dict], exits: Dict[int, dict],
                    hosts: Optional[Dict[int, str]] = None) -> str:
    """Lines about a rank named only by its peers (it reported no failure of its own); ``hosts``
    are the ranks' hosts as their wrappers reported them at start."""
    first = min((f for f in failures if is_casualty(f)), key=_when)
    ended = exits.get(rank)
    how = (f"exited with status {ended.get('status')} while the others still ran collectives (os._exit, or a "
           "script ending without MPI_Finalize?)" if ended else
           "blinkrun heard neither a failure nor an end from it (its output stopped reaching blinkrun)")
    where = ended.get("host", "?") if ended else (hosts or {}).get(rank)
    host = f" (host {where})" if where else ""
    lines = [f"rank {rank}{host} failed first: {how}",
             f"rank {first.get('rank')} (host {first.get('host', '?')}) reports: {first.get('exc') or '?'}"]
    if len(failures) > 1:
        lines.append(f"({len(failures)} rank(s) stopped because of it)")
    return "\nblinkrun: ".join(lines)


def first_exit(exits: Dict[int, dict]) -> Optional[dict]:
    """The earliest exit event, if any rank's process ended."""
    return min(exits.values(), key=_when) if exits else None


def _when(event: dict) -> float:
    return event.get("time") or 0.0
