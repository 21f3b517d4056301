"""Shape, data-movement and contraction ops of the reference interpreter.

Everything follows docs/spec.md of StableHLO: start indices of ``dynamic_slice``,
``dynamic_update_slice`` and ``gather`` are clamped so the slice stays inside the operand;
``dot_general`` lays its result out as (batch, lhs free, rhs free); ``pad`` takes negative edge
padding as cropping. Contractions (dot, convolution) accumulate in float64 (int64 for integers,
which wraps like the narrower type once rounded back).
"""

from __future__ import annotations

import itertools

import numpy as np

from pjrt_hub.backends.stablehlo import ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers

from .elementwise import compute_float, is_float_dtype, total_order_key
from .registry import register

__all__ = ["clamp_start", "dot_general", "gather", "pad_array", "scatter_destinations"]


@register("stablehlo.constant")
def _constant(ctx, op):
    return op.attributes["value"]


@register("stablehlo.iota")
def _iota(ctx, op):
    ty = op.results[0].type
    d = op.attributes["iota_dimension"]
    shape = [1] * ty.rank
    shape[d] = ty.shape[d]
    line = np.arange(ty.shape[d], dtype=np.int64).reshape(shape)
    if is_float_dtype(ty.dtype) and ty.dtype.itemsize < 4:
        line = line.astype(np.float32)  # bf16/f16 round from f32, as XLA converts
    return np.broadcast_to(line.astype(ty.dtype), ty.shape)


@register("stablehlo.broadcast_in_dim")
def _broadcast_in_dim(ctx, op, x):
    out = op.results[0].type
    dims = op.attributes["broadcast_dimensions"]
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    xt = np.transpose(x, order) if order != list(range(len(dims))) else x
    shape = [1] * out.rank
    for i in order:
        shape[dims[i]] = x.shape[i]
    return np.broadcast_to(xt.reshape(shape), out.shape)


@register("stablehlo.broadcast")
def _broadcast(ctx, op, x):
    sizes = tuple(op.attributes["broadcast_sizes"])
    return np.broadcast_to(x, sizes + x.shape)


@register("stablehlo.reshape")
def _reshape(ctx, op, x):
    return np.reshape(x, op.results[0].type.shape)


@register("stablehlo.transpose")
def _transpose(ctx, op, x):
    return np.transpose(x, op.attributes["permutation"])


@register("stablehlo.reverse")
def _reverse(ctx, op, x):
    dims = tuple(op.attributes["dimensions"])
    return np.flip(x, axis=dims) if dims else x


@register("stablehlo.slice")
def _slice(ctx, op, x):
    a = op.attributes
    return x[tuple(slice(s, lim, st) for s, lim, st in zip(a["start_indices"], a["limit_indices"], a["strides"]))]


def clamp_start(indices, operand_shape, sizes) -> list[int]:
    """Start indices clamped so that a slice of ``sizes`` fits in the operand (spec)."""
    return [int(min(max(int(np.asarray(i)), 0), dim - size))
            for i, dim, size in zip(indices, operand_shape, sizes)]


@register("stablehlo.dynamic_slice")
def _dynamic_slice(ctx, op, x, *indices):
    sizes = op.attributes["slice_sizes"]
    start = clamp_start(indices, x.shape, sizes)
    return x[tuple(slice(s, s + n) for s, n in zip(start, sizes))]


