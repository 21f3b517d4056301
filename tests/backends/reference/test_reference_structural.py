"""Data-movement and contraction ops against the spec: index clamping, padding, dimension
numbers, gather/scatter with batching dimensions, convolution with every window attribute."""

import itertools

import numpy as np
import pytest

from pjrt_hub.backends.reference.rng import philox4x32, threefry2x32

from .ref_run import ev, run, ttype, type_of


def test_broadcast_in_dim_with_permuted_dimensions_transposes():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = ev("stablehlo.broadcast_in_dim %x0, dims = [1, 0]", x, sig="(tensor<2x3xf32>) -> tensor<3x2xf32>")
    np.testing.assert_array_equal(out, x.T)
    grown = ev("stablehlo.broadcast_in_dim %x0, dims = [0, 2]", np.array([[1], [2]], np.int32),
               sig="(tensor<2x1xi32>) -> tensor<2x3x4xi32>")
    assert grown.shape == (2, 3, 4) and (grown[0] == 1).all() and (grown[1] == 2).all()


def test_dot_general_lays_out_batch_then_lhs_free_then_rhs_free():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 2, 4)).astype(np.float32)   # free, batch, contract
    b = rng.standard_normal((4, 2, 5)).astype(np.float32)   # contract, batch, free
    out = ev("stablehlo.dot_general %x0, %x1, batching_dims = [1] x [1], contracting_dims = [2] x [0]", a, b,
             sig="(tensor<3x2x4xf32>, tensor<4x2x5xf32>) -> tensor<2x3x5xf32>")
    expected = np.einsum("ibk,kbj->bij", a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(out, expected)


def test_integer_dot_wraps_and_dot_accepts_vectors():
    a = np.array([[65536, 1]], np.int32)
    b = np.array([[65536], [5]], np.int32)
    assert ev("stablehlo.dot %x0, %x1", a, b, sig="(tensor<1x2xi32>, tensor<2x1xi32>) -> tensor<1x1xi32>").tolist() == [[5]]
    v = np.array([1.0, 2.0], np.float32)
    assert ev("stablehlo.dot %x0, %x1", v, v, sig="(tensor<2xf32>, tensor<2xf32>) -> tensor<f32>") == 5.0


def test_pad_with_negative_edges_and_interior_padding():
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    out = ev("stablehlo.pad %x0, %x1, low = [1, -1], high = [1, 2], interior = [1, 0]", x, np.float32(0),
             sig="(tensor<2x3xf32>, tensor<f32>) -> tensor<5x4xf32>")
    expected = np.zeros((5, 4), np.float32)
    expected[1, :2] = [2, 3]
    expected[3, :2] = [5, 6]
    np.testing.assert_array_equal(out, expected)


def test_slice_with_strides_reverse_and_transpose():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        ev("stablehlo.slice %x0 [0:2, 1:3, 0:4:3]", x, sig="(tensor<2x3x4xi32>) -> tensor<2x2x2xi32>"), x[:, 1:3, ::3])
    np.testing.assert_array_equal(ev("stablehlo.reverse %x0, dims = [0, 2]", x), x[::-1, :, ::-1])
    np.testing.assert_array_equal(
        ev("stablehlo.transpose %x0, dims = [2, 0, 1]", x, sig="(tensor<2x3x4xi32>) -> tensor<4x2x3xi32>"),
        x.transpose(2, 0, 1))


def test_dynamic_slice_and_update_clamp_start_indices():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = ev("stablehlo.dynamic_slice %x0, %x1, %x2, sizes = [2, 3]", x, np.int32(5), np.int32(-2),
             sig="(tensor<4x6xf32>, tensor<i32>, tensor<i32>) -> tensor<2x3xf32>")
    np.testing.assert_array_equal(out, x[2:4, 0:3])
    upd = np.full((2, 2), -1, np.float32)
    out = ev("stablehlo.dynamic_update_slice %x0, %x1, %x2, %x3", x, upd, np.uint32(1), np.uint32(100),
             sig="(tensor<4x6xf32>, tensor<2x2xf32>, tensor<ui32>, tensor<ui32>) -> tensor<4x6xf32>")
    expected = x.copy()
    expected[1:3, 4:6] = -1
    np.testing.assert_array_equal(out, expected)


