"""Conformance cases as data, and the small vocabulary cases are written in.

A :class:`Case` says what it checks and where it applies (the PJRT API minor that brought the calls
it makes, the extensions it needs, which kind of plugin); its ``run`` gets a
:class:`~pjrt_hub.testing._context.PluginUnderTest` and either returns, or raises
:class:`CaseFailure` (the plugin is wrong) or :class:`CaseSkipped` (the case cannot apply, and
why). Cases never import pytest: the pytest plugin and the runner translate these outcomes.

Cases register themselves in :data:`CASES` by id (``group/name``); groups follow the PJRT C API's
own test suite (``pjrt_c_api_test.cc``), so a failure here reads like one there.
"""

from __future__ import annotations

import fnmatch
import hashlib
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, NoReturn, Sequence

from pjrt_hub.abi import ErrorCode, PjrtError

if TYPE_CHECKING:
    from ._context import PluginUnderTest

__all__ = [
    "CASES",
    "GROUPS",
    "Case",
    "CaseFailure",
    "CaseSkipped",
    "PluginKind",
    "case",
    "check",
    "expect_error",
    "fail",
    "matching",
    "skip",
    "suite_version",
]

PluginKind = Literal["python", "c", "both"]

#: The groups, in the order the suite runs and reports them. ``properties`` has no counterpart
#: upstream: generated inputs, the plugin beside the reference plugin (cases/properties.py).
GROUPS: tuple[str, ...] = (
    "version", "plugin", "client", "devices", "memories", "buffers", "transfers", "compile",
    "execute", "collectives", "numerics", "events", "lifetime", "concurrency", "topology", "extensions",
    "errors", "properties", "abi", "jax",
)

#: Seconds a case may take unless it says otherwise (scaled by ``--pjrt-timeout-scale``).
DEFAULT_TIMEOUT = 30.0


class CaseFailure(AssertionError):
    """The plugin does not conform; the message says how, in PJRT's terms."""


class CaseSkipped(Exception):
    """The case does not apply to this plugin (or cannot run here); the message says why."""


def fail(message: str) -> NoReturn:
    raise CaseFailure(message)


def skip(reason: str) -> NoReturn:
    raise CaseSkipped(reason)


def check(condition: object, message: str | Callable[[], str]) -> None:
    """Fail with ``message`` unless ``condition`` holds (``message`` may be a callable, built lazily)."""
    if not condition:
        raise CaseFailure(message() if callable(message) else message)


def expect_error(call: Callable[[], Any], *, code: ErrorCode | None = None, message: str | None = None,
                 what: str) -> PjrtError:
    """Call and demand a :class:`PjrtError`, with ``code`` and containing ``message`` when given."""
    try:
        result = call()
    except PjrtError as exc:
        if code is not None and exc.code is not code:
            fail(f"{what}: expected {code.name}, got {exc.code.name}: {exc.message}")
        if message is not None and message not in exc.message:
            fail(f"{what}: expected the message {message!r}, got {exc.code.name}: {exc.message!r}")
        return exc
    except (CaseFailure, CaseSkipped):  # the suite's own verdicts (a shared object that failed earlier)
        raise
    except Exception as exc:  # a plugin that raises a bare Python error instead of a PJRT error
        fail(f"{what}: expected a PjrtError{f' ({code.name})' if code else ''}, got {type(exc).__name__}: {exc}")
    fail(f"{what}: expected {code.name if code else 'an error'}"
         f"{f' {message!r}' if message else ''}, but the call returned {result!r}")
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Case:
    """One conformance check."""

    group: str
    name: str
    description: str
    run: Callable[["PluginUnderTest"], None] = field(repr=False, compare=False)
    #: The PJRT API minor of the newest call the case makes; older plugins (or an older
    #: framework) skip it, naming the versions.
    min_api_minor: int = 0
    #: Extensions the case needs, by name; a plugin that does not offer one skips it.
    needs_extensions: tuple[str, ...] = ()
    kind: PluginKind = "both"
    timeout: float = DEFAULT_TIMEOUT

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    def applies_to_kind(self, kind: str) -> bool:
        return self.kind == "both" or self.kind == kind


#: Every case, by id, in registration order.
CASES: dict[str, Case] = {}


def _register(item: Case) -> Case:
    if item.group not in GROUPS:
        raise ValueError(f"case {item.id}: unknown group {item.group!r}; groups: {', '.join(GROUPS)}")
    if item.id in CASES:
        raise ValueError(f"case {item.id} is defined twice")
    CASES[item.id] = item
    return item


def case(group: str, name: str | None = None, *, min_api_minor: int = 0,
         needs_extensions: Sequence[str] = (), kind: PluginKind = "both",
         timeout: float = DEFAULT_TIMEOUT) -> Callable[[Callable[["PluginUnderTest"], None]], Case]:
    """Register the decorated function as a case; its docstring is the description."""

    def make(fn: Callable[["PluginUnderTest"], None]) -> Case:
        doc = inspect.getdoc(fn) or ""
        return _register(Case(group, name or fn.__name__, doc.split("\n\n")[0].replace("\n", " "), fn,
                              min_api_minor, tuple(needs_extensions), kind, timeout))

    return make


def add_case(item: Case) -> Case:
    """Register a case built as data (parametrized families: element types, corpus programs)."""
    return _register(item)


def matching(case_id: str, patterns: Iterable[str]) -> str | None:
    """The first fnmatch pattern that names ``case_id``, or None."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(case_id, pattern):
            return pattern
    return None


def suite_version(cases: Mapping[str, Case] | None = None) -> str:
    """A short hash of the case definitions: metadata, the source of every run function and the
    modules they are written in, and of what decides an outcome besides them (the runner, the
    C-plugin limitations table). Results computed by another suite version are not reused."""
    from . import _context, _limitations, _programs, _runner

    cases = CASES if cases is None else cases
    digest = hashlib.sha256()
    modules = {inspect.getmodule(m) for m in (_context, _programs, _runner, _limitations)}
    for item in cases.values():
        digest.update(repr((item.id, item.description, item.min_api_minor, item.needs_extensions,
                            item.kind, item.timeout)).encode())
        modules.add(inspect.getmodule(item.run))
    for module in sorted((m for m in modules if m is not None), key=lambda m: m.__name__):
        try:
            digest.update(inspect.getsource(module).encode())
        except (OSError, TypeError):
            digest.update(module.__name__.encode())
    digest.update(_programs.corpus_fingerprint().encode())
    return digest.hexdigest()[:16]