@register("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(ctx, op, x, update, *indices):
    start = clamp_start(indices, x.shape, update.shape)
    # In place when nothing else holds the operand (a scan's stacked outputs, from its
    # second step on); otherwise a copy.
    out = ctx.donor(x.shape, x.dtype)
    if out is not x:
        out = np.array(x, copy=True)
    out[tuple(slice(s, s + n) for s, n in zip(start, update.shape))] = update
    return out


@register("stablehlo.concatenate")
def _concatenate(ctx, op, *xs):
    return np.concatenate(xs, axis=op.attributes["dimension"])


def pad_array(x: np.ndarray, value, low, high, interior) -> np.ndarray:
    """``stablehlo.pad``: interior padding, then edge padding (negative edges crop)."""
    value = np.asarray(value, dtype=x.dtype)
    inner = [n + max(n - 1, 0) * i for n, i in zip(x.shape, interior)]
    grown = [m + max(lo, 0) + max(hi, 0) for m, lo, hi in zip(inner, low, high)]
    out = np.full(grown, value, dtype=x.dtype)
    place = tuple(slice(max(lo, 0), max(lo, 0) + m, i + 1) for m, lo, i in zip(inner, low, interior))
    out[place] = x
    crop = tuple(slice(max(-lo, 0), g - max(-hi, 0)) for g, lo, hi in zip(grown, low, high))
    return out[crop]


@register("stablehlo.pad")
def _pad(ctx, op, x, value):
    a = op.attributes
    return pad_array(x, value, a["edge_padding_low"], a["edge_padding_high"], a["interior_padding"])


# -- contractions -----------------------------------------------------------------------------

def _wide(dt: np.dtype) -> np.dtype:
    if dt.kind == "c":
        return np.dtype(np.complex128)
    if is_float_dtype(dt):
        return np.dtype(np.float64)
    if dt == np.bool_:
        return np.dtype(np.int64)
    return np.dtype(np.uint64) if dt.kind == "u" else np.dtype(np.int64)


def _narrow(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    if dt == np.bool_:
        return values != 0
    if is_float_dtype(dt) or dt.kind == "c":
        return compute_float(lambda v: v, values, dtype=dt)
    return values.astype(dt)


def dot_general(a: np.ndarray, b: np.ndarray, dn: DotDimensionNumbers, out_dtype: np.dtype) -> np.ndarray:
    lb, rb = list(dn.lhs_batching_dimensions), list(dn.rhs_batching_dimensions)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(a.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(b.ndim) if d not in rb and d not in rc]
    wide = np.promote_types(_wide(a.dtype), _wide(b.dtype))
    at = np.transpose(a, lb + lf + lc).astype(wide)
    bt = np.transpose(b, rb + rc + rf).astype(wide)
    batch = [a.shape[d] for d in lb]
    m = [a.shape[d] for d in lf]
    n = [b.shape[d] for d in rf]
    k = int(np.prod([a.shape[d] for d in lc], dtype=np.int64))
    nb, nm, nn = (int(np.prod(s, dtype=np.int64)) for s in (batch, m, n))
    product = np.matmul(at.reshape(nb, nm, k), bt.reshape(nb, k, nn))
    return _narrow(product.reshape(batch + m + n), out_dtype)


@register("stablehlo.dot_general")
def _dot_general(ctx, op, a, b):
    return dot_general(a, b, op.attributes["dot_dimension_numbers"], op.results[0].type.dtype)


@register("stablehlo.dot")
def _dot(ctx, op, a, b):
    dn = DotDimensionNumbers((), (), (a.ndim - 1,), (0,))
    return dot_general(a, b, dn, op.results[0].type.dtype)


def _dilate(x: np.ndarray, factors, axes) -> np.ndarray:
    if all(f == 1 for f in factors):
        return x
    shape = list(x.shape)
    index = [slice(None)] * x.ndim
    for f, ax in zip(factors, axes):
        shape[ax] = (x.shape[ax] - 1) * f + 1 if x.shape[ax] else 0
        index[ax] = slice(None, None, f)
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(index)] = x
    return out


@register("stablehlo.convolution")
def _convolution(ctx, op, lhs, rhs):
    a = op.attributes
    dn: ConvDimensionNumbers = a["dimension_numbers"]
    out_type = op.results[0].type
    n = len(dn.input_spatial_dimensions)
    wide = np.promote_types(_wide(lhs.dtype), _wide(rhs.dtype))
    x = np.transpose(lhs, [dn.input_batch_dimension, dn.input_feature_dimension,
                           *dn.input_spatial_dimensions]).astype(wide)
    k = np.transpose(rhs, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                           *dn.kernel_spatial_dimensions]).astype(wide)
    spatial_axes = list(range(2, 2 + n))
    x = _dilate(x, a["lhs_dilation"], spatial_axes)
    pad = np.asarray(a["padding"]).reshape(n, 2)
    x = pad_array(x, 0, [0, 0] + [int(p) for p in pad[:, 0]], [0, 0] + [int(p) for p in pad[:, 1]],
                  [0] * (n + 2))
    reversed_axes = [2 + i for i, r in enumerate(a["window_reversal"]) if r]
    if reversed_axes:
        k = np.flip(k, axis=tuple(reversed_axes))
    strides, rdil = a["window_strides"], a["rhs_dilation"]
    fgc, bgc = a["feature_group_count"], a["batch_group_count"]
    batch, channels = x.shape[:2]
    out_features, in_per_group = k.shape[:2]
    out_spatial = [out_type.shape[d] for d in dn.output_spatial_dimensions]
    n_out = int(np.prod(out_spatial, dtype=np.int64))
    result = np.zeros((batch // bgc, out_features, n_out), dtype=wide)
    for tap in itertools.product(*(range(s) for s in k.shape[2:])):
        window = tuple(slice(t * d, t * d + s * (o - 1) + 1, s) if o > 0 else slice(0, 0)
                       for t, d, s, o in zip(tap, rdil, strides, out_spatial))
        patch = x[(slice(None), slice(None)) + window].reshape(batch, channels, n_out)
        w = k[(slice(None), slice(None)) + tap]  # (O, I)
        if bgc > 1:
            p = patch.reshape(bgc, batch // bgc, channels, n_out)
            wg = w.reshape(bgc, out_features // bgc, in_per_group)
            contrib = np.einsum("gncp,goc->ngop", p, wg).reshape(batch // bgc, out_features, n_out)
        else:
            p = patch.reshape(batch, fgc, in_per_group, n_out)
            wg = w.reshape(fgc, out_features // fgc, in_per_group)
            contrib = np.einsum("ngip,goi->ngop", p, wg).reshape(batch, out_features, n_out)
        result += contrib
    result = result.reshape([batch // bgc, out_features] + out_spatial)
    # Back to the output layout: canonical axis j goes to output dimension order[j].
    order = [dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions]
    inverse = np.argsort(order)
    return _narrow(np.transpose(result, inverse), out_type.dtype)


# -- gather / scatter index arithmetic --------------------------------------------------------

def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices with the index-vector dimension last: shape (*batch, K)."""
    if index_vector_dim >= indices.ndim:
        return indices[..., None].astype(np.int64)
    return np.moveaxis(indices, index_vector_dim, -1).astype(np.int64)


def _batch_position(batch_shape, axis: int) -> np.ndarray:
    shape = [1] * len(batch_shape)
    shape[axis] = batch_shape[axis]
    return np.arange(batch_shape[axis], dtype=np.int64).reshape(shape)


def gather(operand: np.ndarray, indices: np.ndarray, dn: GatherDimensionNumbers, slice_sizes) -> np.ndarray:
    vectors = _index_vectors(indices, dn.index_vector_dim)
    batch_shape = vectors.shape[:-1]
    nb = len(batch_shape)
    offset_operand_dims = [d for d in range(operand.ndim)
                           if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    offset_sizes = [slice_sizes[d] for d in offset_operand_dims]
    no = len(offset_sizes)
    index = []
    for d in range(operand.ndim):
        start = np.zeros(batch_shape, dtype=np.int64)
        if d in dn.start_index_map:
            k = dn.start_index_map.index(d)
            start = np.clip(vectors[..., k], 0, operand.shape[d] - slice_sizes[d])
        if d in dn.operand_batching_dims:
            d_start = dn.start_indices_batching_dims[dn.operand_batching_dims.index(d)]
            axis = d_start - (0 if d_start < dn.index_vector_dim else 1)
            start = start + _batch_position(batch_shape, axis)
        start = start.reshape(batch_shape + (1,) * no)
        if d in offset_operand_dims:
            j = offset_operand_dims.index(d)
            shape = [1] * no
            shape[j] = offset_sizes[j]
            start = start + np.arange(offset_sizes[j], dtype=np.int64).reshape((1,) * nb + tuple(shape))
        index.append(start)
    broadcast = np.broadcast_arrays(*index)
    gathered = operand[tuple(broadcast)]  # (*batch, *offsets)
    rank = nb + no
    batch_dims = [d for d in range(rank) if d not in dn.offset_dims]
    source = [0] * rank
    for i, d in enumerate(batch_dims):
        source[d] = i
    for j, d in enumerate(dn.offset_dims):
        source[d] = nb + j
    return np.transpose(gathered, source)


@register("stablehlo.gather")
def _gather(ctx, op, operand, indices):
    return gather(operand, indices, op.attributes["dimension_numbers"], op.attributes["slice_sizes"])


def scatter_destinations(operand_shape, indices: np.ndarray, update_shape, dn) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Flat destination index of every update element, whether its window is in bounds (XLA
    skips a whole update window that does not fit), and the permutation that puts the updates
    in (scatter batch..., window...) order."""
    vectors = _index_vectors(indices, dn.index_vector_dim)
    batch_shape = vectors.shape[:-1]
    rank = len(operand_shape)
    scatter_dims = [d for d in range(len(update_shape)) if d not in dn.update_window_dims]
    perm = scatter_dims + list(dn.update_window_dims)
    window_sizes = [update_shape[d] for d in dn.update_window_dims]
    window_operand_dims = [d for d in range(rank)
                           if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    nb, nw = len(batch_shape), len(window_sizes)
    valid = np.ones(batch_shape, dtype=bool)
    index = []
    for d in range(rank):
        start = np.zeros(batch_shape, dtype=np.int64)
        if d in dn.scatter_dims_to_operand_dims:
            start = vectors[..., dn.scatter_dims_to_operand_dims.index(d)]
        if d in dn.input_batching_dims:
            d_start = dn.scatter_indices_batching_dims[dn.input_batching_dims.index(d)]
            axis = d_start - (0 if d_start < dn.index_vector_dim else 1)
            start = start + _batch_position(batch_shape, axis)
        size = window_sizes[window_operand_dims.index(d)] if d in window_operand_dims else 1
        valid &= (start >= 0) & (start + size <= operand_shape[d])
        start = start.reshape(batch_shape + (1,) * nw)
        if d in window_operand_dims:
            j = window_operand_dims.index(d)
            shape = [1] * nw
            shape[j] = window_sizes[j]
            start = start + np.arange(window_sizes[j], dtype=np.int64).reshape((1,) * nb + tuple(shape))
        index.append(start)
    broadcast = np.broadcast_arrays(*index)
    full = tuple(batch_shape) + tuple(window_sizes)
    mask = np.broadcast_to(valid.reshape(batch_shape + (1,) * nw), full)
    clipped = [np.clip(i, 0, max(s - 1, 0)) for i, s in zip(broadcast, operand_shape)]
    flat = np.ravel_multi_index(clipped, operand_shape) if rank else np.zeros(full, dtype=np.int64)
    return flat.reshape(-1), mask.reshape(-1), perm


# -- misc -------------------------------------------------------------------------------------

@register("chlo.top_k")
def _top_k(ctx, op, x):
    k = op.attributes["k"]
    if is_float_dtype(x.dtype):
        key = total_order_key(x.astype(np.float64) if x.dtype.itemsize < 4 else x).astype(np.int64)
    elif x.dtype == np.bool_:
        key = x.astype(np.int64)
    elif x.dtype == np.uint64:
        key = (x ^ np.uint64(1 << 63)).view(np.int64)
    else:
        key = x.astype(np.int64)
    # Descending, ties broken by the lower index: a stable sort of the negated key (the keys
    # above never reach INT64_MIN, except the rare uint64 0, handled by the flip below).
    order = np.argsort(np.where(key == np.iinfo(np.int64).min, np.iinfo(np.int64).max, -key),
                       axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    return [values, order.astype(op.results[1].type.dtype)]


@register("stablehlo.get_dimension_size")
def _get_dimension_size(ctx, op, x):
    return np.array(x.shape[op.attributes["dimension"]], dtype=op.results[0].type.dtype)


@register("stablehlo.tuple")
def _tuple(ctx, op, *xs):
    return tuple(xs)


@register("stablehlo.get_tuple_element")
def _get_tuple_element(ctx, op, t):
    return t[op.attributes["index"]]


def _feature_shape(x: np.ndarray, feature_index: int) -> list[int]:
    shape = [1] * x.ndim
    shape[feature_index] = x.shape[feature_index]
    return shape


@register("stablehlo.batch_norm_inference")
def _batch_norm_inference(ctx, op, x, scale, offset, mean, variance):
    fi = op.attributes["feature_index"]
    eps = op.attributes["epsilon"]
    shape = _feature_shape(x, fi)

    def f(x, scale, offset, mean, variance):
        return (x - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + eps) \
            * scale.reshape(shape) + offset.reshape(shape)
    return compute_float(f, x, scale, offset, mean, variance)


@register("stablehlo.batch_norm_training")
def _batch_norm_training(ctx, op, x, scale, offset):
    fi = op.attributes["feature_index"]
    eps = op.attributes["epsilon"]
    shape = _feature_shape(x, fi)
    axes = tuple(d for d in range(x.ndim) if d != fi)
    xw = x.astype(np.float64)
    mean = xw.mean(axis=axes)
    var = ((xw - mean.reshape(shape)) ** 2).mean(axis=axes)
    out = (xw - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) \
        * scale.astype(np.float64).reshape(shape) + offset.astype(np.float64).reshape(shape)
    dt = x.dtype
    return [compute_float(lambda v: v, out, dtype=dt), compute_float(lambda v: v, mean, dtype=dt),
            compute_float(lambda v: v, var, dtype=dt)]


@register("stablehlo.batch_norm_grad")
def _batch_norm_grad(ctx, op, x, scale, mean, variance, grad_output):
    fi = op.attributes["feature_index"]
    eps = op.attributes["epsilon"]
    shape = _feature_shape(x, fi)
    axes = tuple(d for d in range(x.ndim) if d != fi)
    count = x.size // x.shape[fi]
    xw, gy = x.astype(np.float64), grad_output.astype(np.float64)
    mu, var = mean.astype(np.float64).reshape(shape), variance.astype(np.float64).reshape(shape)
    inv_std = 1.0 / np.sqrt(var + eps)
    x_hat = (xw - mu) * inv_std
    grad_scale = (gy * x_hat).sum(axis=axes)
    grad_offset = gy.sum(axis=axes)
    grad_x = scale.astype(np.float64).reshape(shape) * inv_std / count * (
        count * gy - grad_offset.reshape(shape) - x_hat * grad_scale.reshape(shape))
    dt = x.dtype
    return [compute_float(lambda v: v, grad_x, dtype=dt), compute_float(lambda v: v, grad_scale, dtype=dt),
            compute_float(lambda v: v, grad_offset, dtype=dt)]


@register("stablehlo.custom_call")
def _custom_call(ctx, op, *operands):
    """The custom calls JAX emits off XLA's platforms that no StableHLO rewrite covers (QR's and
    eigh's): on the host (see backends/stablehlo/linalg_calls.py). check_supported refuses any
    other."""
    from pjrt_hub.backends.stablehlo.linalg_calls import custom_call_host

    from .interpreter import Results

    config = op.attributes.get("backend_config")
    return Results(custom_call_host(str(op.call_target), operands, config if isinstance(config, str) else ""))


@register("stablehlo.fft")
def _fft(ctx, op, x):
    from pjrt_hub.backends.stablehlo import FftType
    from pjrt_hub.backends.stablehlo.fft import fft_host

    return fft_host(x, str(FftType(op.attributes["fft_type"])), tuple(op.attributes["fft_length"]),
                    op.results[0].type.dtype)
