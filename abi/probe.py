"""What a loader reads of a PJRT C library without loading it into the host: :class:`ProbeReport`.

The answer of the ``pjrt_hub_probe_library`` hook (:mod:`.hookspecs`), and so part of the contract
between the host and its loaders, the way :class:`~.declaration.PluginDeclaration` is between the
host and Python plugins: the registry judges the library from it, the CLI prints it, the
conformance suite checks the ``PJRT_Api`` table against it. It is a pydantic model because it
leaves the probing process as JSON and is cached on disk. Not imported by ``pjrt_hub.abi`` itself
(a Python plugin needs none of it): ``from pjrt_hub.abi.probe import ProbeReport``.

Fields (all but ``path``, ``name`` and ``outcome`` may be None when the probe stopped earlier):

* ``outcome``: ``ok``, ``load_failed`` (``reason`` is the loader's message, e.g. a missing
  ``libcupti.so.12``), ``no_symbol`` (no ``GetPjrtApi``), ``crashed`` (``signal`` names it, e.g.
  ``SIGSEGV``), ``aborted`` (SIGABRT), ``timed_out``, ``bad_layout`` (``PJRT_Api`` is not
  readable as one: NULL, garbage version or struct_size).
* ``stage``: the last stage the child reached (``elf``, ``dlopen``, ``GetPjrtApi``, ``header``,
  ``functions``, ``extensions``, ``initialize``, ``attributes``, ``done``).
* ``api_version``/``api_major``/``api_minor``; ``api_struct_size`` and ``num_slots``
  (``(struct_size - 40) / 8``); ``expected_slots`` (what the history says that minor reports);
  ``version_struct_size`` (``PJRT_Api_Version.struct_size``, 24 when the plugin sets it).
* ``functions``: the PJRT functions in the plugin's table (non-NULL), in slot order, named by the
  history for its minor; ``null_functions``: slots left NULL; ``unnamed_slots``: slots past the
  newest table pjrt-hub knows.
* ``extension_layout`` (``none``, ``type_next`` before 0.45, ``struct_size_type_next``),
  ``extensions`` (type id, name, struct_size, in chain order), ``extension_walk_stopped``.
* ``attributes`` (``PJRT_Plugin_Attributes`` as a dict of str/int/list/float/bool) or
  ``attributes_error``; ``initialized`` says whether ``PJRT_Plugin_Initialize`` ran first.
* ``exports`` (PJRT symbols the file exports), ``needed`` (its DT_NEEDED libraries), ``machine``.
* ``warnings``: oddities that do not stop the probe; ``stderr_tail``: the child's last stderr lines;
  ``stderr_highlights``: stderr lines that look like the reason (an abort message such as
  ``TT_FATAL``, a failed check), which a stack trace would otherwise bury; ``exit_code``;
  ``elapsed_s``.
* ``platform_name``, ``client_creation_risk`` and ``probe_cache``: what the loader adds.
* ``served_plugin``, ``via``, ``jax_backend``, ``declared_limitations``: a struct pjrt-hub serves in
  this process (:mod:`pjrt_hub.backends.c_api.served`): which plugin, for which transport, and the
  limitations that plugin declares, which the conformance suite applies to the struct too.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from .declaration import Limitation

__all__ = ["ExtensionReport", "ProbeCacheStatus", "ProbeOutcome", "ProbeReport"]

ProbeOutcome = Literal["ok", "load_failed", "no_symbol", "crashed", "aborted", "timed_out", "bad_layout"]
ProbeCacheStatus = Literal["hit", "stored", "not stored", "off"]


class ExtensionReport(BaseModel):
    # Validators are built on first use: pjrt-hub list imports this module on every run.
    model_config = ConfigDict(defer_build=True)

    type: int
    name: str
    struct_size: int | None = None


class ProbeReport(BaseModel):
    """What a loader learned about one plugin library (see the module docstring for each field).
    Keys a loader adds beyond these are kept (``extra="allow"``) and reported as they are."""

    model_config = ConfigDict(defer_build=True, extra="allow")

    path: str = Field(description="the plugin library probed (absolute path)")
    name: str = Field(description="plugin name from the file name (libtt.so -> tt)")
    outcome: ProbeOutcome = Field(description="ok, load_failed, no_symbol, crashed, aborted, timed_out or bad_layout")
    reason: str | None = Field(None, validation_alias=AliasChoices("reason", "message"),
                               description="why the outcome is not ok (loader message, signal, ...); a mapping "
                               "may call it message")
    stage: str | None = Field(None, description="last stage reached: elf, dlopen, GetPjrtApi, header, "
                              "functions, extensions, initialize, attributes, done")
    signal: str | None = Field(None, description="the signal that ended the child (SIGSEGV, SIGABRT, ...)")
    exit_code: int | None = Field(None, description="the child's exit status (negative: killed by a signal)")
    elapsed_s: float | None = Field(None, description="wall time of the probe, child start included")
    machine: str | None = Field(None, description="ELF machine of the library (x86_64, aarch64)")
    exports: list[str] = Field(default_factory=list, description="exported symbols with 'pjrt' in the name")
    needed: list[str] = Field(default_factory=list, description="DT_NEEDED libraries of the file")
    api_version: str | None = Field(None, description="PJRT C API version the plugin was built with ('0.81')")
    api_major: int | None = None
    api_minor: int | None = None
    api_struct_size: int | None = Field(None, description="PJRT_Api.struct_size")
    version_struct_size: int | None = Field(None, description="PJRT_Api_Version.struct_size (24 when set)")
    num_slots: int | None = Field(None, description="function slots: (struct_size - 40) / 8")
    expected_slots: int | None = Field(None, description="slots the history says this minor reports")
    slot_layout_verified: bool | None = Field(None, description="false for minors whose slot order is "
                                              "unknown (0.56)")
    functions: list[str] = Field(default_factory=list, description="PJRT functions present (non-NULL), "
                                 "in slot order")
    null_functions: list[str] = Field(default_factory=list, description="functions whose slot is NULL")
    unnamed_slots: int = Field(0, description="slots past the newest table pjrt-hub knows")
    extension_layout: str | None = Field(None, description="none (before 0.31), type_next (before 0.45) "
                                         "or struct_size_type_next")
    extensions: list[ExtensionReport] = Field(default_factory=list, description="extension chain in order")
    extension_walk_stopped: str | None = Field(None, description="why the chain walk stopped early")
    initialized: bool = Field(False, description="whether PJRT_Plugin_Initialize ran before the attributes")
    attributes: dict[str, Any] | None = Field(None, description="PJRT_Plugin_Attributes by name")
    attributes_error: str | None = None
    warnings: list[str] = Field(default_factory=list, description="oddities that did not stop the probe")
    stderr_tail: str | None = Field(None, description="last lines the child wrote to stderr")
    stderr_highlights: list[str] = Field(default_factory=list, description="stderr lines that look like "
                                         "the reason (FATAL, Check failed, terminate called, error: ...)")
    # What the loader adds to what it read of the library.
    platform_name: str | None = Field(None, description="the platform the library reports, where the loader "
                                      "reads one without creating a client")
    client_creation_risk: str | None = Field(None, description="why creating a client here is unsafe (hardware, "
                                             "network), or None")
    probe_cache: ProbeCacheStatus | None = Field(None, description="hit, stored, not stored, or off (the C "
                                                 "bridge's probe cache)")
    # A PJRT_Api served in this process by pjrt-hub (pjrt_hub.backends.c_api.served).
    served_plugin: str | None = Field(None, description="the Python plugin the struct serves")
    via: str | None = Field(None, description="the transport it is served for: c_api or jax")
    jax_backend: str | None = Field(None, description="the JAX backend the struct is registered as")
    declared_limitations: list[Limitation] = Field(default_factory=list,
                                                   description="the limitations the served plugin declares")

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def extension_names(self) -> list[str]:
        return [ext.name for ext in self.extensions]

    @classmethod
    def from_loader(cls, answer: "ProbeReport | Mapping[str, Any]", *, path: str, name: str) -> "ProbeReport":
        """A loader's answer to ``pjrt_hub_probe_library`` as a report: a ProbeReport as it is, a
        mapping validated (with the library's ``path`` and ``name`` where it gives none).
        ValidationError (a ValueError) says which field is wrong."""
        if isinstance(answer, ProbeReport):
            return answer
        if not isinstance(answer, Mapping):
            raise TypeError(f"a probe answer is a ProbeReport or a mapping, not {type(answer).__name__}")
        return cls.model_validate({"path": path, "name": name, **answer})
