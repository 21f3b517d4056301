"""The registry: discover plugins, judge them, register the accepted ones with pluggy.

Every candidate gets exactly one outcome in the load report (loaded, found, incompatible,
blocked, duplicate, failed) with its reason. Nothing a plugin does while being discovered or
declared (an import that raises, a hook that raises, garbage in its declaration) escapes into the
host: it is recorded, and every other plugin still loads. Failures are raised only when asked
for: :meth:`PluginRegistry.require` for plugins the user named, or strict loading.

A C library is probed in a child process (a loader's ``pjrt_hub_probe_library``). A Python
plugin is Python code the host runs, so it is imported here; with ``isolate_python`` (the CLI's
and the conformance run's setting) one of another distribution is imported and declared in a
child process first (:func:`preflight`), in parallel with the probes, so that a plugin whose
import ends the process (``os._exit``, a crash in an extension module, KeyboardInterrupt) fails
alone. :meth:`PluginRegistry.preflight_client` does the same for a first client.

The version is read and judged before ``PluginManager.register()``, so a skewed plugin is refused
with a version message rather than a hook-validation error.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Literal, Mapping, Sequence

import pluggy
from pydantic import ValidationError

from pjrt_hub.abi import (
    PROJECT,
    Api,
    ApiVersion,
    Client,
    NotFound,
    PluginLoadError,
    PluginValidationError,
    Unavailable,
    VersionError,
    hookspecs,
)
from pjrt_hub.abi.probe import ProbeReport
from pjrt_hub.extensions import (
    ExtensionRequest,
    ExtensionWarning,
    Negotiation,
    extension_spec,
    negotiate,
    version_from_struct_size,
)

from ._discovery import ENV_LIBRARY_PATHS, Candidate, discover
from ._facade import Gated, gate
from ._preflight_child import DONE as _PREFLIGHT_DONE
from ._preflight_child import HUNG as _PREFLIGHT_HUNG
from ._preflight_child import IMPORTED as _PREFLIGHT_IMPORTED
from ._policy import PluginKind, Policy, Verdict, judge, strict_from_environment
from ._reports import (
    DeclarationModel,
    NegotiationModel,
    Outcome,
    PluginRecord,
    VerdictModel,
    declaration_from_plugin,
)

__all__ = ["PluginRegistry", "RegistrySettings", "SelectionNote", "default_plugin_name", "selector",
           "selector_matches"]

ENV_DISABLE = "PJRT_HUB_DISABLE_PLUGINS"
ENV_ALLOW = "PJRT_HUB_PLUGINS"
ENV_AUTOLOAD = "PJRT_HUB_PLUGIN_AUTOLOAD"
ENV_DEVICE = "PJRT_DEVICE"
LOADER_GROUP = "pjrt_hub.loaders"
DEFAULT_PLUGIN = "numba_cpu"

#: Distributions that play the framework's part; a plugin's pin on one of them is checked.
FRAMEWORK_DISTRIBUTIONS = ("pjrt-hub", "jax", "jaxlib", "torch-xla")

_HOOK_NAMES = frozenset(n for n in dir(hookspecs) if n.startswith("pjrt_hub_"))

# packaging's requirement parser (and the platform tags it drags in) is imported only for a
# requirement on a framework distribution: every other Requires-Dist line is skipped by its name.
_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")


def canonicalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them (``Some_Dist`` and ``some-dist`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def selector(text: str) -> str:
    """A plugin selector as the settings hold it: ``name`` (lower case), or ``name@where`` with
    ``where`` kept as written (a distribution name, or a library path, which may be case-sensitive)."""
    name, at, where = text.strip().partition("@")
    return f"{name.strip().lower()}@{where.strip()}" if at else name.strip().lower()


def _names(text: str | None) -> frozenset[str]:
    return frozenset(selector(p) for p in (text or "").split(",") if p.strip())


def selector_matches(item: str, candidate: Candidate) -> bool:
    """Whether a selector names this candidate: ``name`` every plugin of that name; ``name@where``
    only the one from distribution ``where`` or with its library at path ``where``, which is how
    one of two plugins sharing a name is blocked. A plugin whose own name holds an ``@`` (a
    served one, ``toy@c_api``) is named by its whole name."""
    if item == candidate.name.lower():
        return True
    name, at, where = item.partition("@")
    if name != candidate.name.lower():
        return False
    if not at:
        return True
    if candidate.distribution and canonicalize_name(where) == canonicalize_name(candidate.distribution):
        return True
    if candidate.library_path:
        try:
            return os.path.realpath(where) == os.path.realpath(candidate.library_path)
        except (OSError, ValueError):
            return False
    return False


def default_plugin_name(environ: Mapping[str, str] | None = None) -> str:
    """The plugin commands run on when none is named: ``PJRT_DEVICE`` (as in PyTorch/XLA), else numba_cpu."""
    env = os.environ if environ is None else environ
    return env.get(ENV_DEVICE, "").strip().lower() or DEFAULT_PLUGIN


_OFF = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class RegistrySettings:
    """Which plugins to consider, and how.

    :meth:`from_environment` is the one reader of the environment variables that shape a
    registry; every command builds its registry through it (:meth:`PluginRegistry.from_environment`),
    so a variable means the same to ``pjrt-hub list``, ``pytest --pjrt-plugin``, ``bench`` and the
    matrix. Settings built by hand read nothing, except the two discovery facts left at None
    (``library_paths``, ``default_plugin``), which the registry takes from its environment.
    """

    policy: Policy = field(default_factory=Policy)
    extension_requests: tuple[ExtensionRequest, ...] = ()
    #: Plugins never loaded (``PJRT_HUB_DISABLE_PLUGINS=a,b``): selectors, see :func:`selector_matches`.
    disabled: frozenset[str] = frozenset()
    #: If set, only these plugins are loaded (``PJRT_HUB_PLUGINS=a,b``): selectors too.
    allowed: frozenset[str] | None = None
    #: If set, the plugins a command will use (``--pjrt-plugin``): no other one is imported. Unlike
    #: ``allowed`` this is not the user's allow-list, so the two apply together.
    requested: frozenset[str] | None = None
    #: Read entry points (``PJRT_HUB_PLUGIN_AUTOLOAD=0`` turns it off).
    autoload: bool = True
    #: Extra C plugin library paths (``pjrt-hub probe PATH``, ``--plugin PATH``).
    paths: tuple[str, ...] = ()
    #: C plugins named by ``PJRT_NAMES_AND_LIBRARY_PATHS`` (``name:path,...`` as written; "" for
    #: none). None: the registry reads the variable from its environment.
    library_paths: str | None = None
    #: The plugin used when a command names none (``PJRT_DEVICE``, else numba_cpu). None: the
    #: registry reads ``PJRT_DEVICE`` from its environment.
    default_plugin: str | None = None
    #: Seconds a C library may take to be probed, and a Python plugin's ``pjrt_hub_declare`` to
    #: return. A cold first read of a 250 MB plugin takes a few seconds; one that hangs (libtpu
    #: looking for a metadata server) must not hold ``list`` for minutes. Probes run in parallel,
    #: and a result is cached on disk by the loader.
    probe_timeout: float = 30.0
    #: Import each Python plugin of another distribution, and call its ``pjrt_hub_declare``,
    #: in a child process first (:func:`preflight`): one whose import ends the process
    #: (``os._exit``, a crash in an extension module) then fails alone instead of taking the
    #: command with it. The CLI sets it; a framework imports its plugins in its own process.
    isolate_python: bool = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "RegistrySettings":
        """The settings the environment gives, with ``overrides`` (what a command line says) on top.

        Read here: ``PJRT_HUB_DISABLE_PLUGINS``, ``PJRT_HUB_PLUGINS``, ``PJRT_HUB_PLUGIN_AUTOLOAD``,
        ``PJRT_HUB_STRICT`` (or ``ENABLE_PJRT_COMPATIBILITY=false``), ``PJRT_NAMES_AND_LIBRARY_PATHS``
        and ``PJRT_DEVICE``. An override replaces the environment's value, with two exceptions that
        only ever narrow: a ``policy`` given here still gets the environment's strict mode (a
        command's own ``--framework-version`` must not switch off ``PJRT_HUB_STRICT=1``), and
        ``disabled`` adds to the environment's block-list. The variables not read here belong to
        the parts that use them: ``PJRT_HUB_CACHE`` and ``PJRT_HUB_PROBE_CACHE`` (the caches),
        ``PJRT_HUB_TRACEBACK`` (the CLI), ``PJRT_HUB_JAX_PLUGINS`` (``import jax``).
        """
        env = os.environ if environ is None else environ
        strict_source = strict_from_environment(env)
        policy = overrides.pop("policy", None) or Policy()
        if strict_source is not None and not policy.strict:
            policy = replace(policy, strict=True, strict_source=strict_source)
        disabled = _names(env.get(ENV_DISABLE)) | frozenset(overrides.pop("disabled", ()))
        values: dict[str, Any] = {
            "policy": policy, "disabled": disabled, "allowed": _names(env.get(ENV_ALLOW)) or None,
            "autoload": env.get(ENV_AUTOLOAD, "1").strip().lower() not in _OFF,
            "library_paths": env.get(ENV_LIBRARY_PATHS) or "", "default_plugin": default_plugin_name(env),
        }
        values.update(overrides)
        return cls(**values)

    def completed(self, environ: Mapping[str, str]) -> "RegistrySettings":
        """These settings with the discovery facts they leave open read from ``environ``."""
        library_paths, default_plugin = self.library_paths, self.default_plugin
        if library_paths is None:
            library_paths = environ.get(ENV_LIBRARY_PATHS) or ""
        if default_plugin is None:
            default_plugin = default_plugin_name(environ)
        if (library_paths, default_plugin) == (self.library_paths, self.default_plugin):
            return self
        return replace(self, library_paths=library_paths, default_plugin=default_plugin)

    def refusal(self, candidate: Candidate) -> str | None:
        """Why the block-list, the allow-list or the request keep ``candidate`` out, or None.
        The registry asks before it imports or probes anything, and so does the matrix plan."""
        blocking = sorted(item for item in self.disabled if selector_matches(item, candidate))
        if blocking:
            return f"blocked by {ENV_DISABLE} or --disable ({', '.join(blocking)})"
        if self.allowed is not None and not any(selector_matches(i, candidate) for i in self.allowed):
            return f"not in the allow-list ({ENV_ALLOW} or --only): {', '.join(sorted(self.allowed))}"
        if self.requested is not None and not any(selector_matches(i, candidate) for i in self.requested):
            return f"not asked for (only {', '.join(sorted(self.requested))} are used)"
        return None


@dataclass(frozen=True)
class SelectionNote:
    """An allow-list or block-list entry that named no plugin found, and what that meant.

    ``setting`` is ``"allowed"`` (the user asked for a plugin that is not there: commands exit 5)
    or ``"disabled"`` (nothing was blocked under it: harmless, but often a misspelt name)."""

    setting: Literal["allowed", "disabled"]
    selector: str
    message: str


@dataclass
class _Entry:
    """A loaded plugin as the registry holds it."""

    record: PluginRecord
    candidate: Candidate
    obj: Any = None
    declaration: DeclarationModel | None = None
    version: ApiVersion | None = None
    verdict: Verdict | None = None
    api: Any = None
    #: ``api`` behind the version gate, built once (the gate caches a proxy class per plugin class).
    gated: Gated | Api | None = None
    #: What the loader read of a C library.
    probe: ProbeReport | None = None
    #: Whether ``PJRT_Plugin_Initialize`` ran (once, before the first client).
    initialized: bool = False


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _installed_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _not_a_library(path: str) -> str | None:
    """Why ``path`` cannot be a shared library at all (empty, a text file, a truncated ELF
    header), or None: what to say instead of "no loader reads it"."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if not head:
        return "it is an empty file, not a shared library"
    if not head.startswith(b"\x7fELF"):
        return "it is not a shared library (no ELF header)"
    if len(head) < 64:
        return "it is a truncated ELF file (shorter than an ELF header)"
    return None


