"""``stablehlo.rng_bit_generator``: counter-based random bits (Threefry-2x32, Philox-4x32).

The spec makes the output implementation-defined (a deterministic function of the state).
Here the state is laid out as XLA's RNG expander lays it out: ``state[0]`` is the 64-bit key,
the following words the counter. THREE_FRY numbers the outputs of a call with consecutive
64-bit counters starting at ``state[1]`` and returns ``state[1] + count``; PHILOX uses a
128-bit counter (``state[1]``, ``state[2]`` when present) and advances it by the number of
4x32-bit blocks drawn. DEFAULT is PHILOX, as on XLA:CPU. The block functions are checked against
the Random123 known-answer vectors; the exact stream XLA produces for a given shape is not
promised (and JAX's default PRNG, threefry, lowers to plain integer ops, not to this op).
"""

from __future__ import annotations

import numpy as np

from pjrt_hub.backends.stablehlo import RngAlgorithm

from .registry import register

__all__ = ["philox4x32", "threefry2x32"]

_U32 = np.uint32
_MASK32 = 0xFFFFFFFF


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def threefry2x32(key: tuple[np.ndarray, np.ndarray], counter: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 with 20 rounds on uint32 arrays (broadcasting)."""
    with np.errstate(over="ignore"):
        return _threefry2x32(key, counter)


def _threefry2x32(key, counter):
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    k0, k1 = (np.asarray(k, dtype=_U32) for k in key)
    ks = (k0, k1, _U32(0x1BD11BDA) ^ k0 ^ k1)
    x0 = np.asarray(counter[0], dtype=_U32) + ks[0]
    x1 = np.asarray(counter[1], dtype=_U32) + ks[1]
    for block in range(5):
        for r in rotations[block % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + _U32(block + 1)
    return x0, x1


def philox4x32(key: tuple[np.ndarray, np.ndarray], counter: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Philox-4x32 with 10 rounds on uint32 arrays (broadcasting)."""
    with np.errstate(over="ignore"):
        return _philox4x32(key, counter)


def _philox4x32(key, counter):
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    w0, w1 = _U32(0x9E3779B9), _U32(0xBB67AE85)
    k0, k1 = (np.asarray(k, dtype=_U32) for k in key)
    c0, c1, c2, c3 = (np.asarray(c, dtype=_U32) for c in counter)
    for _ in range(10):
        p0 = m0 * c0.astype(np.uint64)
        p1 = m1 * c2.astype(np.uint64)
        hi0, lo0 = (p0 >> np.uint64(32)).astype(_U32), (p0 & np.uint64(_MASK32)).astype(_U32)
        hi1, lo1 = (p1 >> np.uint64(32)).astype(_U32), (p1 & np.uint64(_MASK32)).astype(_U32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = k0 + w0, k1 + w1
    return c0, c1, c2, c3


def _split64(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.uint64)
    return (x & np.uint64(_MASK32)).astype(_U32), (x >> np.uint64(32)).astype(_U32)


def _bits(words32: np.ndarray, dtype: np.dtype, count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` from a flat stream of uint32 words."""
    raw = np.ascontiguousarray(words32.astype(_U32)).view(np.uint8)
    need = count * dtype.itemsize
    return raw[:need].view(dtype)


@register("stablehlo.rng_bit_generator")
def _rng_bit_generator(ctx, op, state):
    algorithm = RngAlgorithm(op.attributes.get("rng_algorithm", RngAlgorithm.DEFAULT))
    out_type = op.results[1].type
    dtype = out_type.dtype
    count = out_type.size
    state = np.asarray(state, dtype=np.uint64)
    key = _split64(state[0])
    words_needed = -(-count * dtype.itemsize // 4)
    new_state = state.copy()
    if algorithm == RngAlgorithm.THREE_FRY:
        n_blocks = -(-words_needed // 2)
        counters = state[1] + np.arange(n_blocks, dtype=np.uint64)
        x0, x1 = threefry2x32(key, _split64(counters))
        words = np.stack([x0, x1], axis=-1).reshape(-1)
        new_state[1] = state[1] + np.uint64(n_blocks)
    else:
        n_blocks = -(-words_needed // 4)
        low = state[1] + np.arange(n_blocks, dtype=np.uint64)
        carry = (low < state[1]).astype(np.uint64)
        high = (state[2] if state.size > 2 else np.uint64(0)) + carry
        c = _split64(low) + _split64(high)
        words = np.stack(philox4x32(key, c), axis=-1).reshape(-1)
        end = state[1] + np.uint64(n_blocks)
        new_state[1] = end
        if state.size > 2:
            new_state[2] = state[2] + np.uint64(1 if end < state[1] else 0)
    values = _bits(words, dtype, count).reshape(out_type.shape)
    return [new_state.astype(op.results[0].type.dtype), values]
