"""The registry: discover plugins, judge them, register the accepted ones with pluggy.

Every candidate gets exactly one outcome in the load report (loaded, found, incompatible,
blocked, duplicate, failed) with its reason. Nothing a plugin does while being discovered or
declared (an import that raises, a hook that raises, garbage in its declaration) escapes into the
host: it is recorded, and every other plugin still loads. Failures are raised only when asked
for: :meth:`PluginRegistry.require` for plugins the user named, or strict loading.

The version is read and judged before ``PluginManager.register()``, so a skewed plugin is refused
with a version message rather than a hook-validation error.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import pluggy
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import ValidationError

from pjrt_hub.abi import (
    PROJECT,
    Api,
    ApiVersion,
    NotFound,
    PluginLoadError,
    PluginValidationError,
    Unavailable,
    VersionError,
    hookspecs,
)
from pjrt_hub.extensions import (
    ExtensionRequest,
    ExtensionWarning,
    Negotiation,
    extension_spec,
    negotiate,
    version_from_struct_size,
)

from ._discovery import Candidate, discover
from ._facade import Gated, gate
from ._policy import Policy, Verdict, judge
from ._reports import (
    DeclarationModel,
    NegotiationModel,
    Outcome,
    PluginRecord,
    VerdictModel,
    declaration_from_plugin,
)

__all__ = ["PluginRegistry", "RegistrySettings", "default_plugin_name"]

ENV_DISABLE = "PJRT_HUB_DISABLE_PLUGINS"
ENV_ALLOW = "PJRT_HUB_PLUGINS"
ENV_AUTOLOAD = "PJRT_HUB_PLUGIN_AUTOLOAD"
ENV_DEVICE = "PJRT_DEVICE"
LOADER_GROUP = "pjrt_hub.loaders"
DEFAULT_PLUGIN = "numba_cpu"

#: Distributions that play the framework's part; a plugin's pin on one of them is checked.
FRAMEWORK_DISTRIBUTIONS = ("pjrt-hub", "jax", "jaxlib", "torch-xla")

_HOOK_NAMES = frozenset(n for n in dir(hookspecs) if n.startswith("pjrt_hub_"))


def _names(text: str | None) -> frozenset[str]:
    return frozenset(p.strip().lower() for p in (text or "").split(",") if p.strip())


def default_plugin_name(environ: Mapping[str, str] | None = None) -> str:
    """The plugin commands run on when none is named: ``PJRT_DEVICE`` (as in PyTorch/XLA), else numba_cpu."""
    env = os.environ if environ is None else environ
    return env.get(ENV_DEVICE, "").strip().lower() or DEFAULT_PLUGIN


@dataclass(frozen=True)
class RegistrySettings:
    """Which plugins to consider, and how."""

    policy: Policy = field(default_factory=Policy)
    extension_requests: tuple[ExtensionRequest, ...] = ()
    #: Names never loaded (``PJRT_HUB_DISABLE_PLUGINS=a,b``).
    disabled: frozenset[str] = frozenset()
    #: If set, only these names are loaded (``PJRT_HUB_PLUGINS=a,b``).
    allowed: frozenset[str] | None = None
    #: Read entry points (``PJRT_HUB_PLUGIN_AUTOLOAD=0`` turns it off).
    autoload: bool = True
    #: Extra C plugin library paths (``pjrt-hub probe PATH``, ``--plugin PATH``).
    paths: tuple[str, ...] = ()
    #: Seconds a C library may take to be probed (a cold first load of a 250 MB plugin is slow).
    probe_timeout: float = 120.0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "RegistrySettings":
        env = os.environ if environ is None else environ
        allowed = _names(env.get(ENV_ALLOW)) or None
        autoload = env.get(ENV_AUTOLOAD, "1").strip().lower() not in {"0", "false", "no", "off"}
        values: dict[str, Any] = {"disabled": _names(env.get(ENV_DISABLE)), "allowed": allowed,
                                  "autoload": autoload}
        values.update(overrides)
        return cls(**values)


@dataclass
class _Entry:
    """A loaded plugin as the registry holds it."""

    record: PluginRecord
    candidate: Candidate | None
    obj: Any = None
    declaration: DeclarationModel | None = None
    version: ApiVersion | None = None
    verdict: Verdict | None = None
    api: Any = None
    #: ``api`` behind the version gate, built once (the gate caches a proxy class per plugin class).
    gated: Gated | None = None
    details: dict[str, Any] = field(default_factory=dict)


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _installed_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


class PluginRegistry:
    """Finds, judges and holds plugins. Pass it around; there is no global instance."""

    def __init__(self, settings: RegistrySettings | None = None, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings or RegistrySettings.from_environment(environ)
        self._environ = dict(os.environ if environ is None else environ)
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._entries: list[_Entry] = []
        self._by_name: dict[str, _Entry] = {}
        self._loaded = False
        self._lock = threading.RLock()
        self._loaders: pluggy.PluginManager | None = None
        self._loader_problems: list[str] = []

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
                for candidate in discover(autoload=self.settings.autoload, environ=self._environ,
                                          paths=self.settings.paths):
                    self._add(candidate)
            return self.records

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
        s = self.settings
        if key in s.disabled:
            self._set(entry, Outcome.BLOCKED, f"blocked by {ENV_DISABLE} (or --disable)")
            return entry.record
        if s.allowed is not None and key not in s.allowed:
            self._set(entry, Outcome.BLOCKED,
                      f"not in the allow-list {ENV_ALLOW}={','.join(sorted(s.allowed))}")
            return entry.record
        first = self._by_name.get(key)
        if first is not None:
            self._set(entry, Outcome.DUPLICATE, (
                f"the name {candidate.name!r} is already taken by {self._origin(first)}; this one "
                f"({self._origin(entry)}) is ignored. Uninstall one of them or block one with "
                f"{ENV_DISABLE}."))
            return entry.record
        self._by_name[key] = entry
        if candidate.problem:
            self._set(entry, Outcome.FAILED, candidate.problem)
        elif candidate.kind == "python":
            self._load_python(entry)
        else:
            self._load_c(entry)
        return entry.record

    @staticmethod
    def _origin(entry: _Entry) -> str:
        r = entry.record
        where = f"distribution {r.distribution} {r.distribution_version}" if r.distribution else r.source
        detail = r.entry_point or r.library_path
        return f"{where} ({detail})" if detail else where

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
            raw = impls["pjrt_hub_declare"]()
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

    def _load_c(self, entry: _Entry) -> None:
        path = entry.record.library_path
        assert path is not None
        pm = self.loader_manager()
        try:
            probe = pm.hook.pjrt_hub_probe_library(path=path, timeout=self.settings.probe_timeout)
        except Exception as exc:  # a loader's bug must not take the registry down either
            self._set(entry, Outcome.FAILED, "the library loader raised while probing it", exc)
            return
        if probe is None:
            loaders = [n.removeprefix("loader:") for n, _ in pm.list_name_plugin()]
            problems = "; ".join(self._loader_problems) or (
                f"no installed loader reads it ({', '.join(loaders)}): is it a PJRT plugin's shared library?"
                if loaders else f"no loader is installed ({LOADER_GROUP})")
            self._set(entry, Outcome.FOUND, f"C plugin found but not probed: {problems}")
            return
        details = dict(probe)
        entry.details["probe"] = details
        outcome, message = details.get("outcome"), details.get("message") or ""
        if outcome != "ok":
            self._set(entry, Outcome.FAILED, f"probing {path} failed ({outcome}): {message}".rstrip(": "),
                      details=details)
            return
        try:
            version = ApiVersion.parse(str(details.get("api_version")))
        except ValueError as exc:
            self._set(entry, Outcome.FAILED, f"the library reports a malformed API version: {exc}",
                      details=details)
            return
        offered = {}
        for node in details.get("extensions") or ():
            spec = extension_spec(node.get("type", -1)) if isinstance(node, dict) else None
            if spec is not None:
                offered[spec.name] = version_from_struct_size(spec, int(node.get("struct_size") or 0))
        entry.version = version
        self._set(entry, Outcome.FAILED, api_version=str(version), extensions=offered,
                  platform_name=details.get("platform_name"), details=details)
        if not self._judge(entry, version, "c", None, (), offered):
            return
        self._set(entry, Outcome.LOADED, "probed in a subprocess; " + entry.record.verdict.reasons[0],
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

    def _judge(self, entry: _Entry, version: ApiVersion, kind: str, min_framework: ApiVersion | None,
               requires: Iterable[str], offered: Mapping[str, int]) -> bool:
        """Version policy, distribution pins, extension negotiation; False if refused."""
        record = entry.record
        verdict = judge(version, self.policy, kind=kind,  # type: ignore[arg-type]
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

    def record(self, name: str) -> PluginRecord:
        """The load record of a plugin by name; NotFound lists the names there are."""
        self.load()
        key = name.lower()
        entry = self._by_name.get(key) or next((e for e in self._entries if e.record.name.lower() == key), None)
        if entry is None:
            known = ", ".join(sorted(e.record.name for e in self._entries)) or "(none)"
            raise NotFound(f"no plugin named {name!r}; plugins found: {known}")
        return entry.record

    def require(self, names: Sequence[str]) -> None:
        """Raise for the first named plugin that is not loaded, with the recorded reason."""
        for name in names:
            record = self.record(name)
            if record.outcome is not Outcome.LOADED:
                error_cls = VersionError if record.outcome is Outcome.INCOMPATIBLE else PluginLoadError
                raise error_cls(record.name, f"{record.outcome.value}: {record.reason}")

    def api(self, name: str | None = None) -> Gated:
        """The plugin's API object, seen through the version gate."""
        name = name or default_plugin_name(self._environ)
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
            raise PluginValidationError(
                name, f"pjrt_hub_get_api returned {type(api).__name__}, expected a pjrt_hub.abi.Api")
        reported = ApiVersion.parse(api.api_version())
        if reported != entry.version:
            raise PluginValidationError(
                name, f"declared PJRT API {entry.version} but its Api reports {reported}; the "
                "declaration must tell the truth about the version")
        return api

    def client_creation_risk(self, name: str) -> str | None:
        """Why creating a client for this plugin is unsafe here, or None."""
        entry = self._by_name[self.record(name).name.lower()]
        if entry.declaration is not None and entry.declaration.needs_hardware:
            return "it declares that creating a client needs hardware or a network that may be absent"
        probe = entry.details.get("probe") or {}
        return probe.get("client_creation_risk") or None

    def create_client(self, name: str | None = None, options: Mapping[str, Any] | None = None, *,
                      allow_hardware: bool = False) -> Gated:
        """Initialize the plugin (once) and create a client, through the version gate."""
        name = name or default_plugin_name(self._environ)
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
            if not entry.details.get("initialized"):
                api.plugin_initialize()
                entry.details["initialized"] = True
        return api.client_create(dict(options or {}))


def _validation_summary(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ())) or "declaration"
            parts.append(f"{where}: {err.get('msg')} (got {err.get('input')!r})")
        return "; ".join(parts)
    return str(exc)


def _negotiation_model(n: Negotiation) -> NegotiationModel:
    return NegotiationModel(agreed=dict(n.agreed), degraded=list(n.degraded), refusals=list(n.refusals))
