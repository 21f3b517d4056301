"""Helpers for test_atlas.py: a package index served from memory by a local HTTP server (the
shape of PyPI's JSON API, with relative file URLs), wheels built as zip files around a given
plugin library, and the fake C plugins of tests/backends/c_api compiled outside that folder."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..backends.c_api.fakes import fake

__all__ = ["FakeIndex", "compile_fake_plugin", "compile_library", "linux_wheel_name", "macos_wheel_name", "utc", "wheel"]

MANYLINUX = "py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64"


def utc(text: str) -> dt.datetime:
    """An aware UTC datetime from ``2025-01-10`` or ``2025-01-10T08:00``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)


def compile_library(cc: str, folder: Path, name: str, source: str, *flags: str) -> Path:
    """A shared library built from C source (as the ``build_so`` fixture of tests/backends/c_api)."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.c"
    src.write_text(source)
    out = folder / f"lib{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *flags], check=True,
                   capture_output=True, text=True)
    return out


def compile_fake_plugin(cc: str, folder: Path, name: str, *defines: str) -> Path:
    """tests/backends/c_api/fakes.py's fake PJRT plugin (``MINOR=90`` ...), built in ``folder``."""
    return Path(fake(lambda n, source, *flags: str(compile_library(cc, folder, n, source, *flags)), name, *defines))


def wheel(library: Path | None, *, header_minor: int | None = None,
          requires: tuple[str, ...] = ("jax>=0.4.30",)) -> bytes:
    """The bytes of a plugin wheel: the library under jax_plugins/, a dist-info METADATA with its
    Requires-Dist, and optionally the wheel's own pjrt_c_api.h defining ``header_minor``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if library is not None:
            archive.write(library, "jax_plugins/fake/fake_plugin.so")
        archive.writestr("jax_plugins/fake/__init__.py", "")
        metadata = "Metadata-Version: 2.1\nName: fake\nVersion: 1.0\n"
        metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
        archive.writestr("fake-1.0.dist-info/METADATA", metadata)
        if header_minor is not None:
            archive.writestr("include/pjrt_c_api.h",
                             f"#define PJRT_API_MAJOR 0\n#define PJRT_API_MINOR {header_minor}\n")
    return buffer.getvalue()


class FakeIndex:
    """A package index on 127.0.0.1: ``{url}/{package}/json`` lists what :meth:`add` published;
    each file is served at ``/files/<name>`` and listed by a URL relative to the JSON's. Every
    request path is recorded in ``requests``."""

    def __init__(self) -> None:
        self.projects: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                index.requests.append(self.path)
                body = index._answer(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass  # keep the test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/pypi"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _answer(self, path: str) -> bytes | None:
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "pypi" and parts[2] == "json" and parts[1] in self.projects:
            return json.dumps({"info": {"name": parts[1]}, "releases": self.projects[parts[1]]}).encode()
        if len(parts) == 2 and parts[0] == "files":
            return self.files.get(parts[1])
        return None

    def add(self, package: str, version: str, filename: str, data: bytes, *, uploaded: str,
            sha256: str | None = None, yanked: bool = False) -> str:
        """Publish ``data`` as ``filename`` of ``package`` ``version``; ``sha256``: what the index
        claims (default: the true digest). Returns the file's digest as listed."""
        digest = sha256 if sha256 is not None else hashlib.sha256(data).hexdigest()
        self.files[filename] = data
        entries = self.projects.setdefault(package, {}).setdefault(version, [])
        entries[:] = [e for e in entries if e["filename"] != filename]
        entries.append({"filename": filename, "url": f"../../files/{filename}", "digests": {"sha256": digest},
                        "size": len(data), "upload_time_iso_8601": f"{uploaded}Z", "yanked": yanked})
        return digest

    def wheel_downloads(self) -> list[str]:
        return [p for p in self.requests if p.startswith("/files/")]


def linux_wheel_name(package: str, version: str) -> str:
    return f"{package.replace('-', '_')}-{version}-{MANYLINUX}.whl"


def macos_wheel_name(package: str, version: str) -> str:
    return f"{package.replace('-', '_')}-{version}-py3-none-macosx_11_0_arm64.whl"
