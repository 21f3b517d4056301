"""Lazy re-exports for the packages of the namespace (PEP 562 module ``__getattr__``).

Several package ``__init__`` modules sit on light paths: every plugin imports ``pjrt_hub.abi``,
which runs ``pjrt_hub/__init__.py`` first, and discovery imports each backend's ``.plugin``, which
runs the backend's ``__init__``. Such a package names its public API with :func:`lazy_exports`
instead of importing it: the submodule behind a name is imported when the name is first read, and
the value is then stored in the package's namespace, so later reads are plain lookups that never
come back here. This module imports nothing of pjrt_hub, so that any package of the namespace,
``pjrt_hub`` itself included, can use it without an import cycle.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], *, import_first: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, serving the names of ``exports``.

    ``exports`` maps each public name to the submodule that defines it, relative to ``package``
    (``"._registry"``). ``import_first`` maps a submodule to another one that must be imported
    before it: for a table that is only whole once other modules have registered into it.
    Called from the package's ``__init__`` as ``__getattr__, __dir__ = lazy_exports(__name__, {...})``;
    keep the names importable under ``if TYPE_CHECKING:`` as well, since type checkers do not run it.
    """
    # The package is in sys.modules while its __init__ runs; its namespace is the dict that
    # later attribute reads look in first.
    namespace = vars(sys.modules[package])
    exports = dict(exports)
    import_first = dict(import_first or {})

    def __getattr__(name: str) -> Any:
        submodule = exports.get(name)
        if submodule is None:
            # The interpreter's own message for a missing module attribute; it adds name and obj.
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if submodule in import_first:
            importlib.import_module(import_first[submodule], package)
        value = getattr(importlib.import_module(submodule, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        # What dir() lists for any module, plus the names not read yet.
        return sorted(set(namespace) | set(exports) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
