#!/usr/bin/env python3
"""How many Gram rows the ROWS strategy makes for a greedy run, by batch size
and by the rule that picks a batch's speculative rows (docs/performance.md,
"How stage 1 is fast on the CPU"; its results in bench/results/).

    python3 bench/speculation_sim.py [--k 288 720] [--batch 4 8 12 16 24 32]
                                     [--data clustered|gaussian] [--exact 64]
                                     [--quant] [--outliers X] [--sketches]

A model of src/cpu/select_greedy.c (MAX_SUM from the CLS pivot; the store
never full): when the selected token c has no row yet, a batch is made of c
and the (batch - 1) untaken tokens without a row that the rule ranks first,
capped by the steps that can still use a row; a row is dropped once used.
Only counts are modelled, not time: every row made costs n * d products, and
each batch streams the n packed rows once. Rules:

* exact-L (what libtodre's FMA kernels do, L = 64): the
  greedy simulated ahead on exact similarities among c and the L untaken
  tokens with the best current values (a pick's stored row where it has
  one, else its similarities with the L candidates), its picks without a
  row first, then the best current values; counts also the mini-rows made
  (dot products of L candidates with a pick that has no row);
* int8-L (--quant; not libtodre's rule: the quantisation costs what the
  cheaper mini-rows save): the same with the
  mini-rows estimated from the rows quantised to int8, each scaled to its
  largest magnitude, the stored rows exact;
* current: the best current values (libtodre's AMX kernel, and the FMA
  kernels before the lookahead);
* lookahead-SKETCH-r: the greedy simulated ahead on the similarities of an
  r-dimensional sketch of the unit rows (exact rows where already made),
  its picks first, then the best current values;
* shifted-L: the current values plus L times c's (exact) similarities, an
  upper bound on what knowing c's row before choosing the batch would give.

Data from bench/bench_select.py's make_data (n = 2880, d = 4096, seed 1234),
values of f16-rounded rows, in float64.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_select import make_data  # noqa: E402


def make_rows(data, n=2880, d=4096):
    """Unit rows (float64) of bench_select's f16-rounded data, and the CLS pivot."""
    V, cls = make_data(n, d, data)
    X = V.astype(np.float16).astype(np.float64)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, int(np.argmax(cls))


