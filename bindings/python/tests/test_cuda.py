"""CUDA tensors: zero copy, results on the same device, equal to the CPU backend.
Skipped (reported as skipped) where there is no CUDA device or no CUDA backend."""

import numpy as np
import pytest
import torch

import todre

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and "cuda" in todre.backends()),
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
    from todre._tensor import DLTensor
    seen = []
    real = _lib.lib.todre_tensor_from_dlpack

    def spy(dl_ptr, out):
        dl = DLTensor.from_address(dl_ptr.value)
        seen.append(((dl.data or 0) + dl.byte_offset, dl.device.device_type))
        return real(dl_ptr, out)

    monkeypatch.setattr(_lib.lib, "todre_tensor_from_dlpack", spy)
    t = torch.randn(128, 32, device="cuda", dtype=torch.bfloat16)
    out = todre.select(t, keep=8)
    assert seen[0] == (t.data_ptr(), 2) and seen[1][0] == out.data_ptr()


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
