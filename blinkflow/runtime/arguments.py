"""A collective's arguments as the runtime takes them, or why this rank refuses them.

Every check here raises :class:`~blinkflow.errors.InvalidArgumentError` with the reason alone
(no tensor name): the API turns a refusal into a request that still travels under the call's
name, and the coordinator's error (the same on every rank) names the call, the rank and this
reason. Nothing here may draw an automatic name or touch the runtime's state.
"""
from __future__ import annotations

import math
import operator
from typing import Any, List, Optional, Tuple

import numpy as np

from ..arrays import as_cupy
from ..errors import InvalidArgumentError
from ..ops import Average
from ..placement import DEVICE, HOST, of_array
from .messages import shown

DTYPES = {"bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
          "float16", "float32", "float64"}
_NAMES = {np.dtype(name): name for name in DTYPES}  # native byte order only: '>f4' is not a key
_dtype_of, _shape_of = operator.attrgetter("dtype"), operator.attrgetter("shape")


def as_array(tensor) -> Tuple[Any, str]:
    """(array, device) of a numpy or GPU array (CuPy's, or anything CuPy takes without a copy; see
    :mod:`blinkflow.arrays`) or of anything numpy converts, of a supported dtype; the device is
    :func:`blinkflow.placement.of_array`'s answer."""
    if type(tensor) is np.ndarray and tensor.dtype in _NAMES:  # the common case, checked cheaply
        return tensor, HOST
    device = of_array(tensor)
    array = as_cupy(tensor) if device == DEVICE else np.asarray(tensor)
    if array.dtype in _NAMES:  # the common case, without numpy's slow dtype.name
        return array, device
    if array.dtype.name not in DTYPES:
        raise InvalidArgumentError(f"dtype {array.dtype} is not supported by blinkflow collectives; use one of "
                                   f"{', '.join(sorted(DTYPES))}")
    # '>f4' is named float32 too, but its bytes would travel as they are
    return array.astype(array.dtype.newbyteorder("=")), device


def numpy_members(tensors: List[Any]):
    """(dtype names, shapes) of a group whose members are all plain numpy arrays of supported
    native dtypes (a training step's gradients), else None: then each member goes through
    :func:`as_array`. Built with C-level maps: a step groups hundreds of tensors, and this
    runs right after backprop flushed the caches."""
    if set(map(type, tensors)) != {np.ndarray}:
        return None
    names = list(map(_NAMES.get, map(_dtype_of, tensors)))
    if None in names:
        return None
    return names, list(map(_shape_of, tensors))


def dtype_name(array) -> str:
    """The name of a (native, supported) dtype; a dict lookup, not numpy's ``dtype.name``."""
    return _NAMES[array.dtype]


def member(index: int, check, *args):
    """``check(*args)`` for member ``index`` of a group: a refusal says which member."""
    try:
        return check(*args)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"member #{index}: {e}") from None


def scale_factor(value, which: str) -> float:
    """A pre/postscale factor as a float: a finite number."""
    try:
        factor = float(value)
    except (TypeError, ValueError):
        factor = None
    if factor is None or not math.isfinite(factor):
        raise InvalidArgumentError(f"{which}_factor must be a finite number, got {shown(value)}")
    return factor


def no_bool_average(array, op) -> None:
    if op is Average and array.dtype.kind == "b":
        raise InvalidArgumentError("Average is not defined for bool tensors; use Sum or Max (logical or) or Min or "
                                   "Product (logical and)")


def need_dims(array) -> None:
    if array.ndim == 0:
        raise InvalidArgumentError("a 0-d tensor has no first dimension to split or concatenate; reshape it to (1,)")


def root_rank(value, ranks, label: str = "") -> int:
    """A broadcast root: an integer that is one of ``ranks`` (the global ranks of the job, or of
    a process set, which ``label`` names)."""
    root = whole_number(value, "root_rank")
    if root not in ranks:
        if not label:
            raise InvalidArgumentError(f"root_rank {root} is not a rank of this job (size {len(ranks)})")
        raise InvalidArgumentError(f"root_rank {root} is not a rank{label}; roots are global ranks of the set's "
                                   "members")
    return root


def whole_number(value, what: str) -> int:
    """``value`` as an int when it is one exactly (2 or 2.0, never 2.7 silently truncated)."""
    try:
        number = operator.index(value)
    except TypeError:
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{what} must be an integer, got {shown(value)}") from None
        if not (math.isfinite(as_float) and as_float.is_integer()):
            raise InvalidArgumentError(f"{what} must be an integer, got {shown(value)}") from None
        number = int(as_float)
    return int(number)


def alltoall_splits(splits, rows: int, size: int) -> Tuple[int, ...]:
    """Rows sent to each rank: ``splits`` checked (whole numbers, one per rank, >= 0, summing to
    ``rows``), or equal blocks when None."""
    if splits is None:
        if rows % size:
            raise InvalidArgumentError(f"first dimension {rows} is not divisible by the number of ranks {size}; "
                                       "pass splits= to send uneven slices")
        return (rows // size,) * size
    try:
        values = np.asarray(splits).reshape(-1)
    except Exception as e:  # noqa: BLE001 - a ragged list, an object numpy refuses
        raise InvalidArgumentError(f"splits must be {size} integers, got {shown(splits)} ({e})") from None
    if values.dtype.kind not in "iub":
        if values.dtype.kind != "f" or not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
            raise InvalidArgumentError(f"splits must be integers (rows sent to each rank), got {shown(splits)}")
    parts = tuple(int(s) for s in values)
    if len(parts) != size or any(s < 0 for s in parts) or sum(parts) != rows:
        raise InvalidArgumentError(f"splits {shown(list(parts))} must be {size} non-negative numbers summing to the "
                                   f"first dimension {rows}")
    return parts


def reserved_name(name: Optional[str]) -> Optional[str]:
    """Why ``name`` may not be used, or None."""
    if name is not None and str(name).startswith("__bf"):
        return f"tensor name {shown(name)}: names starting with '__bf' are reserved for blinkflow"
    return None
