"""Returning arrays to Python without a Python call per array.

numba turns an array a compiled function returns into a numpy array with
``NRT_adapt_ndarray_to_python_acqref``, which takes the array's dtype and its Python class. It
reads the dtype from the function's environment (a list of constants the compiled code indexes),
but embeds the class pickled in the code and unpickles it on every call: a call from C into
``numba.core.serialize._numba_unpickle``, which looks the class up in a dict. For a small
program that is most of the cost of returning its result, and a fair share of a tiny execute
through the Python API (figures: docs/measurements.md).

:func:`install` registers a boxer for arrays that runs numba's own, with the one step changed:
while it runs, an object numba embeds in the code (``serialize_object`` then ``unserialize``) is
put in the environment and read from there, as the dtype is. The class object, dtype, dimensions
and writable flag passed to the C function are the same. It applies to every numba function
compiled in the process from then on (the generated programs' entries, and any other). Code
compiled before, or loaded from a cache made without it, keeps numba's way and still works; an
environment's constants are kept with the code on disk (pickled, as the dtype already is).
"""

from __future__ import annotations

from numba.core import boxing, types
from numba.core.pythonapi import _boxers

__all__ = ["install"]


def _box_array(typ, val, c):
    api, env = c.pyapi, c.env_manager
    if env is None:
        return boxing.box_array(typ, val, c)
    # Instance attributes over the methods, for this call: numba compiles under its global lock,
    # so no other compilation uses this PythonAPI meanwhile.
    api.serialize_object = lambda obj: obj
    api.unserialize = lambda obj: env.read_const(env.add_const(obj))
    try:
        return boxing.box_array(typ, val, c)
    finally:
        del api.serialize_object, api.unserialize


def install() -> None:
    """Box arrays with :func:`_box_array` (idempotent)."""
    # numba's registry refuses a second registration for a type class: replace the entry.
    _boxers.functions[types.Array] = _box_array
