"""Which group of survivors may go on after a loss: the one rule that prevents split brain.

A network partition looks like a lost peer from both sides (a failure detector cannot tell a
dead process from one it cannot hear), so both sides of a cut shrink to the ranks they still
reach, and each could train on as a job of its own, its rank 0 writing checkpoints from a model
that diverges from the other's. The usual remedy of replicated systems (a quorum: Lamport's
"The Part-Time Parliament", 1998; Gifford's weighted voting, 1979) is applied to the ranks:

- **Voters** are the old job's ranks whose fate this group cannot know: every lost rank whose
  host holds none of this group's ranks. A lost rank on a host where a survivor of this group
  runs is not a voter: the two share a machine, so no network cut separates them; that rank
  died (SIGKILL, a crash, an exit), and cannot be part of another group. So losses within a
  host, however many, never stop a job.
- **The group goes on** when it holds more than half of the voters plus itself, i.e. when
  ``2 * len(group) > len(group) + len(uncertain)``; at exactly half, when it holds the old job's
  rank 0. Under blinkrun, rank 0 runs on the first host of ``-H``/the hostfile, the host that
  also reads the job's hosts file (docs/elastic.md, "Limits"): the side of a tie that goes on is
  the one with the launcher's first host.
- Two disjoint groups can never both go on: each needs more than half of the same old job (or
  half and its rank 0, which only one can hold). Several groups may all stop (a cut into three
  pieces, or a cut and a crash at once): the job then ends, which is the price of never running
  twice.

Every survivor of a group computes the same answer from the same inputs (the shrink's agreed
group, the old job's host names), so no extra message is exchanged.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class Quorum:
    """The decision for one group of survivors of an old job."""

    survivors: Tuple[int, ...]
    """This group's ranks in the old job."""
    uncertain: Tuple[int, ...]
    """Lost ranks on hosts where none of this group runs: gone, or only out of reach."""
    dead: Tuple[int, ...]
    """Lost ranks on a host this group shares: certainly gone."""
    holds_rank0: bool
    goes_on: bool

    def unreachable_hosts(self, hosts: Sequence[str]) -> Tuple[str, ...]:
        return tuple(sorted({hosts[r] for r in self.uncertain}))


def decide(survivors: Sequence[int], old_size: int, hosts: Sequence[str]) -> Quorum:
    """The quorum rule of the module docstring: ``survivors`` are this group's old ranks,
    ``hosts[r]`` the host name of old rank ``r`` (``len(hosts) == old_size``)."""
    kept = tuple(sorted(set(survivors)))
    lost = [r for r in range(old_size) if r not in set(kept)]
    here = {hosts[r] for r in kept}
    dead = tuple(r for r in lost if hosts[r] in here)
    uncertain = tuple(r for r in lost if hosts[r] not in here)
    holds_rank0 = 0 in kept
    mine, theirs = len(kept), len(uncertain)
    goes_on = mine > theirs or (mine == theirs and holds_rank0)
    return Quorum(survivors=kept, uncertain=uncertain, dead=dead, holds_rank0=holds_rank0, goes_on=goes_on)


def refusal(quorum: Quorum, old_size: int, hosts: Sequence[str]) -> str:
    """What a group that does not go on says: what it saw, what the rule is, what to do."""
    mine = ", ".join(map(str, quorum.survivors))
    theirs = ", ".join(map(str, quorum.uncertain))
    here = ", ".join(sorted({hosts[r] for r in quorum.survivors}))
    there = ", ".join(quorum.unreachable_hosts(hosts))
    why = ("fewer than the ranks it lost contact with" if len(quorum.survivors) < len(quorum.uncertain)
           else "as many as the ranks it lost contact with, and not the old job's rank 0")
    return (f"blinkflow elastic: network partition or lost hosts: ranks {mine} (host {here}) of the "
            f"{old_size}-rank job lost contact with ranks {theirs} (host {there}), which may still be running; this side holds "
            f"{len(quorum.survivors)} of them, {why}, so it stops here and the other side, if it lives, goes on "
            "(an elastic job goes on only where a majority of the ranks is, at a tie the side with rank 0, so that it "
            "never trains twice). Check the network between the hosts; the job's output and checkpoints are the "
            "other side's")
