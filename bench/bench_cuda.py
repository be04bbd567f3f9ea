#!/usr/bin/env python3
"""Time libtodre's CUDA backend against PyTorch on the same GPU and inputs.

Stage 1: greedy max-sum selection (ToDRE Algorithm 1, CENTER pivot) on f16
LLaVA-NeXT-sized inputs (n = 2880 tokens, d = 4096) for k = 288 and 720, one
image and ragged batches of 8 and 32 images in one call. The PyTorch
baseline is Algorithm 1 written the way a PyTorch user would: normalise,
Gram matrix on the GPU, then the greedy loop with batched argmin (no host
sync per step, but one Python iteration and a handful of kernel launches per
step). Two baselines: fp32 Gram (same arithmetic as libtodre) and f16 Gram.

Stage 2: alpha ratios at 32 heads, head size 128, K = 3015 (35 system, 2880
visual, 100 text), from Q/K (libtodre's fused online-softmax kernel) against
PyTorch materialising causal softmax(QK^T) and summing; and from
probabilities (libtodre's reduction against torch sums on the same A).

Prints medians over repeats (CUDA events) and the PyTorch/libtodre ratio.
Exits 0 with a 'skipped: ...' line where there is no GPU, no PyTorch with
CUDA, or no CUDA-capable libtodre.

Usage: python3 bench/bench_cuda.py [--lib build/libtodre.so.1] [--repeats 20]
"""
import argparse
import glob
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def skip(why):
    print(f"skipped: {why}")
    sys.exit(0)


def find_lib(arg):
    if arg:
        return arg
    for var in ("TODRE_LIBRARY", "TODRE_LIB"):
        if os.environ.get(var):
            return os.environ[var]
    hits = sorted(glob.glob(os.path.join(ROOT, "build*", "libtodre.so.1")), key=os.path.getmtime)
    return hits[-1] if hits else None


class Todre:
    """The todre package of this tree on one libtodre; the timed calls go
    straight to the C functions with DLTensors built once beforehand, so they
    measure libtodre, not the Python layer."""

    def __init__(self, path):
        os.environ["TODRE_LIBRARY"] = path
        sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
        import todre
        from todre import _errors, _lib, _tensor
        self.todre, self.L, self._tensor = todre, _lib.lib, _tensor
        self._check = _errors.check

    def check(self, st, ctx=None):
        self._check(st, ctx.handle if ctx is not None else None)

    def cuda_available(self):
        return self.todre.backend_available("cuda")

    def context(self, stream):
        ctx = self.todre.Context("cuda", 0)
        ctx.set_stream(stream)
        return ctx

    def tensor(self, x, what="array"):
        """A DLTensor of a torch tensor (CPU or CUDA), kept alive by the result."""
        return self._tensor.Borrowed(x, what)


