#!/usr/bin/env python3
"""DivPrune's selection as users run it today (PyTorch on the CPU) against
libtodre's max-min objective on the same inputs.

    python3 bench/bench_divprune.py [--lib build-x/libtodre.so.1] [--reps 5]

The PyTorch side is written from the description of DivPrune's reference
implementation (not copied from it): rows normalised in float32, the full
n x n cosine-distance matrix 1 - X X^T, the first token the one whose
column has the largest second-smallest distance (the smallest is its own
0: the token farthest from its nearest neighbour), then at every step one
min-reduction of the distance rows of all tokens picked so far and the
argmax of that minimum over the tokens not picked. libtodre runs
objective 'max-min' with pivot 'isolated' (docs/semantics.md: the same
rule), f16 and bf16 input read in place (bf16: a torch tensor, as a runtime
hands it over). Each case prints medians of both sides, the
speed-up, and whether the selections are identical (else the first
differing step and the exact (float64) max-min slack of libtodre's order).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_select import Todre, describe_machine, describe_setup  # noqa: E402
from bench_select import timed as timed_select  # noqa: E402


def divprune_torch(X16, k):
    """DivPrune's greedy max-min selection, PyTorch float32 on the CPU."""
    import torch
    X = X16.float()
    X = X / X.norm(dim=1, keepdim=True)
    D = 1.0 - X @ X.T                               # n x n cosine distances
    first = int(torch.topk(D, 2, dim=0, largest=False).values[1].argmax())
    picked = [first]
    mask = torch.zeros(D.shape[0], dtype=torch.bool)
    mask[first] = True
    for _ in range(k - 1):
        mins = D[picked].min(dim=0).values          # min over the picked rows
        mins[mask] = -float("inf")
        c = int(mins.argmax())
        picked.append(c)
        mask[c] = True
    return np.array(picked)


def maxmin_slack(V, order):
    """Largest amount by which a step of @p order was not the exact (float64)
    max-min argmax (0 for an exact trajectory)."""
    X = V.astype(np.float64)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    dist = 1.0 - X @ X[order[0]]
    taken = np.zeros(len(X), bool)
    taken[order[0]] = True
    worst = 0.0
    for c in order[1:]:
        worst = max(worst, np.where(taken, -np.inf, dist).max() - dist[c])
        taken[c] = True
        dist = np.minimum(dist, 1.0 - X @ X[c])
    return worst


def maxmin_todre(td, V, k):
    """libtodre's max-min selection: (selection order, position order)."""
    out = td.ctx.select(V, keep=k, objective="max-min", pivot="isolated", order="both")
    out = out.numpy() if hasattr(out, "numpy") else out  # torch in, torch out
    return out[0].copy(), out[1].copy()


def timed(fn, reps):
    """(median, last result): bench_select.timed's pause, untimed call and
    reps."""
    med, _, res = timed_select(fn, reps)
    return med, res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=2880)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--k", type=int, nargs="+", default=[288, 720])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "f32"],
                    choices=["f16", "f32", "bf16"])
    ap.add_argument("--threads", type=int, default=0, help="both sides (0 = all CPUs)")
    args = ap.parse_args()
    import torch
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    td = Todre(args.lib, "auto", args.threads)
    rng = np.random.default_rng(1234)
    n, d = args.n, args.d
    centres = rng.standard_normal((48, d)).astype(np.float32)
    V32 = (centres[rng.integers(0, 48, n)] + 0.6 * rng.standard_normal((n, d), np.float32)
           + 0.8 * rng.standard_normal(d).astype(np.float32))
    print(f"machine: {describe_machine()}, PyTorch {torch.__version__}; libtodre "
          f"{td.todre.version()} ({td.todre.library_path})")
    print(f"setup: {describe_setup(td.todre)}")
    print(f"n = {n}, d = {d}, threads = {threads}, medians of {args.reps}, ms")
    print(f"{'dtype':>5} {'k':>5} | {'DivPrune torch':>14} | {'libtodre':>9} | {'speed-up':>8} | selection")
    for dt in args.dtypes:
        if dt == "bf16":  # both sides take the torch tensor; the slack its exact values
            T = torch.from_numpy(V32).to(torch.bfloat16)
            Vin, V = T, T.float().numpy()
        else:
            V = V32.astype(np.float16) if dt == "f16" else V32
            T, Vin = torch.from_numpy(V), V
        for k in args.k:
            t_ref, ref = timed(lambda: divprune_torch(T, k), args.reps)
            t_td, (sel, _) = timed(lambda: maxmin_todre(td, Vin, k), args.reps)
            if np.array_equal(sel, ref):
                verdict = "identical"
            else:
                first = int(np.argmax(sel != ref))
                verdict = (f"differs from step {first}; exact max-min slack libtodre "
                           f"{maxmin_slack(V, sel):.1e}, DivPrune {maxmin_slack(V, ref):.1e}")
            print(f"{dt:>5} {k:>5} | {t_ref * 1e3:14.1f} | {t_td * 1e3:9.1f} | "
                  f"{t_ref / t_td:7.2f}x | {verdict}")
            sys.stdout.flush()
    td.close()


if __name__ == "__main__":
    main()
