"""The small-float tables of numba_cpu's support module are built on first use: a process that
compiles or loads programs without 8- or 4-bit floats never imports ml_dtypes for them (half a
second of every compile process's start), and generated code names the tables it uses."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from pjrt_hub.backends.numba_cpu import NumbaCompiler, support

F8_ROUND_TRIP = """func.func @main(%x: tensor<6xf32>) -> tensor<6xf32> {
  %0 = stablehlo.convert %x : (tensor<6xf32>) -> tensor<6xf8E5M2>
  %1 = stablehlo.convert %0 : (tensor<6xf8E5M2>) -> tensor<6xf32>
  return %1 : tensor<6xf32>
}"""


def test_importing_support_leaves_ml_dtypes_alone():
    code = ("import sys; from pjrt_hub.backends.numba_cpu import support; "
            "print('ml_dtypes' in sys.modules); support.SF_f8E5M2_V; print('ml_dtypes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_a_table_that_does_not_exist_is_an_attribute_error():
    with pytest.raises(AttributeError, match="SF_f9E9_V"):
        support.SF_f9E9_V  # noqa: B018


def test_generated_code_imports_the_tables_it_uses(tmp_path):
    program = NumbaCompiler(tmp_path, tiered=False).compile(F8_ROUND_TRIP, None)
    (module,) = tmp_path.glob("p_*.py")
    imports = [line for line in module.read_text().splitlines() if "import SF_" in line]
    assert len(imports) == 1 and "SF_f8E5M2_V" in imports[0] and "SF_f8E4M3FN" not in imports[0]
    x = np.array([0.1, 1.7, -3.3, 60000, 1e-9, np.nan], np.float32)
    expected = x.astype(ml_dtypes.float8_e5m2).astype(np.float32)
    np.testing.assert_array_equal(program.run([x])[0], expected)
