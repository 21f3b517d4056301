"""`ApiVersion`: the PJRT C API version number, ``major.minor``.

PJRT's own rules for the two numbers (``pjrt_c_api.h``, paraphrased):

* the **major** is bumped for an ABI-incompatible change: deleting a method or argument,
  changing an argument's type, rearranging the fields of ``PJRT_Api`` or of an Args struct;
* the **minor** is bumped for a change that older callers or implementations can live with:
  a new field at the end of ``PJRT_Api`` or of an Args struct, a renamed method or argument.

The major has never moved from 0, and several changes that break the ABI were shipped as minors
(0.45, 0.57, 0.68): the history in :mod:`pjrt_hub.abi.history` records them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

__all__ = ["ApiVersion", "VersionLike"]

_VERSION_RE = re.compile(r"\s*v?(\d+)\.(\d+)\s*")


@dataclass(frozen=True, order=True, slots=True)
class ApiVersion:
    """A PJRT C API version: ``ApiVersion(0, 105)`` prints as ``0.105``.

    Ordering is numeric (``0.9 < 0.81 < 0.105``), never lexical.
    """

    major: int
    minor: int

    def __post_init__(self) -> None:
        for field, value in (("major", self.major), ("minor", self.minor)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ApiVersion {field} must be an int, got {value!r}")
            if value < 0:
                raise ValueError(f"ApiVersion {field} must not be negative, got {value}")

    @classmethod
    def parse(cls, text: "VersionLike") -> "ApiVersion":
        """Read ``"0.105"``, ``(0, 105)`` or an ``ApiVersion``; anything else raises ValueError."""
        if isinstance(text, ApiVersion):
            return text
        if isinstance(text, tuple) and len(text) == 2:
            return cls(*text)
        if not isinstance(text, str):
            raise TypeError(f"expected a PJRT API version like '0.105', got {text!r}")
        match = _VERSION_RE.fullmatch(text)
        if match is None:
            raise ValueError(
                f"{text!r} is not a PJRT API version: expected 'MAJOR.MINOR' with two "
                "non-negative integers, e.g. '0.105'"
            )
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def __repr__(self) -> str:
        return f"ApiVersion({self.major}, {self.minor})"


VersionLike = Union[ApiVersion, str, "tuple[int, int]"]
