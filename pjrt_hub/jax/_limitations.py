"""What JAX cannot do on a served pjrt-hub plugin, and why: data, for the tests and the README.

Each entry names a JAX feature, the plugins it concerns, where the gap is (JAX itself, the
plugin's compiler, pjrt-hub's serving layer) and the error a user sees. The JAX test module turns
every entry into a strict xfail, so a gap that closes fails the run until its entry goes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JAX_LIMITATIONS", "JaxLimitation", "limitation"]


@dataclass(frozen=True)
class JaxLimitation:
    """One thing JAX does not do on a served plugin."""

    #: Short key the tests refer to.
    key: str
    #: What the user tries.
    feature: str
    #: Where the gap is and why.
    reason: str
    #: Plugins concerned (pjrt-hub registry names).
    plugins: tuple[str, ...] = ("numba_cpu", "reference")


JAX_LIMITATIONS: tuple[JaxLimitation, ...] = (
    JaxLimitation(
        "linalg_decompositions", "jnp.linalg.eig of a general matrix, jax.scipy.linalg.schur and hessenberg",
        "JAX lowers them only for its own platforms (LAPACK custom calls on 'cpu'): 'MLIR translation rule "
        "for primitive eig not found'. qr, eigh, svd, pinv, lstsq, inv, solve, cholesky, det and slogdet "
        "work: QR's custom calls and eigh's (lowered as for TPUs) run on the host's LAPACK"),
    JaxLimitation(
        "host_callbacks", "jax.debug.print, jax.pure_callback, io_callback",
        "JAX lowers host callbacks only for its own platforms (cpu, cuda, rocm, tpu): 'EmitPythonCallback "
        "not supported on numba_cpu backend' / 'MLIR translation rule for primitive debug_print not "
        "found'; a served plugin would need XLA's FFI or send/recv callbacks"),
    JaxLimitation(
        "partial_manual", "shard_map over only some axes of a mesh (auto axes left to the partitioner)",
        "pjrt-hub runs a partitioned program per device only when its manual computation covers every "
        "mesh axis; otherwise it runs the global program once, which a manual computation prevents"),
    JaxLimitation(
        "manual_inside_a_loop", "pmap or shard_map inside a traced loop (lax.fori_loop, scan or while_loop "
        "around a pmap)",
        "the per-device program is then a manual computation inside the global program's loop, and "
        "pjrt-hub runs a program per device only when a manual computation is @main's whole body: "
        "'unsupported op sdy.manual_computation'. Put the loop inside the pmap or shard_map instead"),
    JaxLimitation(
        "xla_option_values", "compiler_options={'xla_...': value} with a value XLA would refuse",
        "pjrt-hub's backends are not XLA: they take XLA's xla_* debug options, which frameworks send to "
        "every plugin, and ignore them without reading their values (an option that is neither XLA's nor "
        "the backend's own is refused: 'No such compile option')"),
    JaxLimitation(
        "noncanonical_bools", "a boolean array whose bytes are neither 0 nor 1 (numpy makes one with "
        ".view(bool)), viewed back as integers",
        "both tiers read a boolean as True or False, so viewing it as int8 gives 1 where XLA passes the "
        "stored byte through; every other operation on it agrees with XLA"),
    JaxLimitation(
        "token_buffers", "reading a token's buffer (token._buf) as an array",
        "tokens are held as empty boolean arrays (pred[0], the buffer JAX passes for a token), so a "
        "token's buffer reads as an empty array where XLA refuses 'a token-shape buffer'; tokens passed "
        "through jitted functions, create_token and after_all work"),
    JaxLimitation(
        "platform_identity", "lax.platform_dependent(cpu=..., default=...) and other code that branches on "
        "the platform name",
        "a served plugin is its own platform ('numba_cpu', 'reference'), not 'cpu': JAX takes the default "
        "branch. Name the plugin's platform (platform_dependent(numba_cpu=...)), or register it with "
        "platform_name='cpu' to be lowered as JAX's CPU (which brings CPU-only custom calls)"),
)

_BY_KEY = {entry.key: entry for entry in JAX_LIMITATIONS}


def limitation(key: str) -> JaxLimitation:
    """The entry for ``key``; KeyError names the known keys."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no JAX limitation {key!r}; known: {', '.join(sorted(_BY_KEY))}") from None
