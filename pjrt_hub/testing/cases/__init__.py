"""The conformance cases, one module per group of ``pjrt_c_api_test.cc``; importing registers them."""

from . import (  # noqa: F401 - imported for registration
    abi,
    buffers,
    client,
    compile,
    devices,
    events,
    execute,
    extensions,
    plugin,
    through_jax,
    topology,
    version,
)
