"""The one error hierarchy of blinkflow, all under :class:`BlinkflowError`.

Every error says what went wrong and how to fix it. Errors that come from bad user input carry
the place (file, line or field) so a command-line tool can print one line and exit 2.
"""


class BlinkflowError(Exception):
    """Base class of every error blinkflow raises on purpose."""

    # Spelled out so that an error raised while TensorFlow traces a function keeps its class:
    # AutoGraph re-creates an exception from its message only when its __init__ is Exception's,
    # and would otherwise hand the user a StagingError (NotSupportedError's other base,
    # NotImplementedError, has an __init__ of its own).
    __init__ = Exception.__init__


class NotInitializedError(BlinkflowError):
    """A collective or query was called before ``blinkflow.init()`` (or after ``shutdown()``)."""

    def __init__(self, what: str = "this call"):
        super().__init__(f"blinkflow is not initialized: call blinkflow.init() before {what}")


class ShutdownError(BlinkflowError):
    """The runtime stopped: a peer rank failed or left, or ``shutdown()`` was called.

    ``rank`` names the peer that failed, when it is known.
    """

    def __init__(self, message: str, rank=None):
        super().__init__(message)
        self.rank = rank


class InitError(ShutdownError):
    """``init()`` could not complete on every rank: some rank did not reach it within the start
    timeout (``BLINKFLOW_START_TIMEOUT``, ``blinkrun --start-timeout``), or failed in it while
    the others waited. ``ranks`` names them (``rank`` the first); empty when unknown."""

    def __init__(self, message: str, ranks=()):
        ranks = sorted(ranks)
        super().__init__(message, rank=ranks[0] if ranks else None)
        self.ranks = ranks


HorovodInternalError = ShutdownError
"""Horovod's name for the error a collective ends with when the job lost a rank or stopped:
``blinkflow.elastic.run`` catches it, rolls the state back to its last commit and re-forms the
job on the ranks that are left."""


class RanksLostError(ShutdownError):
    """Ranks of the job are gone (their processes died, or their host did). ``ranks`` names
    them (``rank`` the first). Under ``blinkflow.elastic.run`` the job re-forms on the others."""

    def __init__(self, message: str, ranks=()):
        ranks = sorted(ranks)
        super().__init__(message, rank=ranks[0] if ranks else None)
        self.ranks = ranks


class TooFewRanksError(BlinkflowError):
    """An elastic job lost ranks and fewer than its minimum (``blinkrun --min-np``,
    ``BLINKFLOW_ELASTIC_MIN_NP``) are left: it ends on every survivor. ``lost`` names the ranks
    gone (their ranks in the job before the loss), ``left`` how many remain."""

    def __init__(self, message: str, lost=(), left: int = 0):
        super().__init__(message)
        self.lost = sorted(lost)
        self.left = left


class PartitionError(TooFewRanksError):
    """An elastic job's ranks split into groups that cannot reach each other (a network
    partition, or hosts that went silent), and this group is not the one that goes on: it holds
    no majority of the ranks whose fate it cannot know (at a tie, not the old job's rank 0). It
    ends here, so that the two groups never train on as two jobs. ``lost`` and ``left`` as in
    TooFewRanksError; ``unreachable_hosts`` names the hosts of the ranks out of reach."""

    def __init__(self, message: str, lost=(), left: int = 0, unreachable_hosts=()):
        super().__init__(message, lost=lost, left=left)
        self.unreachable_hosts = sorted(unreachable_hosts)


class HostsUpdatedInterrupt(BlinkflowError):
    """Horovod's signal that hosts were added or removed: raised by ``State.commit()`` /
    ``check_host_updates()`` on every rank at the same step, so ``blinkflow.elastic.run`` re-forms
    the job on the new set of ranks. ``skip_sync``: only ranks went away, so the survivors' state
    is already equal and need not be broadcast again."""

    def __init__(self, skip_sync: bool = False):
        super().__init__("the job's hosts changed; blinkflow.elastic.run re-forms the job on the new set of ranks")
        self.skip_sync = skip_sync


class EpochResumedInterrupt(BlinkflowError):
    """The first epoch of a ``fit`` after a reset ran only the batches the interrupted epoch had
    left, and that ``fit`` stopped after it: raised by ``UpdateBatchStateCallback`` at the end of
    that ``fit`` on every rank, so ``blinkflow.elastic.run`` runs the training function again (no
    reset, no sync: the ranks committed the same state at the epoch's end), whose ``fit`` starts
    at the next epoch with every batch of it. Keras 3's ``fit`` reads its number of batches per
    epoch once, so a shorter first epoch takes a ``fit`` of its own."""

    def __init__(self):
        super().__init__("the interrupted epoch's remaining batches ran; blinkflow.elastic.run starts the "
                         "training function again at the next epoch (call model.fit inside a function "
                         "decorated with hvd.elastic.run)")


class TensorMismatchError(BlinkflowError):
    """Ranks submitted the same tensor name with different shape, dtype, op, root or scale."""

    def __init__(self, message: str, name=None):
        super().__init__(message)
        self.name = name


class InvalidArgumentError(BlinkflowError):
    """A rank passed a collective arguments it cannot run with (an unsupported dtype, a root that
    is not a rank, splits that do not add up, ...).

    Raised on every rank of the collective, naming the rank(s) that refused it and why: the call
    still travels to the coordinator under the name it would have had, so one rank's bad input
    never leaves the others waiting or pairs their next call with a different one.
    """


class ProcessSetError(BlinkflowError, ValueError):
    """A process set that cannot be added, used or removed: ranks that are not ranks of the job,
    a set that exists already, one that was never registered or was removed. A ``ValueError``
    too, as Horovod raises there."""


class NotSupportedError(BlinkflowError, NotImplementedError):
    """What Horovod does not support either and reports as ``NotImplementedError``: reductions
    other than Average and Sum of ``IndexedSlices``, for one."""


class DuplicateNameError(BlinkflowError):
    """A tensor name was submitted again while the first submission is still in flight."""


class TopologyError(BlinkflowError):
    """Bad topology input. ``where`` names the file, line or field at fault."""

    def __init__(self, message: str, where=None):
        full = f"{where}: {message}" if where else message
        super().__init__(full)
        self.where = where


class PlanError(BlinkflowError):
    """The planner cannot produce (or verify) a plan for the given topology and collective."""


class ScheduleError(PlanError):
    """A schedule is malformed or fails the symbolic check of its collective's postcondition."""


class ConfigError(BlinkflowError):
    """A ``BLINKFLOW_*`` variable or launcher flag has a value that cannot be used."""


class BackendError(BlinkflowError):
    """A backend (cpu or cuda) cannot run here, or failed while running."""


class KernelCompileError(BackendError):
    """A CUDA kernel failed to compile; the message carries the source name and options."""


class ConfigWarning(UserWarning):
    """A ``BLINKFLOW_*`` variable that no setting reads (most likely a misspelling)."""
