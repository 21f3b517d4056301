"""The child processes of the registry's pre-flights (:func:`pjrt_hub._registry.preflight` and
``PluginRegistry.preflight_client``): ``python -m pjrt_hub._preflight_child import NAME VALUE
GROUP TIMEOUT`` imports a Python plugin's entry point and declares it; ``... client NAME
FRAMEWORK WINDOW FLOOR STRICT DATES`` creates a client of it, judged by the same policy.

A plugin may end the process, hang or print: so the child writes its answers to file descriptor
1 directly, each on a line of its own (a plugin may print without a newline, or replace
sys.stdout), and ends with ``os._exit`` once it has answered (a plugin's threads or exit handlers
must not hold it up). The parent reads only the lines it knows (:data:`DONE`, ...).
"""

from __future__ import annotations

import os
import sys

#: What a child prints when it got through, and after the import.
DONE = "pjrt-hub-preflight: done"
IMPORTED = "pjrt-hub-preflight: imported"
#: How the record of a ``pjrt_hub_declare`` that never returned reads (see _registry._load_python).
HUNG = "did not return within"


def _say(line: str) -> None:
    os.write(1, ("\n" + line + "\n").encode())


def _import(name: str, value: str, group: str, timeout: str) -> None:
    from importlib.metadata import EntryPoint

    try:
        obj = EntryPoint(name, value, group).load()
    except (Exception, SystemExit):
        obj = None  # recorded when the registry imports it again: only an end of the process is news here
    except BaseException as exc:  # KeyboardInterrupt at import: the registry does not catch it
        _say("pjrt-hub-preflight: raised " + type(exc).__name__)
        os._exit(0)
    _say(IMPORTED)
    if obj is not None:
        from pjrt_hub._registry import PluginRegistry, RegistrySettings

        settings = RegistrySettings(autoload=False, library_paths="", probe_timeout=float(timeout))
        record = PluginRegistry(settings).register(obj, name)
        if HUNG in (record.reason or ""):  # not to be waited for again
            _say("pjrt-hub-preflight: hung " + (record.reason or ""))


def _client(name: str, framework: str, window: str, floor: str, strict: str, dates: str) -> None:
    from pjrt_hub._policy import Policy
    from pjrt_hub._registry import PluginRegistry
    from pjrt_hub.abi import ApiVersion
    from pjrt_hub.atlas import MinorDates

    policy = Policy(framework=ApiVersion.parse(framework), window_weeks=int(window), floor_minor=int(floor),
                    strict=strict == "1", dates=MinorDates.from_json(dates) if dates else None)
    try:
        PluginRegistry.from_environment(policy=policy, requested=frozenset([name.lower()])).create_client(name)
    except BaseException:  # noqa: BLE001 - an error is the cases' to report: only an end of the process is news
        pass


def main(argv: list[str]) -> None:
    mode, args = argv[0], argv[1:]
    if mode == "import":
        _import(*args)
    elif mode == "client":
        _client(*args)
    else:
        raise SystemExit(f"usage: python -m pjrt_hub._preflight_child import|client ...; got {mode!r}")
    _say(DONE)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
