"""The conformance cases, one module per group of ``pjrt_c_api_test.cc``; importing registers them."""

from . import (  # noqa: F401 - imported for registration
    abi,
    buffers,
    client,
    collectives,
    compile,
    concurrency,
    devices,
    errors,
    events,
    execute,
    extensions,
    lifetime,
    numerics,
    plugin,
    through_jax,
    topology,
    version,
)
