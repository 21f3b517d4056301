"""Mutation testing of pjrt-hub's own CPU runtime and reference plugin with cosmic-ray (issue 41).

The hand-written catalogue (tests/conformance/mutants.py) measures the conformance suite against
defects someone thought of; this package measures it against defects a tool plants, at random,
in the code the reference plugin runs: every module of backends/cpu_runtime and the reference
backend's PJRT surface. :mod:`.run` drives cosmic-ray on a private copy of the tree
(``python -m tests.mutation``, or ``tox -e mutation``); :mod:`.model` holds what needs no tool:
the seeded stratified sample, the stable mutant ids, the survivors' reasons
(``survivors.toml``) and the report.
"""
