"""The cell process: ``python -m pjrt_hub.compat_matrix._cell_main --plugin NAME ...``.

Kept apart from :mod:`._cell` so that ``-m`` runs a module the package has not imported yet.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from ._cell import evaluate_cell


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pjrt_hub.compat_matrix._cell_main")
    parser.add_argument("--plugin", required=True)
    parser.add_argument("--framework-version", required=True)
    parser.add_argument("--environment", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--timeout-scale", type=float, default=1.0)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args(argv)
    result = evaluate_cell(args.plugin, args.framework_version, args.environment, cases=args.case,
                           timeout_scale=args.timeout_scale, strict=args.strict)
    Path(args.out).write_text(result.model_dump_json())
    # A plugin may leave non-daemon threads or a hung call behind: the result is written, so leave
    # at once rather than wait for them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
