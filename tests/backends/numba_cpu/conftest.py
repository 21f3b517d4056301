"""Shared fixtures for the numba_cpu tests.

numba compiles slowly, so every compiled program is shared: one compiler (with its own cache
directory, cold at the start of the session as on CI) and one compile per distinct program text.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from pjrt_hub.backends.numba_cpu import NumbaCompiler  # noqa: E402


@pytest.fixture(scope="session")
def numba_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("numba-cache")


@pytest.fixture(scope="session")
def compiler(numba_cache_dir):
    return NumbaCompiler(cache_dir=numba_cache_dir)
