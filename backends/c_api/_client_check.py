"""Child side of :func:`.safety.safe_client_check`: create, query and destroy a client, reporting
each step as a JSON snapshot (``python -m pjrt_hub.backends.c_api._client_check PATH``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from . import _child
from .probe import resolve_library


def _check_here(path: str, options: dict[str, Any]) -> dict[str, Any]:
    from pjrt_hub.abi import PjrtError, PluginLoadError

    from .api import load_api

    report: dict[str, Any] = {"path": path, "outcome": "ok", "finished": False, "stage": "load"}
    _child.emit(report)
    try:
        api = load_api(path)
        report["name"] = api.name
        report["stage"] = "client_create"
        _child.emit(report)
        client = api.client_create(options)
        report["stage"] = "devices"
        _child.emit(report)
        report["platform_name"] = client.platform_name()
        report["platform_version"] = client.platform_version()
        devices = client.devices()
        report["device_count"] = len(devices)
        report["addressable_device_count"] = len(client.addressable_devices())
        report["device_kinds"] = sorted({d.get_description().kind() for d in devices})
        report["stage"] = "client_destroy"
        _child.emit(report)
        client.destroy()
    except PluginLoadError as exc:
        report.update(outcome="load_failed", reason=exc.reason)
    except PjrtError as exc:
        report.update(outcome="error", reason=exc.message, error_code=exc.code.name)
    report["finished"] = True
    return report


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrt_hub.backends.c_api._client_check",
                                     description="Create and destroy a client of a PJRT C plugin.")
    parser.add_argument("path")
    parser.add_argument("--options", default="{}", help="client create options as a JSON object")
    ns = parser.parse_args(argv)
    _child.emit(_check_here(resolve_library(ns.path), json.loads(ns.options)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_main())
