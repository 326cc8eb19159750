"""AQ-SGD: lossless first visit, smaller lossy later visits, identical memory-mapped buffers."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from compressors import CompressorError, TensorInfo, TensorRole, build, payload_nbytes


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MPCBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _info(x, ids, step=0, training=True, role=TensorRole.ACTIVATION):
    ids = None if ids is None else torch.as_tensor(ids, dtype=torch.int64)
    return TensorInfo(role, 0, 0, step, x.shape, x.dtype, x.device, sample_ids=ids, seed=step, training=training)


def _roundtrip(send, recv, x, info):
    payload = send.compress(x, info)
    return payload, recv.decompress(payload, info)


def _activation(b=4):
    return torch.randn(b, 8, 6, 5)  # (B, C, H, W)


def test_first_visit_lossless_later_visits_lossy_and_smaller():
    send, recv = build("aqsgd"), build("aqsgd")
    x = _activation()
    ids = [3, 0, 7, 1]
    p1, y1 = _roundtrip(send, recv, x, _info(x, ids, step=0))
    assert torch.equal(y1, x)
    assert payload_nbytes(p1) >= x.numel() * 4  # full precision (+ one mode byte per sample)
    x2 = x + 0.05 * torch.randn_like(x)
    p2, y2 = _roundtrip(send, recv, x2, _info(x2, ids, step=1))
    err = float((y2 - x2).norm() / x2.norm())
    assert 0 < err < 0.01  # only the small change was quantized
    assert payload_nbytes(p2) < payload_nbytes(p1) / 4
    assert p2[0].tolist() == [0, 0, 0, 0] and p1[0].tolist() == [1, 1, 1, 1]


def test_mixed_batch_and_both_sides_buffers_identical():
    send, recv = build("aqsgd(bits=2)"), build("aqsgd(bits=2)")
    torch.manual_seed(0)
    base = {i: torch.randn(8, 6, 5) for i in range(10)}
    seen: set[int] = set()
    for step, ids in enumerate([[0, 1, 2, 3], [2, 3, 4, 5], [5, 0, 9, 8], [1, 2, 3, 4]]):
        x = torch.stack([base[i] + 0.1 * step * torch.randn(8, 6, 5) for i in ids])
        payload, y = _roundtrip(send, recv, x, _info(x, ids, step=step))
        assert payload[0].tolist() == [0 if i in seen else 1 for i in ids]
        seen |= set(ids)
        first = payload[0].bool()
        assert torch.equal(y[first], x[first])  # first visits stay exact inside a mixed batch
    assert np.array_equal(send._store.seen, recv._store.seen)
    assert np.array_equal(np.asarray(send._store.mm), np.asarray(recv._store.mm))  # bit-identical
    assert send.state_nbytes() == recv.state_nbytes() == len(seen) * 240 * 2 + send._store.seen.nbytes


def test_buffers_are_memory_mapped_files_and_reset_deletes_them(_cache_dir):
    send = build("aqsgd(store=fp32)")
    x = _activation()
    send.compress(x, _info(x, [0, 1, 2, 3]))
    store = send._store
    assert isinstance(store.mm, np.memmap)
    assert store.path.parent == send.buffer_dir and send.buffer_dir.parent == _cache_dir
    assert store.path.stat().st_size == store.rows * 240 * 4
    np.testing.assert_array_equal(np.asarray(store.mm[[0, 1, 2, 3]]), x.reshape(4, -1).numpy())
    d = send.buffer_dir
    send.reset()
    assert not d.exists() and send.state_nbytes() == 0
    send.compress(x, _info(x, [0, 1, 2, 3]))  # usable again after reset: everything is new
    assert send.buffer_dir.exists() and send.buffer_dir != d


def test_buffer_files_removed_on_garbage_collection(_cache_dir):
    send = build("aqsgd")
    x = _activation()
    send.compress(x, _info(x, [0, 1, 2, 3]))
    d = send.buffer_dir
    assert d.exists()
    del send
    gc.collect()
    assert not d.exists()


def test_sample_ids_beyond_buffer_grow_it_and_keep_rows():
    send, recv = build("aqsgd"), build("aqsgd")
    x = _activation(2)
    _roundtrip(send, recv, x, _info(x, [0, 1]))
    rows = send._store.rows
    far = _activation(2)
    _, y = _roundtrip(send, recv, far, _info(far, [rows + 5, 10 * rows]))
    assert torch.equal(y, far)
    assert send._store.rows > 10 * rows and send._store.mm.shape[0] == send._store.rows
    x2 = x + 0.01
    p, y2 = _roundtrip(send, recv, x2, _info(x2, [0, 1], step=2))  # old rows survived the growth
    assert p[0].tolist() == [0, 0] and float((y2 - x2).abs().max()) < 0.01


def test_eval_and_missing_ids_quantize_directly_without_touching_buffers():
    send, recv = build("aqsgd"), build("aqsgd")
    x = _activation()
    _roundtrip(send, recv, x, _info(x, [0, 1, 2, 3]))
    seen = send._store.seen.copy()
    z = _activation()
    for info in (_info(z, [4, 5, 6, 7], step=-1, training=False), _info(z, None)):
        p, y = _roundtrip(send, recv, z, info)
        assert p[0].tolist() == [2] and payload_nbytes(p) < z.numel() * 4 / 4
        assert 0 < float((y - z).norm() / z.norm()) < 0.2
    assert np.array_equal(send._store.seen, seen)


def test_activation_grads_direct_by_default_delta_on_request():
    g = _activation()
    info = _info(g, [0, 1, 2, 3], role=TensorRole.ACTIVATION_GRAD)
    direct = build("aqsgd")
    assert direct.compress(g, info)[0].tolist() == [2] and direct._store is None
    delta = build("aqsgd(grads=delta)")
    assert delta.compress(g, info)[0].tolist() == [1, 1, 1, 1] and delta._store is not None
    with pytest.raises(CompressorError, match="grads"):
        build("aqsgd(grads=sometimes)")
    assert TensorRole.WEIGHT_GRAD not in build("aqsgd").roles


def test_desynchronized_sides_raise_instead_of_decoding_garbage():
    send, recv = build("aqsgd"), build("aqsgd")
    x = _activation()
    send.compress(x, _info(x, [0, 1, 2, 3]))  # the receiver never saw this batch
    p = send.compress(x, _info(x, [0, 1, 2, 3], step=1))
    with pytest.raises(CompressorError, match="disagree"):
        recv.decompress(p, _info(x, [0, 1, 2, 3], step=1))


def test_shape_change_restarts_and_bad_input_is_refused():
    send = build("aqsgd")
    x = _activation()
    send.compress(x, _info(x, [0, 1, 2, 3]))
    y = torch.randn(4, 8, 6, 6)  # another per-sample shape: documented restart
    assert send.compress(y, _info(y, [0, 1, 2, 3]))[0].tolist() == [1, 1, 1, 1]
    with pytest.raises(CompressorError, match="one id per sample"):
        send.compress(y, _info(y, [0, 1]))
    with pytest.raises(CompressorError, match="non-finite"):
        send.compress(torch.full_like(y, float("inf")), _info(y, [0, 1, 2, 3]))
    with pytest.raises(CompressorError, match="store=fp32"):
        big = torch.full((1, 3), 1e5)
        build("aqsgd").compress(big, _info(big, [0]))


def test_stats_count_rows_sent_in_full_as_deltas_and_directly():
    """The record's compressor_stats: 3 visits of 4 samples -> 4 first, 8 deltas (2/3 deltas)."""
    send, recv = build("aqsgd(bits=2)"), build("aqsgd(bits=2)")
    x = _activation()
    for step in range(3):
        _roundtrip(send, recv, x, _info(x, [0, 1, 2, 3], step))
    _roundtrip(send, recv, x, _info(x, [0, 1, 2, 3], -1, training=False))  # evaluation: not counted
    g = torch.randn(4, 8)
    _roundtrip(send, recv, g, _info(g, [0, 1, 2, 3], 3, role=TensorRole.ACTIVATION_GRAD))
    assert send.stats() == {"aqsgd.rows_first": 4, "aqsgd.rows_delta": 8, "aqsgd.rows_direct": 4}
    assert recv.stats() == {"aqsgd.rows_first": 0, "aqsgd.rows_delta": 0, "aqsgd.rows_direct": 0}  # sender counts