def test_concatenate_and_iota():
    a, b = np.ones((2, 1), np.int32), np.zeros((2, 2), np.int32)
    out = ev("stablehlo.concatenate %x0, %x1, dim = 1", a, b, sig="(tensor<2x1xi32>, tensor<2x2xi32>) -> tensor<2x3xi32>")
    assert out.tolist() == [[1, 0, 0], [1, 0, 0]]
    text = "func.func @main() -> tensor<2x3xui64> {\n  %0 = stablehlo.iota dim = 1 : tensor<2x3xui64>\n  return %0 : tensor<2x3xui64>\n}"
    iota = run(text)
    assert iota.dtype == np.uint64 and iota.tolist() == [[0, 1, 2], [0, 1, 2]]


GATHER_OPERAND = np.arange(1, 49, dtype=np.int64).reshape(2, 3, 4, 2)
GATHER_INDICES = np.array([[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
                           [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]]], np.int64)


def test_gather_with_batching_dims_matches_the_spec_example():
    text = f"""
    func.func @main(%op: {type_of(GATHER_OPERAND)}, %idx: {type_of(GATHER_INDICES)}) -> tensor<2x2x3x2x2xi64> {{
      %0 = "stablehlo.gather"(%op, %idx) <{{dimension_numbers = #stablehlo.gather<offset_dims = [3, 4], collapsed_slice_dims = [1], operand_batching_dims = [0], start_indices_batching_dims = [1], start_index_map = [2, 1], index_vector_dim = 3>, slice_sizes = array<i64: 1, 1, 2, 2>, indices_are_sorted = false}}> : ({type_of(GATHER_OPERAND)}, {type_of(GATHER_INDICES)}) -> tensor<2x2x3x2x2xi64>
      return %0 : tensor<2x2x3x2x2xi64>
    }}
    """
    expected = [[[[[1, 2], [3, 4]], [[3, 4], [5, 6]], [[13, 14], [15, 16]]],
                 [[[33, 34], [35, 36]], [[35, 36], [37, 38]], [[41, 42], [43, 44]]]],
                [[[[1, 2], [3, 4]], [[13, 14], [15, 16]], [[21, 22], [23, 24]]],
                 [[[43, 44], [45, 46]], [[33, 34], [35, 36]], [[27, 28], [29, 30]]]]]
    assert run(text, GATHER_OPERAND, GATHER_INDICES).tolist() == expected


def test_gather_without_index_vector_dim_and_with_clamping():
    x = np.arange(10, dtype=np.float32) * 10
    idx = np.array([0, 3, 9, -4], np.int32)  # index_vector_dim = rank: each index is a scalar
    text = """
    func.func @main(%x: tensor<10xf32>, %i: tensor<4xi32>) -> tensor<4x3xf32> {
      %0 = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 3>}> : (tensor<10xf32>, tensor<4xi32>) -> tensor<4x3xf32>
      return %0 : tensor<4x3xf32>
    }
    """
    assert run(text, x, idx).tolist() == [[0, 10, 20], [30, 40, 50], [70, 80, 90], [0, 10, 20]]


def _scatter_text(operand, indices, updates, dims, body, ty="i64"):
    return f"""
    func.func @main(%op: {type_of(operand)}, %idx: {type_of(indices)}, %upd: {type_of(updates)}) -> {type_of(operand)} {{
      %0 = "stablehlo.scatter"(%op, %idx, %upd) <{{scatter_dimension_numbers = #stablehlo.scatter<{dims}>}}> ({{
      ^bb0(%a: tensor<{ty}>, %b: tensor<{ty}>):
        {body}
      }}) : ({type_of(operand)}, {type_of(indices)}, {type_of(updates)}) -> {type_of(operand)}
      return %0 : {type_of(operand)}
    }}
    """


