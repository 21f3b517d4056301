"""Which outputs of ``@main`` may reuse which inputs' storage: a fact of the program text.

JAX marks donated arguments three ways: ``tf.aliasing_output = k`` on an argument pins it to
output ``k``; the module attribute ``mhlo.input_output_alias`` lists pairs; ``jax.buffer_donor``
marks an argument free to be reused, and it takes the first output of its type that no other
input claimed, as XLA pairs donors. Every backend that donates reads the same answer from here.
"""

from __future__ import annotations

from .ir import Function, Module

__all__ = ["output_aliases"]


def output_aliases(module: Module, function: Function | None = None) -> dict[int, int]:
    """Output index -> the input index that output may reuse."""
    fn = function or module.main
    n_out = len(fn.result_types)
    aliases: dict[int, int] = {}
    for i, attrs in enumerate(fn.arg_attrs or ()):
        k = attrs.get("tf.aliasing_output") if attrs else None
        if k is not None and 0 <= int(k) < n_out:
            aliases.setdefault(int(k), i)
    for entry in module.attributes.get("mhlo.input_output_alias", ()) or ():
        try:
            index = entry["output_index"]
            k = int(index[0]) if len(index) else 0
            aliases.setdefault(k, int(entry["alias"]["parameter_number"]))
        except (KeyError, TypeError, IndexError, ValueError):
            continue
    claimed = set(aliases.values())
    for i, attrs in enumerate(fn.arg_attrs or ()):
        if not (attrs and attrs.get("jax.buffer_donor")) or i in claimed:
            continue
        for k, ty in enumerate(fn.result_types):
            if k not in aliases and ty == fn.args[i].type:
                aliases[k] = i
                claimed.add(i)
                break
    return aliases
