"""A compiled program returns its arrays without calling back into Python (.boxing): numba's
own boxer unpickles each array's class through ``numba.core.serialize._numba_unpickle`` on
every call; the arrays, their types and their flags stay what numba's boxer makes."""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from pjrt_hub.backends.numba_cpu.compiler import NumbaCompiler

# Four results of the shapes and types real programs return: a vector, a 0-d integer, a
# zero-size array and bfloat16.
PROGRAM = """func.func public @main(%x: tensor<4xf32>, %n: tensor<3xi32>, %e: tensor<0x3xf32>, %h: tensor<2x2xbf16>)
    -> (tensor<4xf32>, tensor<i32>, tensor<0x3xf32>, tensor<2x2xbf16>) {
  %s = stablehlo.add %x, %x : tensor<4xf32>
  %z = stablehlo.constant dense<0> : tensor<i32>
  %r = stablehlo.reduce(%n init: %z) applies stablehlo.add across dimensions = [0] : (tensor<3xi32>, tensor<i32>) -> tensor<i32>
  %d = stablehlo.negate %e : tensor<0x3xf32>
  %m = stablehlo.multiply %h, %h : tensor<2x2xbf16>
  return %s, %r, %d, %m : tensor<4xf32>, tensor<i32>, tensor<0x3xf32>, tensor<2x2xbf16>
}
"""

TINY = """func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %s = stablehlo.add %a, %b : tensor<4xf32>
  return %s : tensor<4xf32>
}
"""


def _unpickle_calls(fn, *args):
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_numba_unpickle":
            calls.append(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, calls


def test_results_come_back_without_a_python_call(tmp_path):
    program = NumbaCompiler(cache_dir=str(tmp_path)).compile(PROGRAM)
    args = [np.array([1.5, -2.0, 0.0, 3.25], np.float32), np.array([7, -3, 40], np.int32),
            np.zeros((0, 3), np.float32), np.array([[1.5, -2.0], [0.25, 3.0]], ml_dtypes.bfloat16)]
    program.run(args)  # the first call may resolve what it needs once
    results, calls = _unpickle_calls(program.run, args)
    assert calls == []
    assert len(results) == 4
    for got, (shape, dtype) in zip(results, [((4,), np.float32), ((), np.int32), ((0, 3), np.float32),
                                             ((2, 2), ml_dtypes.bfloat16)]):
        assert type(got) is np.ndarray
        assert got.shape == shape and got.dtype == dtype
        assert got.flags.c_contiguous and got.flags.writeable
    np.testing.assert_array_equal(results[0], np.array([3.0, -4.0, 0.0, 6.5], np.float32))
    assert int(results[1]) == 44
    np.testing.assert_array_equal(results[3].astype(np.float32), np.array([[2.25, 4.0], [0.0625, 9.0]], np.float32))
    # The arrays are the caller's own: writing one changes nothing the next call returns.
    results[0][:] = 0
    assert program.run(args)[0][0] == 3.0


def test_the_fast_path_entry_returns_without_a_python_call(tmp_path):
    """The entry the runtime calls directly for a plain program (a tiny execute's whole run)."""
    program = NumbaCompiler(cache_dir=str(tmp_path)).compile(TINY)
    entry = program.direct_entry()
    assert entry is not None
    x = np.arange(4, dtype=np.float32)
    entry(x, x)
    (result,), calls = _unpickle_calls(entry, x, x)
    assert calls == []
    assert type(result) is np.ndarray and result.dtype == np.float32 and result.flags.writeable
    np.testing.assert_array_equal(result, 2 * x)


def test_numba_functions_outside_the_backend_box_as_before(tmp_path):
    """The boxer applies process-wide: a plain ``njit`` function's arrays, including a read-only
    one and a strided view, come back with numba's flags and strides."""
    from numba import njit

    from pjrt_hub.backends.numba_cpu import support  # noqa: F401  (installs the boxer)

    @njit
    def views(a):
        return a[::2], a.T, np.arange(3.0)

    a = np.arange(12.0).reshape(3, 4)
    views(a)  # compiles
    (strided, transposed, fresh), calls = _unpickle_calls(views, a)
    assert calls == []
    np.testing.assert_array_equal(strided, a[::2])
    np.testing.assert_array_equal(transposed, a.T)
    assert transposed.strides == a.T.strides
    np.testing.assert_array_equal(fresh, np.arange(3.0))

    readonly = a.copy()
    readonly.flags.writeable = False

    @njit
    def same(x):
        return x

    same(readonly)  # compiles
    got, calls = _unpickle_calls(same, readonly)
    assert calls == []
    assert not got.flags.writeable
    np.testing.assert_array_equal(got, a)
