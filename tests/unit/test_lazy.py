"""The lazy re-exports of the namespace's packages (:func:`pjrt_hub._lazy.lazy_exports`): on a
package written for the test, then on the real packages that use them."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

INIT = """
from pjrt_hub._lazy import lazy_exports

__all__ = ["TABLE", "value"]

__getattr__, __dir__ = lazy_exports(__name__, {"value": "._values", "TABLE": "._table"},
                                    import_first={"._table": "._fill"})
"""

MODULES = {
    "__init__.py": INIT,
    "_values.py": "value = object()\n",
    "_table.py": "TABLE = []\n",
    "_fill.py": "from ._table import TABLE\n\nTABLE.append('filled')\n",
}


@pytest.fixture
def package(site: Path) -> types.ModuleType:
    folder = site / "lazypkg"
    folder.mkdir()
    for name, text in MODULES.items():
        (folder / name).write_text(text)
    return importlib.import_module("lazypkg")


def test_a_name_is_imported_on_first_read_and_then_kept_in_the_package(package):
    assert "lazypkg._values" not in sys.modules and "value" not in vars(package)
    value = package.value
    assert value is sys.modules["lazypkg._values"].value
    # Stored in the package's namespace, where attribute reads look before __getattr__.
    assert vars(package)["value"] is value
    sys.modules["lazypkg._values"].value = "changed"
    assert package.value is value


def test_from_import_goes_through_the_lazy_names(package):
    from lazypkg import value

    assert value is sys.modules["lazypkg._values"].value


def test_import_first_runs_before_the_submodule_is_read(package):
    assert "lazypkg._fill" not in sys.modules
    assert package.TABLE == ["filled"]
    assert "lazypkg._fill" in sys.modules


def test_an_unknown_name_fails_as_on_any_module(package):
    with pytest.raises(AttributeError) as raised:
        package.missing  # noqa: B018  # the read is what is tested
    with pytest.raises(AttributeError) as plain:
        types.ModuleType("lazypkg").missing  # noqa: B018
    assert str(raised.value) == str(plain.value)
    assert (raised.value.name, raised.value.obj) == ("missing", package)
    assert not hasattr(package, "other") and getattr(package, "other", None) is None
    assert "lazypkg._values" not in sys.modules and "lazypkg._table" not in sys.modules


def test_dir_lists_the_names_not_read_yet_with_the_module_globals(package):
    listed = dir(package)
    assert listed == sorted(listed)
    assert {"TABLE", "value", "lazy_exports", "__all__", "__name__"} <= set(listed)
    assert "lazypkg._values" not in sys.modules
    package.value  # noqa: B018
    assert set(listed) <= set(dir(package))


PACKAGES = ["pjrt_hub", "pjrt_hub.testing", "pjrt_hub.backends.reference", "pjrt_hub.backends.cpu_runtime",
            "pjrt_hub.backends.c_api", "pjrt_hub.backends.numba_cpu"]


@pytest.mark.parametrize("name", PACKAGES)
def test_the_packages_list_every_public_name(name):
    package = importlib.import_module(name)
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


# numba_cpu's names import numba, which the unit tests do without.
@pytest.mark.parametrize("name", [p for p in PACKAGES if p != "pjrt_hub.backends.numba_cpu"])
def test_every_public_name_of_the_packages_resolves(name):
    package = importlib.import_module(name)
    for attribute in package.__all__:
        value = getattr(package, attribute)
        if attribute != "__version__":
            assert vars(package)[attribute] is value