def test_scatter_with_batching_dims_matches_the_spec_example():
    updates = np.ones((2, 2, 3, 2, 2), np.int64)
    text = _scatter_text(
        GATHER_OPERAND, GATHER_INDICES, updates,
        "update_window_dims = [3, 4], inserted_window_dims = [1], input_batching_dims = [0], "
        "scatter_indices_batching_dims = [1], scatter_dims_to_operand_dims = [2, 1], index_vector_dim = 3",
        "%s = stablehlo.add %a, %b : tensor<i64>\n        stablehlo.return %s : tensor<i64>")
    expected = [[[[3, 4], [6, 7], [6, 7], [7, 8]], [[9, 10], [11, 12], [15, 16], [17, 18]],
                 [[17, 18], [19, 20], [22, 23], [24, 25]]],
                [[[25, 26], [28, 29], [30, 31], [31, 32]], [[35, 36], [38, 39], [38, 39], [39, 40]],
                 [[41, 42], [44, 45], [46, 47], [47, 48]]]]
    assert run(text, GATHER_OPERAND, GATHER_INDICES, updates).tolist() == expected


ROW_SCATTER = ("update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
               "index_vector_dim = 1")


def test_scatter_applies_duplicate_updates_in_order():
    operand = np.zeros((3, 2), np.float32)
    indices = np.array([[1], [1], [0], [1]], np.int32)
    updates = np.array([[1, 2], [10, 20], [5, 5], [100, 200]], np.float32)
    add = _scatter_text(operand, indices, updates, ROW_SCATTER,
                        "%s = stablehlo.add %a, %b : tensor<f32>\n        stablehlo.return %s : tensor<f32>", "f32")
    assert run(add, operand, indices, updates).tolist() == [[5, 5], [111, 222], [0, 0]]
    # A non-commutative update (a*2 + b) shows the order: ((0*2+1)*2+10)*2+100 = 124.
    ordered = _scatter_text(operand, indices, updates, ROW_SCATTER,
                            "%t = stablehlo.add %a, %a : tensor<f32>\n        %s = stablehlo.add %t, %b : tensor<f32>\n"
                            "        stablehlo.return %s : tensor<f32>", "f32")
    assert run(ordered, operand, indices, updates).tolist() == [[5, 5], [124, 248], [0, 0]]
    setter = _scatter_text(operand, indices, updates, ROW_SCATTER, "stablehlo.return %b : tensor<f32>", "f32")
    assert run(setter, operand, indices, updates).tolist() == [[5, 5], [100, 200], [0, 0]]


def test_scatter_skips_windows_out_of_bounds():
    operand = np.zeros((4,), np.int32)
    indices = np.array([[-1], [3], [2], [1]], np.int32)
    updates = np.array([[1, 1], [2, 2], [3, 3], [4, 4]], np.int32)
    text = _scatter_text(operand, indices, updates,
                         "update_window_dims = [1], scatter_dims_to_operand_dims = [0], index_vector_dim = 1",
                         "%s = stablehlo.add %a, %b : tensor<i32>\n        stablehlo.return %s : tensor<i32>", "i32")
    # [-1] and [3] would put a 2-wide window partly outside: XLA drops the whole window.
    assert run(text, operand, indices, updates).tolist() == [0, 4, 7, 3]


