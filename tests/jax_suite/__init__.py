"""JAX's own test suite as the real-client check of numba_cpu (issue 42, point 3).

pjrt-hub's own JAX tests (tests/jax) try the programs someone thought of; JAX's test suite tries
what JAX's authors test their own backends with. :mod:`.run` takes JAX's test files for the
installed jax (from its sdist or its git tag, into pjrt-hub's cache, never into this repository),
runs chosen files with pytest on JAX's CPU and then on numba_cpu, each in child processes loading
:mod:`.collector`, and compares them test by test (``python -m tests.jax_suite``, or
``tox -e jax-suite``); :mod:`.model` holds what needs no run: the seeded sample, the outcomes,
the comparison, the failures that are known JAX limitations (``known_failures.toml``, keyed to
:data:`pjrt_hub.jax.JAX_LIMITATIONS`) and the report.
"""
