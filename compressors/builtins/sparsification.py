"""Sparsification: ``topk``, ``randomk`` and DGC-style ``threshold``.

* TopK keeps the largest-magnitude values (Aji & Heafield 2017, "Sparse Communication for
  Distributed Gradient Descent"; Stich et al. 2018, "Sparsified SGD with Memory").
* RandomK keeps values at positions hashed from the shared seed, so only values travel
  (Wangni et al. 2018, "Gradient Sparsification for Communication-Efficient Distributed
  Optimization"; Stich et al. 2018).
* Threshold estimates the top-ratio magnitude threshold from a random sample and keeps
  everything above it (Lin et al. 2018, "Deep Gradient Compression"), so the payload size
  varies with the data.

Selection (topk, and threshold's cap): exactly ``k`` positions with the largest ``|x|``;
among positions whose magnitude equals the k-th largest magnitude (ties), the lowest flat
positions are kept. :func:`topk_positions` finds them without sorting the tensor: a
random sample of ``|x|`` gives a value ``lo`` that is, with overwhelming probability, at
most the k-th largest; the positions with ``|x| >= lo`` (sorted, a few percent more than
``k``) are the candidates, and the exact k-th largest among them is found by selection
(``kthvalue``) on that short list. If the sample was unlucky (fewer than ``k``
candidates) the selection runs on the whole tensor instead: the result never depends on
the sample, only the work does. (``torch.topk`` + ``sort`` did the same selection with
implementation-defined ties at 4-8x the cost on CPU.) On CPU the same scheme runs per row
(:func:`rowwise_topk_positions`, also for one row): one blocked pass over the tensor finds
each row's candidates and the selection runs in NumPy on the candidates only; per-sample
TopK took a ``kthvalue`` per row and a tie mask over every value before (round
trip 0.7-0.8x of ``torch.topk`` per sample + scatter, was 2.6-3.4x).

Index encoding (topk, threshold). The kept positions are sent in whichever of two
encodings is smaller for this call, chosen by exact byte count:

* ``BITMAP``: one bit per element of the tensor, ``ceil(numel / 8)`` bytes;
* ``DELTA``: sorted positions as gaps ``p[i] - p[i-1] - 1`` (``p[-1] = -1``), each packed
  in ``w`` bits, ``w`` = bit length of the largest gap: ``packed_nbytes(k, w)`` bytes
  (``ceil(k * w / 8)`` up to 2 bytes; see :mod:`.bitpack`).

Fixed-width absolute indices (int32, int16, uint8 or ``ceil(log2 numel)``-bit packed)
are not separate options: every gap is below ``numel``, so ``DELTA`` is never larger
(up to the 2-byte plane rounding of :mod:`.bitpack`). A 2-byte ``tag`` (encoding, w) travels with the payload, so the
receiver decodes from the payload alone; ``k`` is the number of values.
Payload: ``(values (k,) in the input dtype, index bytes uint8, tag uint8 (2,))``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from ..api import Compressor, CompressorError, Payload, TensorInfo
from ..registry import check_choice, check_range, register
from ._common import counter_key, device_generator, hash32, hash32_numpy, require_finite
from ._fast import abs_ge, fused, nonzero_1d
from .bitpack import pack, pack_wide, packed_nbytes, unpack, unpack_wide

__all__ = [
    "TopK",
    "RandomK",
    "Threshold",
    "topk_positions",
    "rowwise_topk_mask",
    "rowwise_topk_positions",
    "GRANULARITIES",
    "stratum_positions",
    "encode_positions",
    "decode_into",
    "BITMAP",
    "DELTA",
]

BITMAP, DELTA = 0, 1
_SALT_RANDOMK = 0x52
_SALT_SAMPLE = 0x53
_SALT_TOPK_SAMPLE = 0x54
_TOPK_SAMPLE = (4096, 1 << 16)  # sample size bounds for topk_positions: n / 64 clamped to these
_TOPK_ROW_SAMPLE_MIN = 2048  # the CPU path's smallest sample (its sample costs a gather, not a draw)
_TOPK_Z = 4.0  # the sample's bound sits 4 standard deviations of its rank below the target


def _count(ratio: float, n: int) -> int:
    """Number of values kept out of ``n`` at ``ratio``: at least 1 (if n > 0), at most n."""
    return min(n, max(1, math.ceil(ratio * n - 1e-9))) if n else 0


def _kth_smallest(v: Tensor, r: int) -> Tensor:
    """The ``r``-th smallest value (1-based) of the 1-D ``v`` as a 0-d tensor.

    Quickselect (``kthvalue``) on CPU; on CUDA ``kthvalue`` sorts one slice in one thread
    block, while ``topk``'s radix select spreads a long slice over the GPU.
    """
    if v.device.type == "cpu":
        return v.kthvalue(r).values
    return v.topk(r, largest=False, sorted=False).values.max()


def _sample_lower_bound(x: Tensor, k: int, gen: torch.Generator | None) -> Tensor | None:
    """A value that is at most the k-th largest of ``|x|`` with high probability (or None).

    From ``m`` uniform samples, the value ranked ``k/n * m + z * sd`` from the top (sd: the
    binomial standard deviation of that rank) is below the true k-th largest unless the
    sample is off by more than z = 4 standard deviations (probability ~3e-5).
    """
    n = x.numel()
    m = min(max(n // 64, _TOPK_SAMPLE[0]), _TOPK_SAMPLE[1])
    if 4 * m > n:
        return None  # small tensor: select on all of it
    p = k / n
    rank = math.ceil(p * m + _TOPK_Z * math.sqrt(m * p * (1 - p))) + 1  # from the top, 1-based
    if rank >= m:
        return None
    sample = x.index_select(0, torch.randint(0, n, (m,), generator=gen, device=x.device)).abs()
    return _kth_smallest(sample, m - rank + 1)


def topk_positions(x: Tensor, k: int, gen: torch.Generator | None = None) -> Tensor:
    """Sorted int64 positions of exactly the ``k`` largest ``|x|`` of the 1-D ``x``.

    Ties at the k-th largest magnitude keep the lowest positions. On CPU this is
    :func:`rowwise_topk_positions` on one row; elsewhere ``gen`` drives the sample that
    bounds the search (module docstring). The result depends on neither.
    """
    n = x.numel()
    if k >= n:
        return torch.arange(n, device=x.device)
    if k <= 0:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    if _numpy_path(x):
        return rowwise_topk_positions(x.view(1, n), k)
    cand = None
    lo = _sample_lower_bound(x, k, gen)
    if lo is not None:
        cand = nonzero_1d(abs_ge(x, lo))  # sorted; about k * (1 + a few %) of them
        if cand.numel() < k:  # the sample overestimated the threshold: select on everything
            cand = None
    mag = x.abs() if cand is None else x.index_select(0, cand).abs()
    thr = _kth_smallest(mag, mag.numel() - k + 1)  # the k-th largest overall
    gt, eq = mag > thr, mag == thr
    keep = gt | (eq & (eq.cumsum(0) <= k - gt.sum()))  # ties: the first (lowest) positions
    sel = nonzero_1d(keep)
    return sel if cand is None else cand.index_select(0, sel)


# --------------------------------------------------------------------------- CPU selection
# On CPU the selection runs in NumPy on the magnitudes' bit patterns: for finite floats,
# ``bits(x) & 0x7F..F`` (the sign cleared) orders exactly like ``|x|`` and is equal exactly
# when ``|x|`` is (+0 and -0 included), so every comparison below is an exact integer one,
# the same for fp32, fp16, bf16 (which NumPy has no type for) and fp64.
_MAG_INT = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float64: torch.int64,
}
_BLOCK = 1 << 16  # elements per pass of the candidate scan: its temporaries stay in L2


def _numpy_path(x: Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in _MAG_INT and not x.requires_grad


@functools.lru_cache(maxsize=32)
def _sample_offsets(s: int, m: int) -> np.ndarray:
    """``m`` uniform offsets in ``[0, s)``, a function of ``(s, m)`` only (fixed seed)."""
    return np.random.default_rng(_SALT_TOPK_SAMPLE).integers(0, s, m)


def _row_lower_bounds(bits: np.ndarray, k: int) -> np.ndarray | None:
    """(R,) magnitudes at most each row's k-th largest in ``bits`` (R, S) with high probability.

    The rule of :func:`_sample_lower_bound` (z = 4 standard deviations of the rank), on
    ``m`` sample offsets shared by the rows (each row's sample is still uniform on it).
    None where the rows are too short for a sample to pay.
    """
    s = bits.shape[1]
    m = min(max(s // 64, _TOPK_ROW_SAMPLE_MIN), _TOPK_SAMPLE[1])
    if 4 * m > s:
        return None
    p = k / s
    rank = math.ceil(p * m + _TOPK_Z * math.sqrt(m * p * (1 - p))) + 1  # from the top, 1-based
    if rank >= m:
        return None
    sample = np.take(bits, _sample_offsets(s, m), axis=1)
    sample &= np.iinfo(bits.dtype).max
    return np.partition(sample, m - rank, axis=1)[:, m - rank]


def _select_rows(mag: np.ndarray, k: int) -> np.ndarray:
    """Bool (R, C): the ``k`` largest of each row of the non-negative ``mag``, ties lowest.

    Entries past ``counts[r]`` in row ``r`` are padding (-1), below every magnitude.
    """
    c = mag.shape[1]
    thr = np.partition(mag, c - k, axis=1)[:, c - k, None]  # each row's k-th largest
    keep = mag >= thr
    if (np.count_nonzero(keep, axis=1) == k).all():  # no surplus ties (the usual case)
        return keep
    gt, eq = mag > thr, mag == thr
    room = k - np.count_nonzero(gt, axis=1)
    return gt | (eq & (np.cumsum(eq, axis=1) <= room[:, None]))


def _rowwise_topk_numpy(bits: np.ndarray, k: int) -> np.ndarray:
    """Flat sorted positions of the k largest magnitudes per row of ``bits`` (R, S)."""
    r_, s = bits.shape
    top = np.iinfo(bits.dtype).max  # the sign cleared: the magnitude's bits
    lo = _row_lower_bounds(bits, k)
    if lo is not None:
        # one pass over the tensor in L2-sized blocks: magnitudes >= the row's bound are the
        # candidates (sorted by position; about k * (1 + a few %) per row)
        block = min(s, _BLOCK)
        tmp, hit = np.empty(block, bits.dtype), np.empty(block, np.bool_)
        pos_parts: list[np.ndarray] = []
        mag_parts: list[np.ndarray] = []
        counts = np.zeros(r_, np.int64)
        for r in range(r_):
            row, bound = bits[r], lo[r]
            for start in range(0, s, block):
                seg = row[start : start + block]
                t, h = tmp[: seg.size], hit[: seg.size]
                np.bitwise_and(seg, top, out=t)
                np.greater_equal(t, bound, out=h)
                nz = np.flatnonzero(h)
                mag_parts.append(t.take(nz))
                nz += r * s + start
                pos_parts.append(nz)
                counts[r] += nz.size
        if counts.min() >= k:  # else the sample overestimated some row's bound: select on all
            c = int(counts.max())
            valid = np.arange(c) < counts[:, None]
            mag = np.full((r_, c), -1, dtype=bits.dtype)
            mag[valid] = np.concatenate(mag_parts)
            return np.concatenate(pos_parts)[_select_rows(mag, k)[valid]]
    return np.flatnonzero(_select_rows(bits & top, k))


def rowwise_topk_positions(rows: Tensor, k: int) -> Tensor:
    """Sorted flat int64 positions (into ``rows.reshape(-1)``) of exactly the ``k`` largest
    ``|rows[r]|`` of every row of the finite ``rows`` (R, S); ties keep the lowest positions.

    CPU: a sampled bound per row, one blocked pass collecting the candidates above it, and a
    selection among the candidates only (NumPy, on magnitude bits: see above); the result
    never depends on the sample (an unlucky one costs a selection over the whole rows).
    Other devices: :func:`rowwise_topk_mask` (one ``kthvalue`` per row).
    """
    s = rows.shape[1]
    if k >= s:
        return torch.arange(rows.numel(), device=rows.device)
    if not _numpy_path(rows):
        return nonzero_1d(rowwise_topk_mask(rows, k).reshape(-1))
    bits = rows.detach().contiguous().view(_MAG_INT[rows.dtype]).numpy()
    return torch.from_numpy(_rowwise_topk_numpy(bits, k)).to(torch.int64)


def encode_positions(pos: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Encode sorted unique int64 positions in ``[0, n)`` as ``(index bytes, tag)``, cheapest first.

    One scalar sync (the largest gap) decides between bitmap and delta encoding.
    """
    k = pos.numel()
    dev = pos.device
    if k == 0:
        return torch.empty(0, dtype=torch.uint8, device=dev), torch.tensor([DELTA, 1], dtype=torch.uint8, device=dev)
    gaps = torch.diff(pos, prepend=pos.new_full((1,), -1)) - 1  # (k,) >= 0
    w = max(1, int(gaps.max()).bit_length())
    if packed_nbytes(n, 1) < packed_nbytes(k, w):
        mask = torch.zeros(n, dtype=torch.uint8, device=dev).index_fill_(0, pos, 1)
        return pack(mask, 1), torch.tensor([BITMAP, 1], dtype=torch.uint8, device=dev)
    return pack_wide(gaps, w), torch.tensor([DELTA, w], dtype=torch.uint8, device=dev)


def decode_into(values: Tensor, index: Tensor, tag: Tensor, n: int) -> Tensor:
    """Scatter ``values`` to the positions encoded by ``(index, tag)``: a dense (n,) tensor."""
    out = torch.zeros(n, dtype=values.dtype, device=values.device)
    k = values.numel()
    if k == 0:
        return out
    enc, w = (int(v) for v in tag.tolist())  # 2 bytes, metadata of the payload
    if enc == BITMAP:
        mask = unpack(index, 1, n).bool()
        return out.masked_scatter_(mask, values)
    if enc == DELTA:
        pos = torch.cumsum(unpack_wide(index, w, k) + 1, dim=0) - 1
        return out.index_copy_(0, pos, values)  # positions are unique: same as index_put_
    raise CompressorError(f"sparse payload: unknown index encoding tag {enc}; corrupt payload?")


def _sparse_payload(flat: Tensor, pos: Tensor) -> Payload:
    """``flat`` (n,), sorted positions -> (values, index bytes, tag)."""
    index, tag = encode_positions(pos, flat.numel())
    return flat.index_select(0, pos), index, tag


def rowwise_topk_mask(rows: Tensor, k: int) -> Tensor:
    """Bool mask (R, S) of exactly the ``k`` largest ``|rows[r]|`` of every row (1 <= k <= S).

    Vectorized over rows: one ``kthvalue`` along dim 1 gives each row's k-th largest
    magnitude; ties at it keep the lowest positions of the row (the same rule as
    :func:`topk_positions`).
    """
    mag = rows.abs()
    thr = mag.kthvalue(rows.shape[1] - k + 1, dim=1, keepdim=True).values  # (R, 1): k-th largest
    gt, eq = mag > thr, mag == thr
    room = k - gt.sum(dim=1, keepdim=True)  # (R, 1) tie slots left in each row
    return gt | (eq & (eq.cumsum(dim=1) <= room))


GRANULARITIES = ("tensor", "sample", "token")


@register("topk")
class TopK(Compressor):
    """TopK (Aji & Heafield 2017; Stich et al. 2018): keep the ``ratio`` largest |x|.

    ``granularity`` says over what the budget is taken:

    * ``sample`` (default): the top ``ceil(ratio * numel / B)`` of each sample ``x[b]``, so
      every sample keeps the same budget. This is the activation-compression study's TopK
      (Rudakov et al. 2023, "Activations and Gradients Compression for Model-Parallel
      Training", reference code ``compress_topk``: ``kthvalue`` over each flattened sample).
      Rank <= 1 tensors (data-parallel gradient buckets) are one sample, so for weight
      gradients it is the classic whole-tensor TopK.
    * ``tensor``: the top ``ceil(ratio * numel)`` of the whole (micro-batch) tensor, as in
      gradient sparsification (Aji & Heafield 2017): samples with large activations take
      most of the budget and others may keep almost nothing.
    * ``token``: the top ``ceil(ratio * d)`` of every vector along the last dimension
      (each token's d features of a (B, T, d) residual stream; each row of an image plane
      for (B, C, H, W), which is rarely what you want). Rank <= 1: one vector.

    Exactly that many values are kept per group; ties at the k-th largest magnitude keep
    the lowest positions (see :func:`topk_positions`). Values are sent in the input dtype
    with the cheapest index encoding (module docstring); the payload format does not depend
    on the granularity. Biased: wrap it in ``ef(...)`` for gradients.
    """

    def __init__(self, ratio: float = 0.1, granularity: str = "sample", bits: int = 0):
        self.ratio = check_range("topk", "ratio", ratio, 1e-6, 1.0)
        self.granularity = check_choice("topk", "granularity", granularity, GRANULARITIES)
        # bits > 0: the kept values quantized to 2**bits symmetric levels of one absmax scale
        # (SparseLoCo's top-k + 2-bit, Sarfi et al. 2025); 0: values in the input dtype
        self.bits = check_range("topk", "bits", bits, 0, 8, integer=True)

    def _rows(self, x: Tensor) -> int:
        """How many groups ``x`` is split into (1 = the whole tensor)."""
        if x.dim() < 2 or self.granularity == "tensor":
            return 1
        return x.shape[0] if self.granularity == "sample" else x.numel() // x.shape[-1]

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, self.name, summary=x.detach().sum())  # NaN/Inf propagate to the sum
        flat = x.detach().reshape(-1)
        n = flat.numel()
        rows = self._rows(x) if n else 1
        if rows > 1:
            grouped = flat.view(rows, -1)  # (groups, n / groups)
            pos = rowwise_topk_positions(grouped, _count(self.ratio, grouped.shape[1]))
        else:
            gen = device_generator(info, x.device, _SALT_TOPK_SAMPLE) if n else None
            pos = topk_positions(flat, _count(self.ratio, n), gen)
        values, index, tag = _sparse_payload(flat, pos)
        if not self.bits:
            return values, index, tag
        levels = (1 << self.bits) - 1
        scale = values.abs().max().reshape(1).float() if values.numel() else torch.ones(1, device=x.device)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        codes = ((values.float() / scale + 1) * (levels / 2)).round_().clamp_(0, levels)
        return pack(codes, self.bits), scale, index, tag

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        if self.bits:
            packed, scale, index, tag = payload
            rows = self._rows_of(info.shape) if info.numel else 1
            k = rows * _count(self.ratio, info.numel // rows) if info.numel else 0
            codes = unpack(packed, self.bits, k).float()
            values = (codes * (2 / ((1 << self.bits) - 1)) - 1) * scale
        else:
            values, index, tag = payload
        return decode_into(values, index, tag, info.numel).reshape(info.shape).to(info.dtype)

    def _rows_of(self, shape: torch.Size) -> int:
        """:meth:`_rows` from a shape (the receiver's view)."""
        if len(shape) < 2 or self.granularity == "tensor":
            return 1
        return shape[0] if self.granularity == "sample" else math.prod(shape) // shape[-1]


@fused
def stratum_positions(start: Tensor, size: Tensor, key_lo: int, key_hi: int) -> Tensor:
    """``start[i] + (hash32(i) * size[i] >> 32)`` for each stratum ``i``: (k,) int64.

    ``start``, ``size``: (k,) int64 strata (``0 < size < 2**31``, so the product of the
    32-bit hash and the size stays below 2**63). Exact integer operations only: the compiled
    twin (CUDA) runs them as one kernel; on CPU they run in NumPy on uint32 (wrapping, so
    no masks, and half as wide as int64 tensors); all three give the same result.
    """
    if start.device.type == "cpu" and not torch.compiler.is_compiling():
        h = hash32_numpy(np.arange(start.numel(), dtype=np.uint32), key_lo, key_hi).astype(np.uint64)
        h *= size.numpy().view(np.uint64)  # sizes are positive: same bits as int64
        h >>= np.uint64(32)
        return torch.from_numpy(h.view(np.int64)).add_(start)
    h = hash32(torch.arange(start.numel(), device=start.device), key_lo, key_hi)  # (k,) in [0, 2**32)
    return h.mul_(size).bitwise_right_shift_(32).add_(start)


@register("randomk")
class RandomK(Compressor):
    """RandomK (Stich et al. 2018; Wangni et al. 2018): values at seeded positions, no index bytes.

    ``k = ceil(ratio * numel)`` values at positions that are a function of ``numel``, ``k``
    and ``info.seed`` only (which the runtime derives from the run seed, boundary, role, step
    and micro-batch; for DDP gradients from the run seed, stage, bucket and step), computed
    on the tensor's own device: no host generator, no host-to-device copy, and the same
    positions on every device (CPU, any GPU), so sender and receiver agree wherever they run.

    Selection: a jittered grid. The flattened tensor is cut into ``k`` strata, stratum ``i``
    being ``[i * n // k, (i + 1) * n // k)`` (``size_i`` = ``floor(n/k)`` or ``ceil(n/k)``
    elements), and one position is drawn in each::

        key  = counter_key(info.seed, 0x52)                 # 64-bit, Python ints on the host
        h_i  = counter_hash(key, i)                         # 32-bit, on the device (_common)
        pos_i = i * n // k + (h_i * size_i >> 32)           # multiply-shift into [0, size_i)

    ``h_i`` behaves as uniform on ``[0, 2**32)`` and independent across strata and seeds
    (tested: chi-square of keep counts over seeds, neighbour correlation), so each offset in
    a stratum has probability within ``size_i / 2**32`` (relative) of ``1 / size_i``
    (``size_i`` <= ~1e6 at ``ratio >= 1e-6``), and every element is kept with
    probability ``k / n`` as in uniform rand-k, up to the rounding of stratum sizes
    (``1 / floor(n/k)`` or ``1 / ceil(n/k)``). The cost is ``k`` hashes instead of an
    ``n``-long permutation (80 ms on CPU at 0.5 M elements), and coverage is more even.
    ``unbiased=true`` scales each kept value by its stratum size (exactly unbiased, high
    variance); the default ``false`` sends values unscaled (a contraction,
    ``E||x - C(x)||^2 = (1 - k/n) ||x||^2``, what ``ef`` expects). Linear: replicas with
    the same seed pick the same positions, so payloads sum.
    Payload: ``(values (k,) in the input dtype,)``.
    """

    fixed_size = True  # payload layout follows from the input shape (one message per payload)

    linear = True

    def __init__(self, ratio: float = 0.1, unbiased: bool = False):
        self.ratio = check_range("randomk", "ratio", ratio, 1e-6, 1.0)
        if not isinstance(unbiased, bool):
            raise CompressorError(f"randomk: parameter unbiased={unbiased!r} must be true or false")
        self.unbiased = unbiased
        self._strata_cache: dict[tuple[int, int, torch.device], tuple[Tensor, Tensor]] = {}

    _STRATA_CACHE = 4  # (numel, k, device) layouts kept per instance (one per tensor shape in practice)

    def _strata(self, n: int, k: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """(start, size) of the k strata of n elements, (k,) int64 each on ``device``, cached:
        they do not depend on the seed and the int64 division costs more than the hashes."""
        cache = self._strata_cache
        if (n, k, device) not in cache:
            # k <= 2**32 keeps stratum indices distinct in the 32-bit counter (k is at most
            # numel, and 2**32 kept values is 16 GB of fp32: not reachable in practice);
            # ratio >= 1e-6 bounds strata at ~1e6 elements, far below the 2**31 that the
            # multiply-shift needs.
            if k > 1 << 32 or (k and -(-n // k) >= 1 << 31):
                raise CompressorError(f"randomk: {k} strata of {n} elements are out of the supported range")
            if len(cache) >= self._STRATA_CACHE:
                cache.clear()
            edges = torch.arange(k + 1, dtype=torch.int64, device=device) * n // max(k, 1)  # (k+1,)
            cache[(n, k, device)] = (edges[:-1], torch.diff(edges))  # sizes floor(n/k) or ceil(n/k)
        return cache[(n, k, device)]

    def _positions(self, info: TensorInfo, device: torch.device) -> tuple[Tensor, Tensor]:
        """(k,) int64 positions on ``device``, one per stratum, and (k,) stratum sizes."""
        n = info.numel
        start, size = self._strata(n, _count(self.ratio, n), device)
        key = counter_key(info.seed, _SALT_RANDOMK)
        return stratum_positions(start, size, key & 0xFFFFFFFF, key >> 32), size

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, self.name, summary=x.detach().sum())  # NaN/Inf propagate to the sum
        pos, size = self._positions(info, x.device)
        values = x.detach().reshape(-1).index_select(0, pos)
        if self.unbiased:
            values = values * size.to(values.dtype)
        return (values.contiguous(),)

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        (values,) = payload
        pos, _ = self._positions(info, values.device)
        out = torch.zeros(info.numel, dtype=values.dtype, device=values.device).index_copy_(0, pos, values)
        return out.reshape(info.shape).to(info.dtype)


@register("threshold")
class Threshold(Compressor):
    """DGC-style threshold sparsification (Lin et al. 2018, "Deep Gradient Compression").

    The threshold is the top-``ratio`` quantile of |x| estimated on a random sample of
    ``max(sample * numel, 1024)`` values (drawn from ``info.seed``); every value with
    ``|x| >= threshold`` (and nonzero) is sent, so the payload size varies with the data.
    As in DGC's hierarchical selection, if the sample underestimated the threshold so much
    that more than twice the target ``ceil(ratio * numel)`` values pass, an exact top-k of
    the target size is taken among them (ties: lowest positions, as ``topk``). Same payload
    format as ``topk``.
    """

    _MIN_SAMPLE = 1024

    def __init__(self, ratio: float = 0.01, sample: float = 0.01):
        self.ratio = check_range("threshold", "ratio", ratio, 1e-6, 1.0)
        self.sample = check_range("threshold", "sample", sample, 1e-6, 1.0)

    def compress(self, x: Tensor, info: TensorInfo) -> Payload:
        require_finite(x, info, self.name, summary=x.detach().sum())  # NaN/Inf propagate to the sum
        flat = x.detach().reshape(-1)
        n = flat.numel()
        if n == 0:
            return _sparse_payload(flat, torch.empty(0, dtype=torch.int64, device=x.device))
        m = min(n, max(self._MIN_SAMPLE, math.ceil(self.sample * n)))
        gen = device_generator(info, x.device, _SALT_SAMPLE)
        if m < n:
            sample = flat.index_select(0, torch.randint(0, n, (m,), generator=gen, device=x.device)).abs()
        else:
            sample = flat.abs()
        thr = sample.topk(_count(self.ratio, m), sorted=False).values.min()
        # |x| >= thr and |x| > 0: for thr > 0 the first implies the second (one fused pass)
        pos = nonzero_1d(abs_ge(flat, thr) if float(thr) > 0 else flat != 0)  # sorted
        target = _count(self.ratio, n)
        if pos.numel() > 2 * target:
            pos = pos.index_select(0, topk_positions(flat.index_select(0, pos), target, gen))  # stays sorted
        return _sparse_payload(flat, pos)

    def decompress(self, payload: Payload, info: TensorInfo) -> Tensor:
        values, index, tag = payload
        return decode_into(values, index, tag, info.numel).reshape(info.shape).to(info.dtype)