def _within(seconds: float, call: Any) -> Any:
    """``call()`` on a daemon thread, its result or exception, or TimeoutError after ``seconds``
    (the thread is left behind: a hung hook cannot be stopped, only not waited for)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="pjrt-hub-declare", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError
    if "error" in box:
        raise box["error"]
    return box.get("value")


#: Entry points of pjrt-hub's own Python plugins (numba_cpu, reference), never isolated.
_OWN_MODULE = "pjrt_hub."

#: The pre-flight children: a module, so that ruff and mypy read them like the rest.
_PREFLIGHT_CHILD = "pjrt_hub._preflight_child"


def child_environment() -> dict[str, str]:
    """The environment of a child process that loads plugins (a preflight child, a conformance
    worker): this one, with this process's import path, so that the child finds the plugin (and
    pjrt-hub) where the registry does."""
    paths = [p for p in sys.path if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def _run_child(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                          stdin=subprocess.DEVNULL, env=child_environment())


def preflight(ep: md.EntryPoint, timeout: float) -> str | None:
    """Import a Python plugin's entry point and call its ``pjrt_hub_declare`` in a child
    process: None when that process got through (what the plugin raised, if anything, is
    recorded when the registry imports it in its own), else why the plugin must not be
    imported here: it ended the process, raised KeyboardInterrupt, or did not finish."""
    what = f"importing {ep.value!r}"
    cmd = [sys.executable, "-m", _PREFLIGHT_CHILD, "import", ep.name, ep.value, ep.group, str(timeout)]
    # The import itself gets a generous bound (importing a framework can take a minute cold);
    # the declaration has ``timeout`` within it.
    bound = max(120.0, 2 * timeout + 10)
    try:
        done = _run_child(cmd, bound)
    except subprocess.TimeoutExpired:
        return (f"{what} and declaring it did not finish within {bound:g} s in a child process "
                "(pjrt-hub imports each plugin there first)")
    except OSError:
        return None  # no child to be had: the machine's problem, not the plugin's; import it here
    lines = done.stdout.splitlines()
    hung = next((line.removeprefix("pjrt-hub-preflight: hung ") for line in lines
                 if line.startswith("pjrt-hub-preflight: hung ")), None)
    if hung is not None:
        return hung
    if _PREFLIGHT_DONE in lines:
        return None
    raised = next((line.rsplit(" ", 1)[-1] for line in lines if line.startswith("pjrt-hub-preflight: raised ")), None)
    if raised is not None:
        return f"{what} raised {raised} (in a child process, where pjrt-hub imports each plugin first)"
    if _PREFLIGHT_IMPORTED in lines:
        what = f"its pjrt_hub_declare (after {what})"
    return (f"{what} ended the process: a child process doing it {_how_it_ended(done)} (pjrt-hub imports "
            "each plugin there first, so that one that ends its process fails alone)")


def _how_it_ended(done: "subprocess.CompletedProcess[str]") -> str:
    """``was killed by SIGSEGV`` or ``ended with exit status 3``, and the last line it wrote to stderr."""
    import signal

    code = done.returncode
    if code < 0:
        try:
            end = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            end = f"was killed by signal {-code}"
    else:
        end = f"ended with exit status {code}"
    last = done.stderr.strip().splitlines()[-1:] or [""]
    return end + (f"; its last words: {last[0][-300:]}" if last[0] else "")




class PluginRegistry:
    """Finds, judges and holds plugins. Pass it around; there is no global instance."""

    def __init__(self, settings: RegistrySettings | None = None, *,
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.settings = (settings or RegistrySettings.from_environment(env)).completed(env)
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._entries: list[_Entry] = []
        self._by_name: dict[str, _Entry] = {}
        self._loaded = False
        self._lock = threading.RLock()
        self._loaders: pluggy.PluginManager | None = None
        self._loader_problems: list[str] = []
        #: Probe answers gathered ahead, in parallel, by library path (see _probe_ahead).
        self._probes: dict[str, tuple[ProbeReport | Mapping[str, Any] | None, BaseException | None]] = {}
        #: ``(setting, selector)`` pairs that named at least one candidate.
        self._matched: set[tuple[str, str]] = set()
        #: What :func:`preflight` found of each isolated Python plugin (a problem, or None), by
        #: entry point, gathered ahead with the probes.
        self._preflights: dict[str, str | None] = {}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "PluginRegistry":
        """The registry of a command: the environment's settings (:meth:`RegistrySettings.from_environment`)
        with the command's ``overrides``. Every entry point builds its registry here."""
        return cls(RegistrySettings.from_environment(environ, **overrides), environ=environ)

    # -- loading ---------------------------------------------------------------------------

    @property
    def policy(self) -> Policy:
        return self.settings.policy

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        return self._pm

    def load(self) -> list[PluginRecord]:
        """Discover and judge every plugin once; return the load report."""
        with self._lock:
            if not self._loaded:
                self._loaded = True
                libraries = self.settings.library_paths
                candidates = discover(autoload=self.settings.autoload,
                                      environ={ENV_LIBRARY_PATHS: libraries} if libraries else {},
                                      paths=self.settings.paths)
                self._probe_ahead(candidates)
                for candidate in candidates:
                    self._add(candidate)
            return self.records

    @property
    def is_loaded(self) -> bool:
        """Whether discovery has run (:meth:`load`)."""
        return self._loaded

    @property
    def records(self) -> list[PluginRecord]:
        return [e.record for e in self._entries]

    def register(self, obj: Any, name: str) -> PluginRecord:
        """Register a Python plugin object by hand, through the same checks as discovery."""
        with self._lock:
            self.load()
            return self._add(Candidate(name, "python", "registered by hand"), obj=obj)

    def add_candidate(self, candidate: Candidate) -> PluginRecord:
        """Judge and hold a candidate found elsewhere than by discovery (a ``PJRT_Api`` served in
        this process, for one): the same checks, the same kinds of outcome."""
        with self._lock:
            self.load()
            return self._add(candidate)

    # -- selection: block-list, allow-list, duplicates -----------------------------------------

    def _selection_refusal(self, candidate: Candidate, first: Candidate | None) -> tuple[Outcome, str] | None:
        """Why the settings or an earlier plugin of the same name keep this one out, or None.

        ``first`` is the candidate that already holds the name, if any. Every selector that
        names a candidate is remembered, so that :meth:`unmatched` can say which named nothing.
        """
        s = self.settings
        self._matched.update(("disabled", item) for item in s.disabled if selector_matches(item, candidate))
        self._matched.update(("allowed", item) for item in s.allowed or () if selector_matches(item, candidate))
        reason = s.refusal(candidate)
        if reason is not None:
            return Outcome.BLOCKED, reason
        if first is not None:
            return Outcome.DUPLICATE, self._duplicate_reason(candidate, first)
        return None

    @staticmethod
    def _origin(candidate: Candidate) -> str:
        c = candidate
        where = f"distribution {c.distribution} {c.distribution_version}" if c.distribution else c.source
        detail = c.entry_point_text or c.library_path
        return f"{where} ({detail})" if detail else where

    def _duplicate_reason(self, candidate: Candidate, first: Candidate) -> str:
        """The duplicate's reason, with advice that works: a selector naming only the first."""
        name = candidate.name
        text = (f"the name {name!r} is already taken by {self._origin(first)}; this one "
                f"({self._origin(candidate)}) is ignored.")
        qualifier = None
        if first.distribution and (candidate.distribution is None or
                                   canonicalize_name(first.distribution) != canonicalize_name(candidate.distribution)):
            qualifier = first.distribution
        elif first.library_path and first.library_path != candidate.library_path:
            qualifier = first.library_path
        if qualifier is None:
            if first.distribution:
                return (f"{text} Both come from distribution {first.distribution}: uninstall it, or ask its "
                        "maintainers to give its plugins different names.")
            return f"{text} Register one of them under another name."
        block = f"{name.lower()}@{qualifier}"
        advice = f" To use this one instead, block the other with {ENV_DISABLE}={block} (or --disable {block})"
        if first.distribution:
            advice += f", or uninstall {first.distribution}"
        elif first.source.startswith("environment"):
            advice += f", or remove it from {first.source.split()[-1]}"
        return text + advice + "."

    def unmatched(self) -> list[SelectionNote]:
        """The block-list and allow-list entries that named no plugin found, and what that meant."""
        self.load()
        s = self.settings
        names = ", ".join(sorted({e.record.name for e in self._entries})) or "none"
        autoload = "" if s.autoload else (
            f"; autoload is off (--no-autoload or {ENV_AUTOLOAD}=0), so installed plugins were not looked for")
        notes = []

        def nothing(item: str) -> str:
            name, at, where = item.partition("@")
            if at:
                return f"no plugin {name!r} from distribution or library {where!r} was found"
            return "no plugin of that name was found"

        for item in sorted(s.allowed or ()):
            if ("allowed", item) not in self._matched:
                notes.append(SelectionNote("allowed", item, (
                    f"{ENV_ALLOW} or --only names {item}, but {nothing(item)} (plugins found: {names}"
                    f"{autoload})")))
        for item in sorted(s.disabled):
            if ("disabled", item) not in self._matched:
                notes.append(SelectionNote("disabled", item, (
                    f"{ENV_DISABLE} or --disable names {item}, but {nothing(item)}, so it blocked nothing "
                    f"(plugins found: {names})")))
        return notes

    def _add(self, candidate: Candidate, obj: Any = None) -> PluginRecord:
        record = PluginRecord(
            name=candidate.name, kind=candidate.kind, source=candidate.source,
            entry_point=candidate.entry_point_text, distribution=candidate.distribution,
            distribution_version=candidate.distribution_version,
            library_path=candidate.library_path, outcome=Outcome.FAILED,
        )
        entry = _Entry(record, candidate, obj)
        self._entries.append(entry)
        key = candidate.name.lower()
        first = self._by_name.get(key)
        refusal = self._selection_refusal(candidate, None if first is None else first.candidate)
        if refusal is not None:
            self._set(entry, refusal[0], refusal[1])
            return entry.record
        self._by_name[key] = entry
        if candidate.problem:
            self._set(entry, Outcome.FAILED, candidate.problem)
        elif candidate.kind == "python":
            self._load_python(entry)
        else:
            self._load_c(entry)
        return entry.record

    def _set(self, entry: _Entry, outcome: Outcome, reason: str | None = None,
             error: BaseException | None = None, **fields: Any) -> None:
        entry.record = entry.record.model_copy(update={
            "outcome": outcome, "reason": reason,
            "error": None if error is None else _describe(error), **fields,
        })

    def _load_python(self, entry: _Entry) -> None:
        candidate = entry.candidate
        assert candidate is not None
        if entry.obj is None:
            ep = candidate.entry_point
            assert ep is not None
            if self._isolated(candidate):
                problem = self._preflight(candidate)
                if problem is not None:
                    self._set(entry, Outcome.FAILED, problem)
                    return
            try:
                entry.obj = ep.load()
            except (Exception, SystemExit) as exc:  # a plugin's import may raise anything
                self._set(entry, Outcome.FAILED, f"importing {ep.value!r} raised {type(exc).__name__}", exc)
                return
        impls = self._hookimpls(entry.obj)
        if not impls:
            self._set(entry, Outcome.FAILED,
                      f"registers nothing: {entry.obj!r} has no functions marked with "
                      f"pjrt_hub.abi.hookimpl (expected pjrt_hub_declare and pjrt_hub_get_api)")
            return
        unknown = sorted(set(impls) - _HOOK_NAMES)
        if unknown:
            self._set(entry, Outcome.FAILED,
                      f"implements unknown hooks {', '.join(unknown)}; known hooks: "
                      f"{', '.join(sorted(_HOOK_NAMES))}")
            return
        if "pjrt_hub_declare" not in impls:
            self._set(entry, Outcome.FAILED, "registers nothing: it does not implement pjrt_hub_declare")
            return
        try:
            raw = _within(self.settings.probe_timeout, impls["pjrt_hub_declare"])
        except TimeoutError:
            self._set(entry, Outcome.FAILED,
                      f"hook pjrt_hub_declare {_PREFLIGHT_HUNG} {self.settings.probe_timeout:g} s "
                      "(a declaration is data: it must not wait on devices or a network)")
            return
        except (Exception, SystemExit) as exc:
            self._set(entry, Outcome.FAILED, f"hook pjrt_hub_declare raised {type(exc).__name__}", exc)
            return
        if raw is None:
            self._set(entry, Outcome.FAILED, "registers nothing: pjrt_hub_declare returned None")
            return
        try:
            decl = declaration_from_plugin(raw)
        except (ValidationError, TypeError) as exc:
            self._set(entry, Outcome.FAILED, f"declares garbage: {_validation_summary(exc)}", exc)
            return
        entry.declaration = decl
        entry.version = decl.version
        self._set(entry, Outcome.FAILED, api_version=str(decl.version),
                  platform_name=decl.platform_name, extensions=dict(decl.extensions))
        if not self._judge(entry, decl.version, "python", decl.min_framework,
                           decl.framework_requires, decl.extensions):
            return
        try:
            self._pm.register(entry.obj, name=candidate.name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            self._set(entry, Outcome.FAILED, "pluggy refused to register it", exc)
            return
        self._set(entry, Outcome.LOADED, entry.record.verdict.reasons[0] if entry.record.verdict else None)

    # -- C libraries -------------------------------------------------------------------------

    def loader_manager(self) -> pluggy.PluginManager:
        """The loaders of PJRT C libraries, from entry points in ``pjrt_hub.loaders``."""
        with self._lock:
            if self._loaders is None:
                pm = pluggy.PluginManager(PROJECT)
                pm.add_hookspecs(hookspecs)
                for ep in md.entry_points(group=LOADER_GROUP):
                    try:
                        pm.register(ep.load(), name=f"loader:{ep.name}")
                    except (Exception, SystemExit) as exc:
                        self._loader_problems.append(f"loader {ep.name} ({ep.value}) failed: {_describe(exc)}")
                self._loaders = pm
            return self._loaders

    def add_loader(self, obj: Any, name: str) -> None:
        """Register a loader of C libraries by hand (before :meth:`load`)."""
        self.loader_manager().register(obj, name=f"loader:{name}")

    def _probe(self, path: str, loaders: pluggy.PluginManager | None = None
               ) -> tuple[ProbeReport | Mapping[str, Any] | None, BaseException | None]:
        """Ask the loaders to probe a library: ``(answer, None)``, or ``(None, what it raised)``.
        Worker threads get ``loaders`` handed to them: the registry's lock is held by load()."""
        pm = loaders if loaders is not None else self.loader_manager()
        try:
            return pm.hook.pjrt_hub_probe_library(path=path, timeout=self.settings.probe_timeout), None
        except Exception as exc:  # a loader's bug must not take the registry down either
            return None, exc

    def _probe_ahead(self, candidates: Sequence[Candidate]) -> None:
        """Probe, in parallel, every C library that the selection will let through.

        A probe is a child process (or a cache read), so threads overlap them well; each answer
        is then used in discovery order by :meth:`_load_c`, and the report is the same as if
        they had run one by one.
        """
        holders: dict[str, Candidate] = {}
        paths: list[str] = []
        for candidate in candidates:
            key = candidate.name.lower()
            if self._selection_refusal(candidate, holders.get(key)) is not None:
                continue
            holders[key] = candidate
            if candidate.kind == "c" and not candidate.problem and candidate.library_path:
                paths.append(candidate.library_path)
        paths = list(dict.fromkeys(paths))
        isolated = [c for c in holders.values() if self._isolated(c)]
        if len(paths) + len(isolated) < 2:
            return  # nothing to overlap; _load_c probes it, _load_python preflights it
        loaders = self.loader_manager() if paths else None
        pending: Iterator[str | Candidate] = iter([*paths, *isolated])
        taking = threading.Lock()

        def work() -> None:
            # A few threads take paths in turn (importing concurrent.futures would slow ``list``);
            # _probe and preflight never raise.
            while True:
                with taking:
                    job = next(pending, None)
                if job is None:
                    return
                if isinstance(job, str):
                    self._probes[job] = self._probe(job, loaders)
                else:
                    self._preflight(job)

        workers = [threading.Thread(target=work, name=f"pjrt-hub-probe-{i}", daemon=True)
                   for i in range(min(len(paths) + len(isolated), max(2, os.cpu_count() or 2), 8))]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()

    def _preflight(self, candidate: Candidate) -> str | None:
        """:func:`preflight` of an isolated Python candidate, once (gathered ahead with the
        probes, or when it is loaded)."""
        key = candidate.entry_point_text or ""
        if key not in self._preflights:
            assert candidate.entry_point is not None
            self._preflights[key] = preflight(candidate.entry_point, self.settings.probe_timeout)
        return self._preflights[key]

    def _isolated(self, candidate: Candidate) -> bool:
        """Whether this Python candidate is imported in a child process first (isolate_python):
        an entry point of another distribution than pjrt-hub's own (its built-in plugins)."""
        ep = candidate.entry_point
        return (self.settings.isolate_python and candidate.kind == "python" and ep is not None
                and not candidate.problem and not ep.value.startswith(_OWN_MODULE))

    def _load_c(self, entry: _Entry) -> None:
        path = entry.record.library_path
        assert path is not None
        ahead = self._probes.get(path)
        answer, raised = ahead if ahead is not None else self._probe(path)
        if raised is not None:
            detail = " ".join(f"{type(raised).__name__}: {raised}".split())[:300]
            self._set(entry, Outcome.FAILED, f"the library loader raised while probing it ({detail})", raised)
            return
        if answer is None:
            loaders = [n.removeprefix("loader:") for n, _ in self.loader_manager().list_name_plugin()]
            problems = "; ".join(self._loader_problems) or _not_a_library(path) or (
                f"no installed loader reads it ({', '.join(loaders)}): is it a PJRT plugin's shared library?"
                if loaders else f"no loader is installed ({LOADER_GROUP})")
            self._set(entry, Outcome.FOUND, f"C plugin found but not probed: {problems}")
            return
        try:
            probe = ProbeReport.from_loader(answer, path=path, name=entry.record.name)
        except (ValidationError, TypeError) as exc:
            self._set(entry, Outcome.FAILED, f"the library loader's answer is malformed: {_validation_summary(exc)}",
                      exc)
            return
        entry.probe = probe
        details = _probe_details(probe)
        if probe.outcome != "ok":
            self._set(entry, Outcome.FAILED, f"probing {path} failed ({probe.outcome}): {probe.reason or ''}"
                      .rstrip(": "), details=details)
            return
        try:
            version = ApiVersion.parse(str(probe.api_version))
        except ValueError as exc:
            self._set(entry, Outcome.FAILED, f"the library reports a malformed API version: {exc}",
                      details=details)
            return
        offered = {}
        for node in probe.extensions:
            spec = extension_spec(node.type)
            if spec is not None:
                offered[spec.name] = version_from_struct_size(spec, node.struct_size or 0)
        entry.version = version
        self._set(entry, Outcome.FAILED, api_version=str(version), extensions=offered,
                  platform_name=probe.platform_name, details=details)
        if not self._judge(entry, version, "c", None, (), offered):
            return
        how = ("probe read from the cache (the library is unchanged)" if probe.probe_cache == "hit"
               else "probed in a subprocess")
        assert entry.record.verdict is not None  # _judge records one
        self._set(entry, Outcome.LOADED, f"{how}; " + entry.record.verdict.reasons[0],
                  verdict=entry.record.verdict, negotiation=entry.record.negotiation,
                  warnings=entry.record.warnings)

    def _hookimpls(self, obj: Any) -> dict[str, Any]:
        found = {}
        for name in dir(obj):
            if not name.startswith("pjrt_hub_"):
                continue
            try:
                value = getattr(obj, name)
            except Exception:  # a property of a hostile plugin object
                continue
            if self._pm.parse_hookimpl_opts(obj, name) is not None and callable(value):
                found[name] = value
        return found

    def _judge(self, entry: _Entry, version: ApiVersion, kind: PluginKind, min_framework: ApiVersion | None,
               requires: Iterable[str], offered: Mapping[str, int]) -> bool:
        """Version policy, distribution pins, extension negotiation; False if refused."""
        record = entry.record
        verdict = judge(version, self.policy, kind=kind,
                        min_framework=min_framework, name=record.name, distribution=record.distribution)
        entry.verdict = verdict
        self._set(entry, Outcome.FAILED, verdict=VerdictModel(
            accepted=verdict.accepted, rule=verdict.rule, reasons=list(verdict.reasons),
            gated_calls=list(verdict.gated_calls),
            call_limit=None if verdict.call_limit is None else f"{version.major}.{verdict.call_limit}"))
        if not verdict.accepted:
            self._set(entry, Outcome.INCOMPATIBLE, verdict.reasons[0], verdict=entry.record.verdict)
            return False
        distribution_requires = entry.candidate.requires if entry.candidate is not None else ()
        pin_problems = self._pin_problems(record, [*requires, *distribution_requires])
        if pin_problems:
            self._set(entry, Outcome.INCOMPATIBLE, "; ".join(pin_problems), verdict=entry.record.verdict)
            return False
        agreement = negotiate(offered, self.settings.extension_requests, plugin=f"plugin {record.name}")
        self._set(entry, Outcome.FAILED, verdict=entry.record.verdict,
                  negotiation=_negotiation_model(agreement),
                  warnings=list(record.warnings) + list(agreement.degraded))
        for message in agreement.degraded:
            warnings.warn(message, ExtensionWarning, stacklevel=2)
        if not agreement.accepted:
            self._set(entry, Outcome.INCOMPATIBLE, "; ".join(agreement.refusals),
                      verdict=entry.record.verdict, negotiation=entry.record.negotiation,
                      warnings=entry.record.warnings)
            return False
        return True

    def _pin_problems(self, record: PluginRecord, requirements: Iterable[str]) -> list[str]:
        """Pins on framework distributions (declared, or the plugin distribution's Requires-Dist)."""
        problems = []
        for text in dict.fromkeys(requirements):
            named = _REQUIREMENT_NAME.match(text)
            if named is None or canonicalize_name(named.group(1)) not in FRAMEWORK_DISTRIBUTIONS:
                continue
            if _EXTRA_MARKER.search(text.partition(";")[2]):
                # A requirement of an optional extra (pjrt-hub's own `jax` extra, say) pins nothing
                # for the plugin itself; skipping it here keeps packaging's parser out of `list`.
                continue
            from packaging.requirements import InvalidRequirement, Requirement

            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue  # a malformed Requires-Dist line names no framework pin we can check
            name = canonicalize_name(req.name)
            if name not in FRAMEWORK_DISTRIBUTIONS:
                continue
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            installed = _installed_version(name)
            if installed is None:
                if name == "pjrt-hub":
                    problems.append(f"plugin {record.name} requires {text}, but pjrt-hub's own "
                                    "distribution metadata is missing (is it installed?)")
                continue
            if not req.specifier.contains(installed, prereleases=True):
                problems.append(
                    f"plugin {record.name} requires {text}, but {name} {installed} is installed: "
                    f"install {name}{req.specifier} or a release of "
                    f"{record.distribution or record.name} that accepts {name} {installed}")
        return problems

    # -- using plugins ---------------------------------------------------------------------

    def _entry(self, name: str) -> _Entry:
        self.load()
        key = name.lower()
        entry = self._by_name.get(key) or next((e for e in self._entries if e.record.name.lower() == key), None)
        if entry is None:
            known = ", ".join(sorted(e.record.name for e in self._entries)) or "(none)"
            raise NotFound(f"no plugin named {name!r}; plugins found: {known}")
        return entry

    def record(self, name: str) -> PluginRecord:
        """The load record of a plugin by name; NotFound lists the names there are."""
        return self._entry(name).record

    def current_record(self, name: str) -> PluginRecord:
        """The record as it is now, read without the registry's lock, which a plugin call may
        hold for as long as it hangs (``pjrt_hub_get_api``, ``plugin_initialize``). NotFound
        lists the names there are."""
        entry = self._by_name.get(name.lower()) if self._loaded else None
        return entry.record if entry is not None else self.record(name)

    def probe_report(self, name: str) -> ProbeReport | None:
        """What the loader read of a C plugin's library (None for a Python plugin, or a library
        no loader answered for). NotFound lists the names there are."""
        return self._entry(name).probe

    def declaration(self, name: str) -> DeclarationModel | None:
        """What a Python plugin declared (``pjrt_hub_declare``, called once, when it was loaded),
        validated; None for a C plugin, or one whose declaration could not be read (its record
        says why). NotFound lists the names there are."""
        return self._entry(name).declaration

    def require(self, names: Sequence[str]) -> None:
        """Raise for the first named plugin that is not loaded, with the recorded reason."""
        for name in names:
            record = self.record(name)
            if record.outcome is not Outcome.LOADED:
                error_cls = VersionError if record.outcome is Outcome.INCOMPATIBLE else PluginLoadError
                raise error_cls(record.name, f"{record.outcome.value}: {record.reason}")

    def api(self, name: str | None = None) -> Gated | Api:
        """The plugin's API object, seen through the version gate (the object itself when the
        gate has nothing to refuse: see :func:`pjrt_hub.gate`)."""
        name = name or self.settings.default_plugin or DEFAULT_PLUGIN
        self.require([name])
        entry = self._by_name[name.lower()]
        with self._lock:
            if entry.gated is None:
                entry.api = self._make_api(entry)
                assert entry.version is not None and entry.verdict is not None
                limit = entry.verdict.call_limit
                assert limit is not None
                entry.gated = gate(entry.api, plugin=entry.record.name, plugin_version=entry.version,
                                   call_limit=limit)
            return entry.gated

    def _make_api(self, entry: _Entry) -> Api:
        name = entry.record.name
        if entry.record.kind == "c":
            path = entry.record.library_path
            try:
                api = self.loader_manager().hook.pjrt_hub_load_library(path=path, name=name)
            except Exception as exc:
                raise PluginLoadError(name, f"loading {path} raised {_describe(exc)}") from exc
            if api is None:
                raise PluginLoadError(name, f"no loader could load {path}")
            return api
        impls = self._hookimpls(entry.obj)
        if "pjrt_hub_get_api" not in impls:
            raise PluginValidationError(name, "does not implement pjrt_hub_get_api, so it has no API to use")
        try:
            api = impls["pjrt_hub_get_api"]()
        except Exception as exc:
            self._set(entry, Outcome.FAILED, f"hook pjrt_hub_get_api raised {type(exc).__name__}", exc)
            raise PluginLoadError(name, f"pjrt_hub_get_api raised {_describe(exc)}") from exc
        if not isinstance(api, Api):
            problem = f"pjrt_hub_get_api returned {type(api).__name__}, expected a pjrt_hub.abi.Api"
        else:
            reported = ApiVersion.parse(api.api_version())
            if reported == entry.version:
                return api
            problem = (f"declared PJRT API {entry.version} but its Api reports {reported}; the "
                       "declaration must tell the truth about the version")
        # Recorded, as a raising hook is: the plugin cannot be used, and every later call says why.
        self._set(entry, Outcome.FAILED, problem)
        raise PluginValidationError(name, problem)

    def isolated(self, name: str) -> bool:
        """Whether this plugin is a Python plugin the registry imported in a child process first
        (``isolate_python``): one of another distribution than pjrt-hub."""
        entry = self._entry(name)
        return entry.candidate is not None and self._isolated(entry.candidate)

    def preflight_client(self, name: str, timeout: float) -> str | None:
        """Create a client of an isolated Python plugin (:meth:`isolated`) in a child process
        first. If that ends the process (``os._exit``, a crash in the plugin's runtime), the
        plugin is recorded as failed and the reason returned, as it is when the creation does
        not return within ``timeout`` s; otherwise None (a raised error is the caller's to meet)."""
        entry = self._entry(name)
        if entry.record.outcome is not Outcome.LOADED or not self.isolated(name):
            return None
        policy = self.settings.policy
        # The child judges the plugin's version as this registry does (a plugin accepted only
        # through --window-weeks, --floor-minor or the dates given must be accepted there too,
        # or its client would be created here unprotected).
        cmd = [sys.executable, "-m", _PREFLIGHT_CHILD, "client", entry.record.name, str(policy.framework),
               str(policy.window_weeks), str(policy.floor_minor), "1" if policy.strict else "0",
               "" if policy.dates is None else policy.dates.to_json()]
        try:
            done = _run_child(cmd, timeout)
        except subprocess.TimeoutExpired:
            reason = (f"creating a client did not return within {timeout:g} s (in a child process, where "
                      "pjrt-hub creates one first)")
        except OSError:
            return None
        else:
            if _PREFLIGHT_DONE in done.stdout.splitlines():
                return None
            reason = (f"creating a client ended the process: a child process doing it {_how_it_ended(done)} "
                      "(pjrt-hub creates one there first, so that a plugin that ends its process fails alone)")
        self._set(entry, Outcome.FAILED, reason)
        return reason

    def client_creation_risk(self, name: str) -> str | None:
        """Why creating a client for this plugin is unsafe here, or None."""
        entry = self._by_name[self.record(name).name.lower()]
        if entry.declaration is not None and entry.declaration.needs_hardware:
            return "it declares that creating a client needs hardware or a network that may be absent"
        return entry.probe.client_creation_risk if entry.probe is not None else None

    def create_client(self, name: str | None = None, options: Mapping[str, Any] | None = None, *,
                      allow_hardware: bool = False) -> Gated | Client:
        """Initialize the plugin (once) and create a client, through the version gate."""
        name = name or self.settings.default_plugin or DEFAULT_PLUGIN
        self.require([name])
        entry = self._by_name[name.lower()]
        risk = self.client_creation_risk(name)
        if risk and not allow_hardware:
            raise Unavailable(
                f"plugin {entry.record.name}: {risk}; pjrt-hub read its version only and did not "
                "create a client (pass allow_hardware=True, or --allow-hardware, to do it anyway)",
                plugin=entry.record.name)
        if entry.candidate is not None and entry.candidate.create_options:
            options = {**entry.candidate.create_options, **dict(options or {})}
        api = self.api(name)
        with self._lock:
            if not entry.initialized:
                api.plugin_initialize()
                entry.initialized = True
        return api.client_create(dict(options or {}))


def _validation_summary(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ())) or "declaration"
            parts.append(f"{where}: {err.get('msg')} (got {err.get('input')!r})")
        return "; ".join(parts)
    return str(exc)


def _probe_details(probe: ProbeReport) -> dict[str, Any]:
    """A probe report as the record's JSON ``details`` (``list --json``): every field, and
    ``message``, the hook's older name of ``reason``, which readers of that JSON may know."""
    return {**probe.model_dump(mode="json"), "message": probe.reason or ""}


def _negotiation_model(n: Negotiation) -> NegotiationModel:
    return NegotiationModel(agreed=dict(n.agreed), degraded=list(n.degraded), refusals=list(n.refusals))
