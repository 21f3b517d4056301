"""Shared fixtures for the numba_cpu tests.

numba compiles slowly, so every compiled program is shared: one compiler (with its own cache
directory, cold at the start of the session as on CI) and one compile per distinct program text.
"""

from __future__ import annotations

import pytest

pytest.importorskip("numba")

from pjrt_hub.backends.numba_cpu import NumbaCompiler  # noqa: E402


@pytest.fixture(scope="session")
def numba_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("numba-cache")


@pytest.fixture(scope="session")
def compiler(numba_cache_dir):
    return NumbaCompiler(cache_dir=numba_cache_dir)


@pytest.fixture(scope="session")
def kernel_file(tmp_path_factory):
    """A machine kernel file of :data:`.tier_helpers.MACHINE_NAMES`, built (and checked by a fresh process)
    once for the whole run: the test workers share it, the first one builds it, under a lock."""
    import fcntl
    import os

    from pjrt_hub.backends.numba_cpu import machine_kernels as mk

    from .tier_helpers import MACHINE_NAMES

    shared = tmp_path_factory.getbasetemp().parent  # the same for every xdist worker
    directory = shared / f"machine-{mk.machine_key()}"
    with open(shared / "machine-kernels.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = os.environ.get("PJRT_HUB_MACHINE_CACHE")
        os.environ["PJRT_HUB_MACHINE_CACHE"] = str(directory)
        try:
            path = mk.file_path()
            if not path.is_file():
                mk.build(path, MACHINE_NAMES)  # checked in a fresh process before it is renamed into place
        finally:
            if before is None:
                del os.environ["PJRT_HUB_MACHINE_CACHE"]
            else:
                os.environ["PJRT_HUB_MACHINE_CACHE"] = before
    assert path.is_file() and not list(directory.glob("*.tmp"))
    return path


@pytest.fixture
def machine(kernel_file, monkeypatch):
    """Kernels on, from the shared file, in a fresh process state."""
    from pjrt_hub.backends.numba_cpu import machine_kernels as mk

    monkeypatch.setenv("PJRT_HUB_MACHINE_KERNELS", "1")
    monkeypatch.setenv("PJRT_HUB_MACHINE_CACHE", str(kernel_file.parent))
    state = mk._State()
    monkeypatch.setattr(mk, "_STATE", state)
    mk.preload()
    assert state.loaded.wait(30) and state.kernels is not None
    return state
