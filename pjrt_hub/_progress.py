"""One status line on a terminal for long work: ``[12/35] numba_cpu at 0.106 (40 s)``.

Long commands (the matrix, the conformance suite, bench) call :meth:`Progress.update` as work
finishes. The line is redrawn in place on stderr, and only when stderr is a terminal and the
command was not asked for JSON: a CI log, a pipe or a ``--json`` run stays quiet, so that the
output a program reads is never mixed with it. :meth:`Progress.close` clears the line before the
command prints its report.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """A redrawn ``[done/total] current`` line on ``stream`` (stderr), or nothing when quiet."""

    def __init__(self, what: str = "", *, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.what = what
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._shown = False

    @classmethod
    def for_command(cls, what: str, *, json_output: bool) -> "Progress":
        """Quiet with ``--json``; otherwise shown when stderr is a terminal."""
        return cls(what, enabled=False if json_output else None)

    def update(self, done: int, total: int, current: str = "") -> None:
        """Show ``done`` of ``total`` finished, with what is running now."""
        if not self.enabled:
            return
        elapsed = time.monotonic() - self._started
        text = f"[{done}/{total}]" + (f" {self.what}" if self.what else "") + (f" {current}" if current else "")
        text += f" ({elapsed:.0f} s)"
        width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
        if len(text) > width:
            text = text[: width - 1] + "…"
        with self._lock:
            self.stream.write("\r\x1b[2K" + text)
            self.stream.flush()
            self._shown = True

    def close(self) -> None:
        """Clear the line, so that what is printed next starts on a clean one."""
        with self._lock:
            if self.enabled and self._shown:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._shown = False

    #: The name the CLI's own progress line uses for the same thing.
    clear = close

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
