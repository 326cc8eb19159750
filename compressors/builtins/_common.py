"""Small helpers shared by the built-in compressor families (not part of the plugin API)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from ..api import CompressorError, TensorInfo, check_finite

__all__ = [
    "device_generator",
    "counter_key",
    "counter_hash",
    "hash32",
    "hash32_numpy",
    "matrix_shape",
    "require_finite",
    "finite_summary",
    "DeferredCheck",
]

_M32 = 0xFFFFFFFF
_M64 = (1 << 64) - 1


def device_generator(info: TensorInfo, device: torch.device, salt: int = 0) -> torch.Generator:
    """A generator on ``device`` seeded like ``info.generator(salt)``.

    Random numbers are drawn where the tensor lives, so no host round trip is needed on
    GPU. Draws are reproducible on the same device type and GPU model, but CPU and CUDA
    (and CUDA on different GPU models) give different numbers: use this only for
    sender-side randomness (stochastic rounding, threshold sampling). Randomness both
    sides must agree on comes from ``info.generator()`` on CPU.
    """
    seed = info.generator(salt).initial_seed()
    if device.type == "cpu":
        g = torch.Generator(device="cpu")
    else:
        g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def counter_key(seed: int, salt: int = 0) -> int:
    """A 64-bit key in ``[0, 2**64)`` for :func:`counter_hash`, from a seed (``info.seed``) and a salt.

    SplitMix64's finalizer of ``seed + salt * 0x9E3779B97F4A7C15`` (mod 2**64), computed with
    Python integers on the host: both halves of the key depend on every bit of the seed.
    """
    z = (seed + salt * 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _signed32(c: int) -> int:
    """``c`` in [0, 2**32) as the int in [-2**31, 2**31) congruent to it mod 2**32."""
    return c - (1 << 32) if c >= 1 << 31 else c


# murmur3 fmix32 multipliers and the 32-bit golden ratio, as signed 32-bit ints (all three are
# above 2**31, so negative here, |c| <= 2.05e9 < 2**31): x * c with 0 <= x < 2**32 stays
# below 2**63 in magnitude (no int64 overflow anywhere, even after adding a 32-bit key), and
# its low 32 bits, kept by the mask (two's complement), are those of the unsigned product.
_FMIX_C1 = _signed32(0x85EBCA6B)
_FMIX_C2 = _signed32(0xC2B2AE35)
_GOLDEN32 = _signed32(0x9E3779B9)


def _fmix32_(h: Tensor) -> Tensor:
    """murmur3's 32-bit finalizer, in place on int64 ``h`` holding values in [0, 2**32)."""
    h.bitwise_xor_(h >> 16)
    h.mul_(_FMIX_C1).bitwise_and_(_M32)
    h.bitwise_xor_(h >> 13)
    h.mul_(_FMIX_C2).bitwise_and_(_M32)
    return h.bitwise_xor_(h >> 16)


def hash32(counters: Tensor, key_lo: int, key_hi: int) -> Tensor:
    """:func:`counter_hash` with the key given as its two 32-bit halves (each in [0, 2**32)).

    ``fmix32(fmix32((c * 0x9E3779B9 + key_lo) mod 2**32) xor key_hi)``, all mod 2**32, as
    int64 tensor operations on ``counters``' device (the CUDA path, and the body of compiled
    kernels: exact integer operations only). :func:`hash32_numpy` is the CPU twin.
    """
    h = counters.to(torch.int64).bitwise_and(_M32)  # (...,) counter mod 2**32
    h.mul_(_GOLDEN32).add_(key_lo).bitwise_and_(_M32)
    _fmix32_(h).bitwise_xor_(key_hi)
    return _fmix32_(h)


def hash32_numpy(counters: np.ndarray, key_lo: int, key_hi: int) -> np.ndarray:
    """:func:`hash32` on a NumPy uint32 array, in place (returns it): the same values.

    uint32 arithmetic wraps mod 2**32 by definition, so no masks are needed and the
    arrays are half as wide: 3x faster than the int64 tensor version on CPU (210k
    counters, one thread: 1.4 ms vs 4.7 ms).
    """
    h, tmp = counters, np.empty_like(counters)
    h *= np.uint32(0x9E3779B9)
    h += np.uint32(key_lo)
    _fmix32_numpy_(h, tmp)
    h ^= np.uint32(key_hi)
    return _fmix32_numpy_(h, tmp)


