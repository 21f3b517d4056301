"""The programs the suite compiles: a few small ones of its own, and the public corpus.

The suite's own programs are StableHLO text in the form JAX prints (``jax.jit(f).lower(...)
.as_text()``), kept to ops every StableHLO consumer knows (add, multiply, constant), so that a
failure points at the runtime rather than at a compiler's op coverage. The corpus
(``pjrt_hub/data/corpus/public``) brings real JAX programs with inputs, expected outputs and
per-output tolerances (``manifest.json``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

__all__ = [
    "CORPUS_PACKAGE",
    "CorpusProgram",
    "INVALID_PROGRAM",
    "add_one",
    "corpus_fingerprint",
    "donating_add_one",
    "load_corpus",
    "two_outputs",
]

CORPUS_PACKAGE = "pjrt_hub.data.corpus.public"

#: Not StableHLO in any form: every plugin must refuse it with an error, not a crash.
INVALID_PROGRAM = "this is not a StableHLO module {"


def _module(name: str, body: str, replicas: int = 1) -> str:
    return (f"module @{name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {replicas} : i32}} {{\n"
            f"{body}}}\n")


def add_one(n: int = 4, *, replicas: int = 1) -> str:
    """``f(x) = x + 1`` on ``f32[n]``: upstream's ``CreateAddOneComputation``."""
    t = f"tensor<{n}xf32>"
    return _module("jit_add_one", (
        f"  func.func public @main(%arg0: {t}) -> ({t} {{jax.result_info = \"result\"}}) {{\n"
        f"    %cst = stablehlo.constant dense<1.000000e+00> : {t}\n"
        f"    %0 = stablehlo.add %arg0, %cst : {t}\n"
        f"    return %0 : {t}\n"
        f"  }}\n"), replicas)


def two_outputs() -> str:
    """``f(x, y) = (x + y, x * y)`` on ``f32[2,3]``: several outputs in order."""
    t = "tensor<2x3xf32>"
    return _module("jit_two_outputs", (
        f"  func.func public @main(%arg0: {t}, %arg1: {t}) -> ({t} {{jax.result_info = \"[0]\"}}, "
        f"{t} {{jax.result_info = \"[1]\"}}) {{\n"
        f"    %0 = stablehlo.add %arg0, %arg1 : {t}\n"
        f"    %1 = stablehlo.multiply %arg0, %arg1 : {t}\n"
        f"    return %0, %1 : {t}, {t}\n"
        f"  }}\n"))


def donating_add_one(n: int = 4) -> str:
    """``x + 1`` with ``x`` donated to the result, as ``jax.jit(f, donate_argnums=0)`` lowers it."""
    t = f"tensor<{n}xf32>"
    return _module("jit_donating_add_one", (
        f"  func.func public @main(%arg0: {t} {{tf.aliasing_output = 0 : i32}}) -> "
        f"({t} {{jax.result_info = \"result\"}}) {{\n"
        f"    %cst = stablehlo.constant dense<1.000000e+00> : {t}\n"
        f"    %0 = stablehlo.add %arg0, %cst : {t}\n"
        f"    return %0 : {t}\n"
        f"  }}\n"))


@dataclass(frozen=True)
class CorpusProgram:
    """One program of the public corpus, with what the manifest says about it."""

    name: str
    description: str
    file: str
    data: str
    #: (rtol, atol) of each output, in order.
    tolerances: tuple[tuple[float, float], ...]
    output_names: tuple[str, ...]
    input_names: tuple[str, ...]

    def text(self) -> str:
        return resources.files(CORPUS_PACKAGE).joinpath(self.file).read_text(encoding="utf-8")

    def arrays(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        with resources.files(CORPUS_PACKAGE).joinpath(self.data).open("rb") as handle:
            with np.load(handle) as npz:
                return [npz[n] for n in self.input_names], [npz[n] for n in self.output_names]


def _manifest_text() -> str:
    try:
        return resources.files(CORPUS_PACKAGE).joinpath("manifest.json").read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return ""


@lru_cache(maxsize=1)
def load_corpus() -> tuple[CorpusProgram, ...]:
    """Every program of the public corpus (empty if the corpus is not installed)."""
    text = _manifest_text()
    if not text:
        return ()
    manifest: dict[str, Any] = json.loads(text)
    programs = []
    for entry in manifest["programs"]:
        outputs = entry["outputs"]
        programs.append(CorpusProgram(
            name=entry["name"], description=entry.get("description", ""), file=entry["file"],
            data=entry["data"],
            tolerances=tuple((float(o.get("rtol", entry.get("rtol", 0.0))),
                              float(o.get("atol", entry.get("atol", 0.0)))) for o in outputs),
            output_names=tuple(o["name"] for o in outputs),
            input_names=tuple(i["name"] for i in entry["inputs"]),
        ))
    return tuple(programs)


def corpus_fingerprint() -> str:
    return hashlib.sha256(_manifest_text().encode()).hexdigest()[:16]
