"""The matrix tests: real C plugins beyond the default one only when asked."""

from __future__ import annotations

import pytest

from ..real_plugins import skip_extra_unless_asked


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_extra_unless_asked(config, items)