def _fmix32_numpy_(h: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finalizer in place on uint32 ``h`` (``tmp``: scratch of the same shape)."""
    for shift, mult in ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, None)):
        h ^= np.right_shift(h, shift, out=tmp)
        if mult is not None:
            h *= np.uint32(mult)
    return h


def counter_hash(key: int, counters: Tensor) -> Tensor:
    """Counter-based random numbers: a 32-bit hash of ``(key, counter)`` per element of ``counters``.

    ``counters``: integer tensor on any device; only the low 32 bits of each counter are
    mixed, so counters that differ by a multiple of 2**32 get the same value. ``key``: a
    64-bit key (:func:`counter_key`). Returns int64 of the same shape with values in
    ``[0, 2**32)``, computed on ``counters``' device::

        x = ((counter mod 2**32) * 0x9E3779B9 + (key mod 2**32)) mod 2**32
        h = fmix32(fmix32(x) xor (key >> 32))

    where ``fmix32`` is murmur3's finalizer (``x ^= x >> 16; x *= 0x85EBCA6B; x ^= x >> 13;
    x *= 0xC2B2AE35; x ^= x >> 16``, products mod 2**32). Only exact integer arithmetic mod
    2**32 (on CPU NumPy uint32, which wraps by definition; elsewhere int64 tensors that never
    overflow: shifts of non-negative values, xor, masks, products below 2**63), so the result
    is bit-identical on CPU and every CUDA device, and equal to the same formula on Python
    integers. Unlike a seeded ``torch.Generator`` the i-th value does not depend on how many
    were drawn before it, so both ends of a link compute any subset independently.
    """
    lo, hi = key & _M32, (key >> 32) & _M32
    if counters.device.type == "cpu":
        c = counters.to(torch.int64).bitwise_and(_M32).numpy().astype(np.uint32)
        return torch.from_numpy(hash32_numpy(c, lo, hi).astype(np.int64))
    return hash32(counters, lo, hi)


def matrix_shape(shape: torch.Size | tuple[int, ...]) -> tuple[int, int]:
    """The 2D ``(rows, cols)`` view a row-wise compressor uses for a tensor of ``shape``.

    * rank >= 3: ``(shape[0] * shape[1], rest)``: a row is one ``x[i, j]`` slice, i.e. one
      token's features for ``(B, T, d)`` and one sample-channel plane ``H*W`` for
      ``(B, C, H, W)`` activations. A pure view (no copy).
    * rank 2: the rows of the matrix.
    * rank <= 1 (e.g. a flat DDP bucket): one row holding the whole tensor.
    """
    shape = tuple(shape)
    if len(shape) >= 3:
        rows = shape[0] * shape[1]
        cols = 1
        for s in shape[2:]:
            cols *= s
        return rows, cols
    if len(shape) == 2:
        return shape[0], shape[1]
    n = shape[0] if shape else 1
    return 1, n


def finite_summary(x: Tensor) -> Tensor:
    """A one-pass reduction of ``x`` that is non-finite whenever ``x`` has a NaN or Inf.

    ``x.sum()`` (NaN and Inf propagate; a sum of finite values can only overflow, which
    :func:`require_finite` then settles with the exact check), except for fp16, whose sums
    overflow at 65504 easily: there ``aminmax`` (never overflows). One read of ``x``,
    versus ``torch.isfinite(x).all()``'s four elementwise passes and temporaries (measured
    on CPU, one thread, 8 MB fp32: 0.5 ms versus 11-17 ms).
    """
    x = x.detach()
    if x.dtype == torch.float16:
        return torch.stack(torch.aminmax(x)) if x.numel() else x.new_zeros(())
    return x.sum()


def require_finite(x: Tensor, info: TensorInfo, name: str, summary: Tensor | None = None) -> None:
    """Refuse NaN/Inf input with :func:`check_finite`'s clear message.

    ``summary`` is a small reduction the compressor computes anyway (min/max, norms) that is
    non-finite whenever ``x`` is: checking it costs one scalar sync instead of a full pass.
    Without one, :func:`finite_summary` is computed (one read of ``x``). A non-finite summary
    from overflow of a finite ``x`` falls through to the exact check. Integer tensors are
    always finite.
    """
    if not (x.is_floating_point() or x.is_complex()):
        return
    if summary is None:
        summary = finite_summary(x)
    if bool(torch.isfinite(summary).all()):
        return
    check_finite(x, info, name)


class DeferredCheck:
    """A finiteness check that costs no host synchronization on an accelerator.

    :meth:`check` takes a small device tensor ``summary`` (a reduction the compressor made of
    its *output*, non-finite iff the output is). On CPU it is read at once (no sync exists
    there). On CUDA it is copied without blocking into pinned host memory with an event, and
    read at the next :meth:`check` (or :meth:`flush`) of the same instance, by when the event
    has long completed: a NaN/Inf payload is then refused one call late, naming the call that
    produced it, and the training step that consumed it already had a non-finite loss (which
    the trainer refuses on its own). ``message(info)`` builds the error text.
    """

    def __init__(self) -> None:
        self._pending: tuple[Tensor, Any, TensorInfo, Callable[[TensorInfo], str]] | None = None

    def check(self, summary: Tensor, info: TensorInfo, message: Callable[[TensorInfo], str]) -> None:
        self.flush()
        if summary.device.type != "cuda":
            if not bool(torch.isfinite(summary).all()):
                raise CompressorError(message(info))
            return
        flag = (~torch.isfinite(summary)).any().reshape(1)
        host = torch.empty(1, dtype=torch.bool, pin_memory=True)
        host.copy_(flag, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending = (host, event, info, message)

    def flush(self) -> None:
        """Read the pending CUDA flag (waits for its event) and raise if it was set."""
        pending, self._pending = self._pending, None
        if pending is not None:
            host, event, info, message = pending
            event.synchronize()
            if bool(host[0]):
                raise CompressorError(message(info))