def sketch_gram(X, kind, r):
    n, d = X.shape
    if kind == "subset":       # every (d / r)-th coordinate
        S = X[:, :: d // r][:, :r]
    elif kind == "count":      # count sketch: coordinate i to bucket i mod r, random sign
        sg = np.where(np.random.default_rng(7).random(d) < 0.5, -1.0, 1.0)
        S = sum(X[:, j * r:(j + 1) * r] * sg[j * r:(j + 1) * r] for j in range(d // r))
    else:                      # Gaussian projection
        S = X @ (np.random.default_rng(7).standard_normal((d, r)) / np.sqrt(r))
    S = S / np.linalg.norm(S, axis=1, keepdims=True)
    return S @ S.T


def quant_gram(X):
    """Similarities of the rows quantised as the int8-L rule does:
    q = round(x * 127 / max |x|), the products exact, times the scales."""
    m = np.abs(X).max(axis=1, keepdims=True)
    m[m == 0] = 1.0
    Q = np.rint(X * (127.0 / m))
    return (Q @ Q.T) * ((m / 127.0) @ (m / 127.0).T)


def run(G, p, k, batch, rule, Gs=None, shift=0.0, L=64, stats=None, Ga=None):
    """(rows made, batches) of one greedy run (mini-rows in stats["mini"]);
    Ga: the mini-rows' similarities (default: exact, G)."""
    Ga = G if Ga is None else Ga
    n = G.shape[0]
    acc = np.zeros(n)
    taken = np.zeros(n, bool)
    stored = np.zeros(n, bool)
    made = batches = 0
    c = p
    for t in range(k):
        taken[c] = True
        if t + 1 == k:
            break
        if not stored[c]:
            cap = min(k - 2 - t, batch - 1)
            ids = [c]
            if rule == "exact" and cap > 0:
                free = ~taken
                free[c] = False
                cand = np.array([v for v in np.argsort(np.where(free, acc, np.inf),
                                                        kind="stable")[:L] if free[v]])
                a = acc[cand]
                seen = np.zeros(len(cand), bool)
                u = c
                while True:
                    if stats is not None and not stored[u]:
                        stats["mini"] = stats.get("mini", 0) + 1
                    a = a + (G[u, cand] if stored[u] else Ga[u, cand])
                    if seen.all():
                        break
                    i = int(np.argmin(np.where(seen, np.inf, a)))
                    seen[i] = True
                    u = int(cand[i])
                    if not stored[u]:
                        ids.append(u)
                    if len(ids) > cap:
                        break
            if rule == "lookahead":
                a = acc + Gs[c]
                seen = taken.copy()
                for _ in range(3 * batch):
                    if len(ids) > cap:
                        break
                    u = int(np.argmin(np.where(seen, np.inf, a)))
                    seen[u] = True
                    if not stored[u]:
                        ids.append(u)
                    a = a + (G[u] if stored[u] else Gs[u])
            score = acc + (shift * G[c] if rule == "shifted" else 0.0)
            free = ~(taken | stored)
            free[ids] = False
            order = np.argsort(np.where(free, score, np.inf), kind="stable")
            ids += [int(v) for v in order[:cap + 1 - len(ids)] if free[v]]
            stored[ids] = True
            made += len(ids)
            batches += 1
        acc += G[c]
        stored[c] = False
        c = int(np.argmin(np.where(taken, np.inf, acc)))
    return made, batches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, nargs="+", default=[288, 720])
    ap.add_argument("--batch", type=int, nargs="+", default=[4, 8, 12, 16, 24, 32])
    ap.add_argument("--data", default="clustered", choices=["clustered", "gaussian"])
    ap.add_argument("--exact", type=int, nargs="*", default=[64],
                    help="candidates of the exact lookahead (none: skip it)")
    ap.add_argument("--sketches", action="store_true",
                    help="also the lookahead and shifted rules at batch 12")
    ap.add_argument("--quant", action="store_true",
                    help="also the exact-L rule on int8 estimates (int8-L)")
    ap.add_argument("--outliers", type=float, default=1.0,
                    help="scale 4 dimensions (7, 100, 2000, 3000) by this, as some "
                         "vision towers' features have a few large ones")
    args = ap.parse_args()
    X, p = make_rows(args.data)
    if args.outliers != 1.0:
        X[:, [7, 100, 2000, 3000]] *= args.outliers
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    G = X @ X.T
    Gq = quant_gram(X) if args.quant else None
    print(f"data {args.data}, n = {X.shape[0]}, d = {X.shape[1]}; rows made (per step), batches")
    for k in args.k:
        for b in args.batch:
            m, nb = run(G, p, k, b, "current")
            print(f"k = {k:4d}  batch {b:2d}  {'current':<22} {m:5d} ({m / (k - 1):.2f})  {nb:4d}")
            for L in args.exact:
                st = {}
                m, nb = run(G, p, k, b, "exact", L=L, stats=st)
                name = f"exact-{L}"
                print(f"k = {k:4d}  batch {b:2d}  {name:<22} {m:5d} ({m / (k - 1):.2f})  {nb:4d}"
                      f"  mini-rows {st.get('mini', 0)}")
                if Gq is not None:
                    st = {}
                    m, nb = run(G, p, k, b, "exact", L=L, stats=st, Ga=Gq)
                    name = f"int8-{L}"
                    print(f"k = {k:4d}  batch {b:2d}  {name:<22} {m:5d} ({m / (k - 1):.2f})"
                          f"  {nb:4d}  mini-rows {st.get('mini', 0)}")
        if not args.sketches:
            continue
        for kind, r in (("subset", 64), ("subset", 256), ("count", 256), ("jl", 64)):
            m, nb = run(G, p, k, 12, "lookahead", Gs=sketch_gram(X, kind, r))
            name = f"lookahead-{kind}-{r}"
            print(f"k = {k:4d}  batch 12  {name:<22} {m:5d} ({m / (k - 1):.2f})  {nb:4d}")
        for shift in (0.5, 1.0):
            m, nb = run(G, p, k, 12, "shifted", shift=shift)
            name = f"shifted-{shift}"
            print(f"k = {k:4d}  batch 12  {name:<22} {m:5d} ({m / (k - 1):.2f})  {nb:4d}")


if __name__ == "__main__":
    main()
