"""CUDA tensors: zero copy, results on the same device, equal to the CPU backend.
Skipped (reported as skipped) where there is no CUDA device or no CUDA backend."""

import numpy as np
import pytest
import torch

import todre

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and "cuda" in todre.available_backends()),
    reason="no CUDA device / libtodre CUDA backend here")


def test_cuda_tensor_in_cuda_tensor_out_equal_to_cpu(rng):
    E = rng.standard_normal((500, 64)).astype(np.float32)
    want = todre.select(E, ratio=0.1, order="selection")
    t = torch.from_numpy(E).cuda()
    got = todre.select(t, ratio=0.1, order="selection")
    assert got.device == t.device and got.dtype == torch.int64
    assert got.cpu().tolist() == want.tolist()


def test_cuda_input_is_not_copied(monkeypatch):
    from todre import _lib
    seen = []
    real = _lib.lib.todre_select

    def spy(ctx, cfg, emb, cls, out):
        for arg in (emb, out):
            dl = arg._obj
            seen.append(((dl.data or 0) + dl.byte_offset, dl.device.device_type))
        return real(ctx, cfg, emb, cls, out)

    monkeypatch.setattr(_lib.lib, "todre_select", spy)
    t = torch.randn(128, 32, device="cuda", dtype=torch.bfloat16)
    out = todre.select(t, keep=8)
    assert seen == [(t.data_ptr(), 2), (out.data_ptr(), 2)]


def test_cuda_registry_and_context():
    info = next(b for b in todre.backends() if b.name == "cuda")
    assert info.available and info.device_type == todre.DeviceType.CUDA
    assert info.device_count == torch.cuda.device_count()
    dev = todre.devices("cuda")[0]
    assert dev.compute_capability == torch.cuda.get_device_capability(0)
    assert dev.arch == "sm_%d%d" % dev.compute_capability
    ctx = todre.Context("cuda")
    assert (ctx.backend, ctx.device_type, ctx.device) == ("cuda", todre.DeviceType.CUDA, 0)


def test_cuda_offsets_and_types_are_copied_through_the_context(rng):
    E = torch.randn(60, 16, device="cuda")
    offs = torch.tensor([0, 20, 60], device="cuda")
    out, out_offs = todre.select_batch(E, offsets=offs, keep=3)
    assert out_offs.tolist() == [0, 3, 6]
    want, _ = todre.select_batch(E.cpu(), offsets=[0, 20, 60], keep=3)
    assert out.cpu().tolist() == want.tolist()
    ctx = todre.Context("cuda")
    host = ctx.to_host(offs)
    assert isinstance(host, np.ndarray) and host.tolist() == [0, 20, 60]
    back = torch.zeros(3, dtype=torch.int64, device="cuda")
    ctx.copy(back, host)
    assert back.tolist() == [0, 20, 60]


def test_cuda_batch_and_relevance(rng):
    sets = [torch.randn(n, 16, device="cuda") for n in (40, 70)]
    got = todre.select_batch(sets, keep=5)
    want = todre.select_batch([s.cpu() for s in sets], keep=5)
    assert [g.cpu().tolist() for g in got] == [w.tolist() for w in want]
    q = torch.randn(4, 20, 8, device="cuda")
    k = torch.randn(2, 20, 8, device="cuda")
    rel_gpu = todre.Relevance(2, probe_layers=[1], tau=0.0)
    rel_cpu = todre.Relevance(2, probe_layers=[1], tau=0.0)
    for rel, qq, kk in ((rel_gpu, q, k), (rel_cpu, q.cpu(), k.cpu())):
        rel.set_layout(2, 10, 8)
        rel.observe_qk(1, qq, kk)
    assert rel_gpu.ratios(1) == pytest.approx(rel_cpu.ratios(1), abs=1e-5)


def test_host_data_on_a_cuda_context_is_an_error():
    with pytest.raises(todre.TodreError):
        todre.select(np.ones((4, 2), np.float32), keep=1, backend="cuda")