def naive_convolution(x, k, strides, pad, lhs_dil, rhs_dil, reversal, fgc, bgc):
    """The spec's convolution, element by element, in (N, C, spatial...) x (O, I, spatial...)."""
    n_batch, channels = x.shape[:2]
    out_features, in_per_group = k.shape[:2]
    space, window = x.shape[2:], k.shape[2:]
    padded = [(s - 1) * ld + 1 + lo + hi for s, ld, (lo, hi) in zip(space, lhs_dil, pad)]
    out_space = [(p - ((w - 1) * rd + 1)) // st + 1 for p, w, rd, st in zip(padded, window, rhs_dil, strides)]
    out = np.zeros([n_batch // bgc, out_features] + out_space)
    for b, o in itertools.product(range(n_batch // bgc), range(out_features)):
        feature_group = o // (out_features // fgc)
        batch_group = o // (out_features // bgc)
        for pos in itertools.product(*(range(s) for s in out_space)):
            total = 0.0
            for tap in itertools.product(*(range(w) for w in window)):
                src = []
                for d, t in enumerate(tap):
                    c = pos[d] * strides[d] + t * rhs_dil[d] - pad[d][0]
                    if c < 0 or c % lhs_dil[d] or c // lhs_dil[d] >= space[d]:
                        break
                    src.append(c // lhs_dil[d])
                else:
                    kt = tuple(w - 1 - t if r else t for t, w, r in zip(tap, window, reversal))
                    for i in range(in_per_group):
                        xb = batch_group * (n_batch // bgc) + b
                        xc = feature_group * in_per_group + i if fgc > 1 else i
                        total += x[(xb, xc) + tuple(src)] * k[(o, i) + kt]
            out[(b, o) + pos] = total
    return out


@pytest.mark.parametrize("case", [
    dict(n=1, c=1, o=2, space=(5, 5), window=(3, 3), strides=(1, 1), pad=((0, 0), (0, 0)), lhs=(1, 1), rhs=(1, 1), rev=(0, 0), fgc=1, bgc=1),
    dict(n=2, c=4, o=6, space=(5, 4), window=(2, 3), strides=(2, 1), pad=((1, 2), (0, 1)), lhs=(1, 1), rhs=(1, 1), rev=(0, 0), fgc=2, bgc=1),
    dict(n=4, c=3, o=6, space=(4, 4), window=(2, 2), strides=(1, 1), pad=((0, 0), (1, 1)), lhs=(1, 1), rhs=(1, 1), rev=(0, 0), fgc=1, bgc=2),
    dict(n=1, c=2, o=3, space=(4, 3), window=(2, 2), strides=(1, 2), pad=((1, 1), (-1, 1)), lhs=(2, 1), rhs=(1, 2), rev=(1, 0), fgc=1, bgc=1),
    dict(n=2, c=3, o=3, space=(6,), window=(3,), strides=(1,), pad=((2, 2),), lhs=(1,), rhs=(2,), rev=(1,), fgc=3, bgc=1),
])
def test_convolution_matches_the_spec_definition(case):
    rng = np.random.default_rng(1)
    nd = len(case["space"])
    x = rng.integers(-3, 4, size=(case["n"], case["c"]) + case["space"]).astype(np.float32)
    k = rng.integers(-3, 4, size=(case["o"], case["c"] // case["fgc"]) + case["window"]).astype(np.float32)
    expected = naive_convolution(x, k, case["strides"], case["pad"], case["lhs"], case["rhs"], case["rev"],
                                 case["fgc"], case["bgc"]).astype(np.float32)
    spatial = ", ".join(str(i) for i in range(nd))
    window = (f"stride = {list(case['strides'])}, pad = {[list(p) for p in case['pad']]}, "
              f"lhs_dilate = {list(case['lhs'])}, rhs_dilate = {list(case['rhs'])}, "
              f"reverse = {[bool(r) for r in case['rev']]}".replace("True", "true").replace("False", "false"))
    text = f"""
    func.func @main(%x: {type_of(x)}, %k: {type_of(k)}) -> {type_of(expected)} {{
      %0 = stablehlo.convolution(%x, %k) dim_numbers = [b, f, {spatial}]x[o, i, {spatial}]->[b, f, {spatial}], window = {{{window}}} {{batch_group_count = {case['bgc']} : i64, feature_group_count = {case['fgc']} : i64}} : ({type_of(x)}, {type_of(k)}) -> {type_of(expected)}
      return %0 : {type_of(expected)}
    }}
    """
    np.testing.assert_array_equal(run(text, x, k), expected)


def naive_reduce_window(x, init, fn, window, strides, base, wdil, pad):
    dilated = np.full([(s - 1) * b + 1 for s, b in zip(x.shape, base)], init, dtype=x.dtype)
    dilated[tuple(slice(None, None, b) for b in base)] = x
    padded = np.pad(dilated, pad, constant_values=init)
    span = [(w - 1) * d + 1 for w, d in zip(window, wdil)]
    out_shape = [(p - s) // st + 1 for p, s, st in zip(padded.shape, span, strides)]
    out = np.empty(out_shape, dtype=x.dtype)
    for pos in np.ndindex(*out_shape):
        acc = init
        for tap in np.ndindex(*window):
            acc = fn(acc, padded[tuple(p * st + t * d for p, st, t, d in zip(pos, strides, tap, wdil))])
        out[pos] = acc
    return out


@pytest.mark.parametrize("body, init, fn", [
    ("stablehlo.add", 0.0, lambda a, b: a + b),
    ("stablehlo.maximum", -np.inf, max),
])
def test_reduce_window_with_padding_and_dilations(body, init, fn):
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    expected = naive_reduce_window(x, np.float32(init), fn, (2, 3), (2, 1), (2, 1), (1, 2), ((1, 0), (0, 2)))
    text = f"""
    func.func @main(%x: tensor<3x4xf32>, %init: tensor<f32>) -> {type_of(expected)} {{
      %0 = "stablehlo.reduce_window"(%x, %init) <{{window_dimensions = array<i64: 2, 3>, window_strides = array<i64: 2, 1>, base_dilations = array<i64: 2, 1>, window_dilations = array<i64: 1, 2>, padding = dense<[[1, 0], [0, 2]]> : tensor<2x2xi64>}}> ({{
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = {body} %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }}) : (tensor<3x4xf32>, tensor<f32>) -> {type_of(expected)}
      return %0 : {type_of(expected)}
    }}
    """
    np.testing.assert_array_equal(run(text, x, np.float32(init)), expected)


def test_select_and_scatter_routes_to_the_first_maximum():
    x = np.array([[1, 5, 5, 2], [3, 0, 1, 7], [4, 4, 2, 2]], np.float32)
    source = np.array([[10, 20, 30], [40, 50, 60]], np.float32)
    text = """
    func.func @main(%x: tensor<3x4xf32>, %s: tensor<2x3xf32>, %z: tensor<f32>) -> tensor<3x4xf32> {
      %0 = "stablehlo.select_and_scatter"(%x, %s, %z) <{window_dimensions = array<i64: 2, 2>, window_strides = array<i64: 1, 1>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %c = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %c : tensor<i1>
      }, {
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s2 = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s2 : tensor<f32>
      }) : (tensor<3x4xf32>, tensor<2x3xf32>, tensor<f32>) -> tensor<3x4xf32>
      return %0 : tensor<3x4xf32>
    }
    """
    expected = np.zeros_like(x)
    for i, j in np.ndindex(2, 3):
        window = x[i:i + 2, j:j + 2]
        r, c = np.unravel_index(np.argmax(window), window.shape)  # first maximum in row-major order
        expected[i + r, j + c] += source[i, j]
    np.testing.assert_array_equal(run(text, x, source, np.float32(0)), expected)


def test_top_k_breaks_ties_by_index_and_ranks_nan_highest():
    x = np.array([[3, 1, 3, np.nan, 2], [5, 5, 1, 0, 5]], np.float32)
    values, indices = run("""
    func.func @main(%x: tensor<2x5xf32>) -> (tensor<2x3xf32>, tensor<2x3xi32>) {
      %v, %i = chlo.top_k(%x, k = 3) : tensor<2x5xf32> -> (tensor<2x3xf32>, tensor<2x3xi32>)
      return %v, %i : tensor<2x3xf32>, tensor<2x3xi32>
    }
    """, x)
    assert indices.tolist() == [[3, 0, 2], [0, 1, 4]]
    assert np.isnan(values[0, 0]) and values[0, 1:].tolist() == [3, 3] and values[1].tolist() == [5, 5, 5]


def test_batch_norm_inference():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    scale, offset, mean = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype(np.float32)
    text = """
    func.func @main(%x: tensor<2x3x4xf32>, %s: tensor<3xf32>, %o: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>) -> tensor<2x3x4xf32> {
      %0 = "stablehlo.batch_norm_inference"(%x, %s, %o, %m, %v) <{epsilon = 1.0e-3 : f32, feature_index = 1 : i64}> : (tensor<2x3x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4xf32>
      return %0 : tensor<2x3x4xf32>
    }
    """
    b = (slice(None), None)
    expected = ((x - mean[b]) / np.sqrt(var[b].astype(np.float64) + 1e-3) * scale[b] + offset[b]).astype(np.float32)
    np.testing.assert_allclose(run(text, x, scale, offset, mean, var), expected, rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["THREE_FRY", "PHILOX"])
def test_rng_bit_generator_is_a_counter_based_stream(algorithm):
    state = np.array([0x0123456789ABCDEF, 7] + ([0] if algorithm == "PHILOX" else []), np.uint64)
    n = state.size
    text = f"""
    func.func @main(%s: tensor<{n}xui64>) -> (tensor<{n}xui64>, tensor<2x4xui32>) {{
      %0, %1 = "stablehlo.rng_bit_generator"(%s) <{{rng_algorithm = #stablehlo<rng_algorithm {algorithm}>}}> : (tensor<{n}xui64>) -> (tensor<{n}xui64>, tensor<2x4xui32>)
      return %0, %1 : tensor<{n}xui64>, tensor<2x4xui32>
    }}
    """
    new_state, bits = run(text, state)
    key = (np.uint32(0x89ABCDEF), np.uint32(0x01234567))
    if algorithm == "THREE_FRY":
        counters = np.array([7, 8, 9, 10], np.uint64)
        x0, x1 = threefry2x32(key, (counters.astype(np.uint32), np.zeros(4, np.uint32)))
        expected = np.stack([x0, x1], -1).reshape(2, 4)
        assert new_state.tolist() == [state[0], 11]
    else:
        words = philox4x32(key, (np.array([7, 8], np.uint32), np.zeros(2, np.uint32), np.zeros(2, np.uint32), np.zeros(2, np.uint32)))
        expected = np.stack(words, -1).reshape(2, 4)
        assert new_state.tolist() == [state[0], 9, 0]
    assert bits.tolist() == expected.tolist()
    assert run(text, state)[1].tolist() == bits.tolist()  # deterministic in the state


def test_block_functions_match_random123_known_answers():
    u = np.uint32
    assert [int(v) for v in threefry2x32((u(0), u(0)), (u(0), u(0)))] == [0x6B200159, 0x99BA4EFE]
    assert [int(v) for v in threefry2x32((u(0x13198A2E), u(0x03707344)), (u(0x243F6A88), u(0x85A308D3)))] == [
        0xC4923A9C, 0x483DF7A0]
    assert [int(v) for v in philox4x32((u(0), u(0)), (u(0),) * 4)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert [int(v) for v in philox4x32((u(0xA4093822), u(0x299F31D0)),
                                       (u(0x243F6A88), u(0x85A308D3), u(0x13198A2E), u(0x03707344)))] == [
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_ttype_helper_spells_mlir_types():
    assert ttype((2, 3), np.float32) == "tensor<2x3xf32>" and ttype((), np.uint8) == "tensor<ui8>"


def test_fft_kinds():
    x = np.array([1, 2, 0, -1], np.float32)
    spectrum = ev("stablehlo.fft %x0, type = RFFT, length = [4]", x,
                  sig="(tensor<4xf32>) -> tensor<3xcomplex<f32>>")
    np.testing.assert_allclose(spectrum, np.fft.rfft(x), rtol=1e-6)
    back = ev("stablehlo.fft %x0, type = IRFFT, length = [4]", spectrum,
              sig="(tensor<3xcomplex<f32>>) -> tensor<4xf32>")
    np.testing.assert_allclose(back, x, atol=1e-6)
    z = x.astype(np.complex64)
    np.testing.assert_allclose(ev("stablehlo.fft %x0, type = FFT, length = [4]", z), np.fft.fft(x), rtol=1e-6)


def test_batch_norm_training_and_grad_follow_their_formulas():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    scale, offset = np.array([1.5, -0.5], np.float32), np.array([0.1, 0.2], np.float32)
    text = """
    func.func @main(%x: tensor<4x2x3xf32>, %s: tensor<2xf32>, %o: tensor<2xf32>) -> (tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>) {
      %y, %mean, %var = "stablehlo.batch_norm_training"(%x, %s, %o) <{epsilon = 1.0e-5 : f32, feature_index = 1 : i64}> : (tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>)
      return %y, %mean, %var : tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>
    }
    """
    y, mean, var = run(text, x, scale, offset)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(mean, xd.mean(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(var, xd.var(axis=(0, 2)), rtol=1e-5)
    b = (None, slice(None), None)
    expected = (xd - xd.mean(axis=(0, 2))[b]) / np.sqrt(xd.var(axis=(0, 2))[b] + 1e-5) * scale[b] + offset[b]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    grad = """
    func.func @main(%x: tensor<4x2x3xf32>, %s: tensor<2xf32>, %m: tensor<2xf32>, %v: tensor<2xf32>, %g: tensor<4x2x3xf32>) -> (tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>) {
      %gx, %gs, %go = "stablehlo.batch_norm_grad"(%x, %s, %m, %v, %g) <{epsilon = 1.0e-5 : f32, feature_index = 1 : i64}> : (tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<4x2x3xf32>) -> (tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>)
      return %gx, %gs, %go : tensor<4x2x3xf32>, tensor<2xf32>, tensor<2xf32>
    }
    """
    gy = rng.standard_normal(x.shape).astype(np.float32)
    gx, gs, go = run(grad, x, scale, mean, var, gy)
    np.testing.assert_allclose(go, gy.astype(np.float64).sum(axis=(0, 2)), rtol=1e-5)
    # grad_x is the derivative of sum(gy * y) with respect to x: check it numerically.
    eps = 1e-3
    probe = np.zeros_like(xd)
    probe[1, 0, 2] = eps

    def loss(xv):
        m, v = xv.mean(axis=(0, 2))[b], xv.var(axis=(0, 2))[b]
        return (gy * ((xv - m) / np.sqrt(v + 1e-5) * scale[b] + offset[b])).sum()
    numeric = (loss(xd + probe) - loss(xd - probe)) / (2 * eps)
    assert abs(gx[1, 0, 2] - numeric) < 1e-3


def test_tuples_and_optimization_barrier_pass_values_through():
    text = """
    func.func @main(%a: tensor<f32>, %b: tensor<2xi32>) -> (tensor<2xi32>, tensor<f32>) {
      %t = stablehlo.tuple %a, %b : tuple<tensor<f32>, tensor<2xi32>>
      %e = stablehlo.get_tuple_element %t[1] : (tuple<tensor<f32>, tensor<2xi32>>) -> tensor<2xi32>
      %0:2 = stablehlo.optimization_barrier %e, %a : tensor<2xi32>, tensor<f32>
      return %0#0, %0#1 : tensor<2xi32>, tensor<f32>
    }
    """
    out_b, out_a = run(text, np.float32(2.5), np.array([3, 4], np.int32))
    assert out_b.tolist() == [3, 4] and out_a == 2.5
