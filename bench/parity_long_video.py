#!/usr/bin/env python3
"""Whose rounding is right where selections differ: libtodre's CPU backend
and a PyTorch fp32 loop against the exact (float64) greedy, on a long video.

    python3 bench/parity_long_video.py [--lib build/libtodre.so.1] [--n 18000] [--k 1800]

On a GPU the long video (n = 18,000, d = 4096, k = 1,800, f16) selected by
the CUDA backend equalled bench/bench_cuda.py's PyTorch fp32 loop and not
the CPU backend (docs/cuda.md). This script takes the same kind of input
(bench_cuda.py's make_images: 24 Gaussian centres, noise 0.7, f16; drawn
by NumPy here, so not the same values) and selects it three ways on the
CPU: libtodre (the CPU path of this process: TODRE_CPU_ISA applies), the
PyTorch fp32 loop of bench_cuda.py (fp32 Gram matrix, then cumulative
scores), and float64 for the judgement: for each trajectory, the exact
scores (rows normalised in float64, similarities summed in float64 along
the trajectory's own picks) at every step, and by how much each pick falls
short of the best untaken token. A deficit of 0 at every step is the exact
greedy (ties to the lowest index aside); a near-tie taken the other way
shows as one step with a deficit near the fp32 rounding of the scores.

No timing is a result here (the seconds printed are for orientation).
"""
import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_video(n, d, seed):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((24, d), dtype=np.float32)
    assign = rng.integers(0, 24, n)
    return (centres[assign] + 0.7 * rng.standard_normal((n, d), dtype=np.float32)).astype(np.float16)


def torch_fp32(E, k, threads):
    """bench_cuda.py's torch_algorithm1 with an fp32 Gram, one set, on the CPU."""
    import torch
    torch.set_num_threads(threads)
    X = torch.nn.functional.normalize(torch.from_numpy(E).float(), dim=-1)
    S = X @ X.T
    p = int((X @ X.mean(0)).argmax())
    scores = S[p].clone()
    taken = torch.zeros(E.shape[0], dtype=torch.bool)
    taken[p] = True
    order = [p]
    for _ in range(1, k):
        c = int(scores.masked_fill(taken, float("inf")).argmin())
        order.append(c)
        taken[c] = True
        scores += S[c]
    return order


def exact_deficits(X64, order, block=128):
    """Per step j >= 1: exact score of order[j] minus the exact best untaken
    score (max-sum minimises the summed similarity), float64, along order."""
    n, k = X64.shape[0], len(order)
    R = np.empty((k, n))
    for j in range(0, k, block):
        R[j:j + block] = X64[order[j:j + block]] @ X64.T
    s = np.zeros(n)
    taken = np.zeros(n, dtype=bool)
    out = np.zeros(k)
    for j in range(1, k):
        taken[order[j - 1]] = True
        s += R[j - 1]
        masked = np.where(taken, np.inf, s)
        out[j] = masked[order[j]] - masked.min()
    return out, float(np.abs(s).max())


def judge(E, orders, indent=""):
    """Print where the two trajectories in `orders` ({name: order}) first
    differ, the share of equal positions, and for each its steps that are
    not the exact (float64) greedy's best, with the largest deficit."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import todre_ref
    a, b = orders.values()
    diff = next((i for i in range(len(a)) if a[i] != b[i]), None)
    same = float(np.mean(np.array(a) == np.array(b)))
    print(f"{indent}first step where they differ: {diff}; positions equal: {same:.3f}")
    X64 = todre_ref.normalize(np.asarray(E, dtype=np.float64))
    for name, order in orders.items():
        dfc, scale = exact_deficits(X64, order)
        bad = np.flatnonzero(dfc > 0)
        worst = int(dfc.argmax())
        print(f"{indent}{name}: steps not the exact best {len(bad)} (first: {bad[:5].tolist()}); "
              f"largest deficit {dfc[worst]:.3g} at step {worst} (scores up to {scale:.3g})",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--n", type=int, default=18000)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--k", type=int, default=1800)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.lib:
        os.environ["TODRE_LIBRARY"] = a.lib
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
    import todre

    E = make_video(a.n, a.d, a.seed)
    ctx = todre.Context("cpu", num_threads=a.threads)
    t = time.time()
    ours = ctx.select(E, keep=a.k, pivot="center", order="selection").tolist()
    t_ours = time.time() - t
    t = time.time()
    ref = torch_fp32(E, a.k, a.threads)
    t_ref = time.time() - t
    print(f"n = {a.n}, d = {a.d}, k = {a.k}, f16, max-sum, CENTER pivot; CPU path "
          f"{todre.devices('cpu')[0].arch}; libtodre {t_ours:.2f} s, PyTorch fp32 loop {t_ref:.2f} s")
    judge(E, {"libtodre": ours, "PyTorch fp32": ref})

if __name__ == "__main__":
    main()
