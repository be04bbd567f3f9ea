#!/usr/bin/env python3
"""How many Gram rows the ROWS strategy makes for a greedy run, by batch size
and by the rule that picks a batch's speculative rows (docs/benchmarks.md,
"Against the floor").

    python3 bench/speculation_sim.py [--k 288 720] [--batch 4 8 12 16 24 32]
                                     [--data clustered|gaussian] [--sketches]

A model of src/cpu/select_greedy.c (MAX_SUM from the CLS pivot; the store
never full): when the selected token c has no row yet, a batch is made of c
and the (batch - 1) untaken tokens without a row that the rule ranks first,
capped by the steps that can still use a row; a row is dropped once used.
Only counts are modelled, not time: every row made costs n * d products, and
each batch streams the n packed rows once. Rules:

* current: the best current values (what libtodre does);
* lookahead-SKETCH-r: the greedy simulated ahead on the similarities of an
  r-dimensional sketch of the unit rows (exact rows where already made),
  its picks first, then the best current values;
* shifted-L: the current values plus L times c's (exact) similarities, an
  upper bound on what knowing c's row before choosing the batch would give.

Data as bench/bench_select.py makes it (n = 2880, d = 4096, seed 1234),
values of f16-rounded rows, in float64.
"""
import argparse

import numpy as np


def make_rows(data, n=2880, d=4096):
    rng = np.random.default_rng(1234)
    if data == "gaussian":
        V = rng.standard_normal((n, d), dtype=np.float32)
    else:
        centres = rng.standard_normal((48, d)).astype(np.float32)
        V = (centres[rng.integers(0, 48, n)] + 0.6 * rng.standard_normal((n, d), np.float32)
             + 0.8 * rng.standard_normal(d).astype(np.float32))
    cls = rng.random(n).astype(np.float32)
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


def run(G, p, k, batch, rule, Gs=None, shift=0.0):
    """(rows made, batches) of one greedy run."""
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
    ap.add_argument("--sketches", action="store_true",
                    help="also the lookahead and shifted rules at batch 12")
    args = ap.parse_args()
    X, p = make_rows(args.data)
    G = X @ X.T
    print(f"data {args.data}, n = {X.shape[0]}, d = {X.shape[1]}; rows made (per step), batches")
    for k in args.k:
        for b in args.batch:
            m, nb = run(G, p, k, b, "current")
            print(f"k = {k:4d}  batch {b:2d}  {'current':<22} {m:5d} ({m / (k - 1):.2f})  {nb:4d}")
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
