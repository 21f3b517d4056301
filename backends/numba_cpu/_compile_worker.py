"""The background compile process of :mod:`.tiers`: compiles programs into the disk cache.

It starts by importing numba and the helpers generated code uses, and says so with one line,
``{"ready": true}``; until then the parent may compile a program it waits for itself (see
:meth:`.tiers._Background.compile_here`). Then it reads one JSON request per line on stdin
(``cache_dir``, ``text``, ``options`` (the lowering options), ``text_key``), compiles the
program with numba into that cache directory, and answers one JSON line on stdout:
``{"fingerprint": ...}`` or ``{"error": "..."}``. It runs at its parent's priority: the
parent's eager tier serves the program meanwhile, but a user's loop of runs is waiting for the
compiled code, and at a lower priority a busy machine starved it for minutes. It ends when
stdin closes (or when it is killed: it holds nothing that a kill can damage, as every cache
write is a rename into place).
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from pjrt_hub.abi import PjrtHubError

    from .codegen import LoweringOptions
    from .compiler import NumbaCompiler
    from . import support  # noqa: F401 - numba, and what every generated module imports

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    compilers: dict[str, NumbaCompiler] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            compiler = compilers.get(request["cache_dir"])
            if compiler is None:
                compiler = compilers[request["cache_dir"]] = NumbaCompiler(request["cache_dir"], tiered=False)
            lopts = LoweringOptions(**request["options"])
            reply = {"fingerprint": compiler.compile_to_cache(request["text"], lopts, request["text_key"]).fingerprint}
        except PjrtHubError as exc:
            reply = {"error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which keeps going
            reply = {"error": f"numba_cpu: background compile failed: {type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
