"""Python numbers as kernel arguments.

A Python number that meets a device tensor as an operand (``state.add_(one, alpha=x)``) travels as a kernel argument,
where ``torch.as_tensor(x, device=cuda)`` is a stalling copy. Arithmetic on such numbers is done on the host, rounded
exactly as the device would round it.
"""

import math
import struct
from numbers import Number

import torch

__all__ = ["is_number", "round_to_dtype"]


def is_number(x: object) -> bool:
    """Return whether ``x`` is a Python (or NumPy) real number rather than a tensor."""
    return isinstance(x, Number) and not isinstance(x, complex)


def _round_bfloat16(x: float) -> float:
    # bfloat16 is the upper half of a float32: round-to-nearest-even on the dropped 16 bits.
    if math.isnan(x) or math.isinf(x):
        return x
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _round_with(fmt: str, x: float) -> float:
    try:
        return struct.unpack(fmt, struct.pack(fmt, x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def round_to_dtype(x: float, dtype: torch.dtype) -> float:
    """Round a number to the nearest value of a floating ``dtype`` (others: ``float(x)``), as ``as_tensor`` would.

    Double carries more than ``2p + 2`` bits, so host arithmetic on rounded numbers, rounded again, matches the device.

    Example:
        >>> import torch
        >>> round_to_dtype(1 / 3, torch.float16)
        0.333251953125
    """
    x = float(x)
    if dtype == torch.float32:
        return _round_with("<f", x)
    if dtype == torch.float16:
        return _round_with("<e", x)
    if dtype == torch.bfloat16:
        return _round_bfloat16(_round_with("<f", x) if abs(x) < 3.4e38 else x)
    return x