def median_ms(torch, fn, repeats, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


# ---- PyTorch Algorithm 1 (batched over images of equal n) ----------------------------

def torch_algorithm1(torch, E, k, gram_dtype):
    """E: [B, n, d] f16 on the GPU. Returns [B, k] selection order."""
    B, n, _ = E.shape
    X = torch.nn.functional.normalize(E.float(), dim=-1)
    S = torch.bmm(X.to(gram_dtype), X.to(gram_dtype).transpose(1, 2)).float()
    mu = X.mean(1)
    p = torch.bmm(X, mu.unsqueeze(-1)).squeeze(-1).argmax(1)
    ar = torch.arange(B, device=E.device)
    scores = S[ar, p].clone()
    taken = torch.zeros(B, n, dtype=torch.bool, device=E.device)
    taken[ar, p] = True
    sel = [p]
    for _ in range(1, k):
        c = scores.masked_fill(taken, float("inf")).argmin(1)
        sel.append(c)
        taken[ar, c] = True
        scores += S[ar, c]
    return torch.stack(sel, 1)


def judge_exact(E, orders):
    """Where the backends' selections differ: bench/parity_long_video.py's
    judgement against the exact (float64) greedy."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from parity_long_video import judge
    judge(E, orders, indent="       ")


def make_images(torch, B, n, d, gen):
    centers = torch.randn(B, 24, d, device="cuda", generator=gen)
    assign = torch.randint(0, 24, (B, n), device="cuda", generator=gen)
    return (centers.gather(1, assign.unsqueeze(-1).expand(B, n, d)) +
            0.7 * torch.randn(B, n, d, device="cuda", generator=gen)).half().contiguous()


def bench_stage1(torch, td, ctx, repeats):
    d = 4096
    print(f"\nStage 1: d={d} f16, MAX_SUM, CENTER pivot (median ms over {repeats}; the PyTorch "
          f"loops over max(3, {repeats}//4))")
    print("agree: share of kept indices equal to the PyTorch fp32 loop's; alone: sets of the "
          "batch whose selection equals the same image selected alone; cpu: image 0 equal to "
          "libtodre's CPU backend")
    print(f"{'images':>6} {'n':>6} {'k':>5} {'libtodre':>10} {'per image':>10} {'torch fp32':>11} "
          f"{'torch f16':>10} {'x fp32':>7} {'x f16':>7} {'agree':>6} {'alone':>6} {'cpu':>4}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(1, 2880), (8, 2880), (32, 2880), (1, 18000)]
    for B, n in shapes:
        E = make_images(torch, B, n, d, gen)
        ks = (288, 720) if n == 2880 else (1800,)
        for k in ks:
            cfg = td.todre.SelectConfig(keep=k, pivot="center", order="selection")
            out = torch.empty(B * k, dtype=torch.int64, device="cuda")
            offs = torch.arange(0, (B + 1) * n, n, dtype=torch.int64)
            emb_t = td.tensor(E.view(B * n, d), "embeddings")
            out_t = td.tensor(out, "out")
            offs_t = td.tensor(offs, "offsets")

            def ours():
                td.check(td.L.todre_select_batch(ctx.handle, cfg.handle, emb_t.ref, None,
                                                 offs_t.ref, None, out_t.ref, None), ctx)

            t_ours = median_ms(torch, ours, repeats)
            reps_t = max(3, repeats // 4)  # the PyTorch loops are slow
            t_f32 = median_ms(torch, lambda: torch_algorithm1(torch, E, k, torch.float32), reps_t, 1)
            t_f16 = median_ms(torch, lambda: torch_algorithm1(torch, E, k, torch.float16), reps_t, 1)
            ours()
            ctx.synchronize()
            got = out.view(B, k).clone()
            ref = torch_algorithm1(torch, E, k, torch.float32)
            agree = (got == ref).float().mean().item()
            alone = 0
            for b in range(min(B, 8)):
                one = td.todre.select(E[b], keep=k, pivot="center", order="selection")
                alone += int(torch.equal(one.view(-1), got[b]))
            alone_s = f"{alone}/{min(B, 8)}"
            cpu = "-"
            if B == 1:
                c = td.todre.select(E[0].cpu().numpy(), keep=k, pivot="center", order="selection")
                cpu = "yes" if c.tolist() == got[0].tolist() else "NO"
            print(f"{B:>6} {n:>6} {k:>5} {t_ours:>10.3f} {t_ours / B:>10.3f} {t_f32:>11.3f} "
                  f"{t_f16:>10.3f} {t_f32 / t_ours:>7.1f} {t_f16 / t_ours:>7.1f} {agree:>6.3f} "
                  f"{alone_s:>6} {cpu:>4}", flush=True)
            if cpu == "NO":
                judge_exact(E[0].cpu().numpy(), {"GPU": got[0].tolist(), "CPU": c.tolist()})
            for t in (emb_t, out_t, offs_t):
                t.close()
            cfg.close()
        del E
        torch.cuda.empty_cache()


# ---- stage 2 ------------------------------------------------------------------------

def torch_ratios(torch, A, types):
    """A: [H, Q, K] probabilities (queries are the last Q positions)."""
    H, Q, K = A.shape
    qt = types[K - Q:]
    vis = (types == 1).to(A.dtype)
    txt = (types == 2).to(A.dtype)
    row_all = A.float().sum(-1)                  # [H, Q]
    row_vis = (A * vis).float().sum(-1)
    row_txt = (A * txt).float().sum(-1)
    qtext, qvis = (qt == 2), (qt == 1)
    t2v = row_vis[:, qtext].sum() / row_all[:, qtext].sum().clamp_min(1e-30)
    v2t = row_txt[:, qvis].sum() / row_all[:, qvis].sum().clamp_min(1e-30)
    return t2v.item(), v2t.item()


def torch_probs(torch, q, k, scale):
    H, Q, dh = q.shape
    Hkv, K, _ = k.shape
    kk = k.repeat_interleave(H // Hkv, 0)
    s = torch.matmul(q, kk.transpose(1, 2)).float() * scale
    pos = torch.arange(K - Q, K, device=q.device).unsqueeze(1)
    mask = torch.arange(K, device=q.device).unsqueeze(0) > pos
    s.masked_fill_(mask, float("-inf"))
    return torch.softmax(s, -1).to(q.dtype)


def torch_ratios_by_head(torch, q, k, types, scale):
    """Reference ratios without the [H, K, K] matrix: one head at a time, fp32."""
    H, Q, dh = q.shape
    Hkv, K, _ = k.shape
    qt = types[K - Q:]
    vis, txt = (types == 1).float(), (types == 2).float()
    pos = torch.arange(K - Q, K, device=q.device).unsqueeze(1)
    mask = torch.arange(K, device=q.device).unsqueeze(0) > pos
    sums = torch.zeros(4, dtype=torch.float64, device=q.device)
    for h in range(H):
        s = (q[h].float() @ k[h // (H // Hkv)].float().T) * scale
        s.masked_fill_(mask, float("-inf"))
        a = torch.softmax(s, -1)
        ra, rv, rt = a.sum(-1), a @ vis, a @ txt
        sums += torch.stack([rv[qt == 2].sum(), ra[qt == 2].sum(),
                             rt[qt == 1].sum(), ra[qt == 1].sum()]).double()
    return (sums[0] / sums[1].clamp_min(1e-30)).item(), (sums[2] / sums[3].clamp_min(1e-30)).item()


def bench_stage2(torch, td, ctx, repeats):
    H, dh = 32, 128
    F = torch.nn.functional
    print(f"\nStage 2: H={H} dh={dh} f16 (median ms over {repeats}); 'SDPA layer' is one causal "
          f"scaled_dot_product_attention of the same shape (q, k, v); 'torch' materialises "
          f"softmax(QK^T) and sums (K <= 4096 only)")
    print(f"{'K':>6} {'layout':>20} {'Hkv':>4} {'path':>6} {'libtodre':>10} {'SDPA layer':>11} "
          f"{'% SDPA':>7} {'torch':>9} {'x torch':>8} {'|d t2v|':>9} {'|d v2t|':>9}")
    cases = [("[sys|vis|text]", [0] * 35 + [1] * 2880 + [2] * 40),
             ("[sys|text|vis|text]", [0] * 35 + [2] * 40 + [1] * 2880 + [2] * 60),
             ("[sys|vis|text]", [0] * 35 + [1] * 16249 + [2] * 100)]
    for name, tl in cases:
        types = torch.tensor(tl, dtype=torch.uint8)
        K = types.numel()
        tys_d = types.cuda()
        for Hkv in (32, 8):
            q = torch.randn(1, H, K, dh, device="cuda").half()
            k = torch.randn(1, Hkv, K, dh, device="cuda").half()
            v = torch.randn(1, Hkv, K, dh, device="cuda").half()
            scale = 1.0 / math.sqrt(dh)
            rel = td.todre.Relevance(1, 1, probe_layers=[0], context=ctx)
            rel.set_types(types.view(1, K))
            q_t, k_t = td.tensor(q, "q"), td.tensor(k, "k")
            reset_state = int(td.todre.Reset.STATE)

            def ours_qk():
                td.check(td.L.todre_relevance_reset(rel.handle, reset_state))
                td.check(td.L.todre_relevance_observe_qk(ctx.handle, rel.handle, 0, q_t.ref,
                                                         k_t.ref, 0.0, None), ctx)

            t_ours = median_ms(torch, ours_qk, repeats)
            t_sdpa = median_ms(torch, lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=True), repeats)
            t_torch = float("nan")
            if K <= 4096:
                t_torch = median_ms(torch, lambda: torch_ratios(
                    torch, torch_probs(torch, q[0], k[0], scale), tys_d), max(3, repeats // 4))
            ours_qk()
            r_ours = rel.ratios(0, seq=0)
            r_ref = torch_ratios_by_head(torch, q[0], k[0], tys_d, scale)
            print(f"{K:>6} {name:>20} {Hkv:>4} {'qk':>6} {t_ours:>10.3f} {t_sdpa:>11.3f} "
                  f"{100 * t_ours / t_sdpa:>6.1f}% {t_torch:>9.3f} {t_torch / t_ours:>8.1f} "
                  f"{abs(r_ours[0] - r_ref[0]):>9.2e} {abs(r_ours[1] - r_ref[1]):>9.2e}", flush=True)
            if Hkv == 32 and K <= 4096:
                A = torch_probs(torch, q[0], k[0], scale)
                a_t = td.tensor(A.unsqueeze(0), "attn")

                def ours_probs():
                    td.check(td.L.todre_relevance_reset(rel.handle, reset_state))
                    td.check(td.L.todre_relevance_observe_probs(ctx.handle, rel.handle, 0,
                                                                a_t.ref, None), ctx)

                t_p = median_ms(torch, ours_probs, repeats)
                t_pt = median_ms(torch, lambda: torch_ratios(torch, A, tys_d), repeats)
                ours_probs()
                rp = rel.ratios(0, seq=0)
                print(f"{K:>6} {name:>20} {Hkv:>4} {'probs':>6} {t_p:>10.3f} {t_sdpa:>11.3f} "
                      f"{100 * t_p / t_sdpa:>6.1f}% {t_pt:>9.3f} {t_pt / t_p:>8.1f} "
                      f"{abs(rp[0] - r_ref[0]):>9.2e} {abs(rp[1] - r_ref[1]):>9.2e}", flush=True)
                a_t.close()
                del A
            for t in (q_t, k_t):
                t.close()
            rel.close()
            del q, k, v
            torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="path to libtodre.so.1 (default: $TODRE_LIBRARY, else the "
                    "newest build*/libtodre.so.1)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--stage", choices=("1", "2", "both"), default="both")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        skip("no GPU (PyTorch is not installed)")
    if not torch.cuda.is_available():
        skip("no GPU (torch.cuda.is_available() is False)")
    lib = find_lib(args.lib)
    if not lib or not os.path.exists(lib):
        skip("libtodre.so.1 not found (build it, or pass --lib / TODRE_LIBRARY)")
    td = Todre(lib)
    ok, why = td.cuda_available()
    if not ok:
        skip(f"no GPU usable by libtodre ({why})")
    dev = td.todre.devices("cuda")[0]
    print(f"device: {torch.cuda.get_device_name(0)} ({dev.arch}); torch {torch.__version__}; "
          f"libtodre {td.todre.version()} ({lib})")
    ctx = td.context(torch.cuda.current_stream().cuda_stream)
    failed = False
    try:
        import traceback
        for stage, fn in (("1", bench_stage1), ("2", bench_stage2)):
            if args.stage in (stage, "both"):
                try:
                    fn(torch, td, ctx, args.repeats)
                except Exception:   # report, and go on to the other stage
                    traceback.print_exc()
                    failed = True
    finally:
        ctx.close()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
