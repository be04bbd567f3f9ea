#!/usr/bin/env python3
"""Bit-for-bit comparison of two libtodre builds on the CPU backend: every
stage-1 selection (indices in both orders, per-token scores and steps) and
every stage-2 ratio of a fixed corpus, at every instruction-set level this
machine has (TODRE_CPU_ISA) and under the kernel overrides (TODRE_CPU_GRAM,
TODRE_CPU_BF16). What a change of the inside (a kernel moved to another
file, a loop cut along a new seam) must leave exactly as it was.

    python3 scripts/selection_digest.py BEFORE/libtodre.so.1 AFTER/libtodre.so.1
    python3 scripts/selection_digest.py --quick BEFORE AFTER   # no overrides
    python3 scripts/selection_digest.py --emit LIB      # one build's digests (JSON)

The corpus: f32, f16 and bf16 rows; n from 1 to 2000; k = 1, k = n, ratios;
the three objectives and every pivot; each strategy forced (matrix-vector,
Gram, Gram rows) and chosen by the planner; one and two threads; a small
workspace limit (row store evictions); identical rows, ties, zero rows,
rows of huge and tiny norm, strided rows; ragged batches with groups and
the shared budget; a video's frame-major CLS map; attention probabilities
and Q/K (grouped heads) for stage 2. Each case is digested (SHA-256 of its
outputs' bytes); the comparison names every case whose digest differs.

Exit status: 0 when every digest of every level matches, 1 otherwise, 2 on
bad arguments. Needs NumPy and PyTorch (bf16 rows).
"""
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVELS = ("generic", "avx2", "avx512", "amx")
# (name, environment, the lowest level it changes anything at)
VARIANTS = [("default", {}, "generic"), ("gram=blas", {"TODRE_CPU_GRAM": "blas"}, "avx2"),
            ("gram=fma", {"TODRE_CPU_GRAM": "fma"}, "avx2"),
            ("bf16=fma", {"TODRE_CPU_BF16": "fma"}, "avx512"),
            ("bf16=dp", {"TODRE_CPU_BF16": "dp"}, "avx512")]


def corpus(np, torch):
    """(case name, rows, options) triples; rows a NumPy or torch array."""
    rng = np.random.default_rng(20261129)

    def clustered(n, d, centres=12):
        c = rng.standard_normal((centres, d))
        return (c[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, d)))

    def as_dtype(x, dt):
        if dt == "bf16":
            return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
        return np.ascontiguousarray(x, dtype=np.float32 if dt == "f32" else np.float16)

    cases = []
    shapes = [(1, 8), (7, 5), (64, 33), (300, 96), (700, 257), (2000, 512)]
    for dt in ("f32", "f16", "bf16"):
        for n, d in shapes:
            x = clustered(n, d)
            cls = rng.random(n).astype(np.float32)
            E = as_dtype(x, dt)
            for k in sorted({1, max(1, n // 10), n}):
                for obj in ("max-sum", "max-min", "cls-topk"):
                    cases.append((f"{dt}.n{n}.d{d}.k{k}.{obj}", E,
                                  dict(keep=k, objective=obj, pivot="cls", cls=cls)))
            if n >= 64:
                for piv in ("auto", "center", "farthest", "random", "isolated"):
                    cases.append((f"{dt}.n{n}.d{d}.pivot-{piv}", E,
                                  dict(ratio=0.1, pivot=piv, seed=7, cls=cls)))
                cases.append((f"{dt}.n{n}.d{d}.range", E,
                              dict(ratio=0.25, pivot="cls", cls=cls, pivot_range=(0, n // 4))))
        # structured rows
        n, d = 400, 64
        base = clustered(n, d)
        dup = base.copy()
        dup[100:200] = dup[0]                       # one row a hundred times
        dup[250:260] = dup[240:250]                 # copies of a run
        ties = np.zeros((n, d))
        ties[:, 0] = 1.0                            # every similarity 1: all ties
        zero = base.copy()
        zero[::7] = 0.0                             # zero rows
        huge = base.copy()
        huge[::5] *= 1e18 if dt == "f32" else 1.0   # norms outside the safe range (f32)
        huge[1::5] *= 1e-18 if dt == "f32" else 1.0
        for name, x in (("dup", dup), ("ties", ties), ("zero", zero), ("huge", huge)):
            E = as_dtype(x, dt)
            for obj in ("max-sum", "max-min"):
                for piv in ("auto", "isolated"):
                    cases.append((f"{dt}.{name}.{obj}.{piv}", E,
                                  dict(ratio=0.2, objective=obj, pivot=piv)))
        wide = as_dtype(clustered(500, 160), dt)
        strided = wide[:, :96]                      # row stride 160, d 96
        cases.append((f"{dt}.strided", strided, dict(ratio=0.1, pivot="center")))
    return cases


def emit(lib):
    """Digests of every case on the library at `lib`, in this process's
    TODRE_CPU_ISA and overrides (JSON on stdout)."""
    os.environ["TODRE_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
    import numpy as np
    import torch
    import todre

    def digest(arrays):
        h = hashlib.sha256()
        for a in arrays:
            if isinstance(a, torch.Tensor):
                a = a.float().numpy() if a.dtype == torch.bfloat16 else a.numpy()
            a = np.ascontiguousarray(a)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(a.tobytes())
        return h.hexdigest()[:24]

    res = {}
    configs = [("auto", 0, 0, 0), ("gemv", 1, 1, 0), ("gram", 2, 2, 0), ("rows", 3, 2, 0),
               ("rows.ws1M", 3, 1, 1 << 20), ("auto.t1", 0, 1, 0)]
    for cname, strategy, threads, ws in configs:
        kw = dict(num_threads=threads)
        if ws:
            kw["workspace_limit"] = ws
        with todre.Context("cpu", select_strategy=strategy, **kw) as ctx:
            for name, E, opt in corpus(np, torch):
                n = E.shape[0]
                if cname != "auto" and n > 700 and opt.get("objective") == "cls-topk":
                    continue
                try:
                    out = ctx.select(E, order="both", **opt)
                    res[f"{cname}/{name}"] = digest([out])
                except todre.TodreError as e:
                    res[f"{cname}/{name}"] = f"error {e.status.name}"
        # batches with groups, the shared budget, scores and steps
        with todre.Context("cpu", select_strategy=strategy, **kw) as ctx:
            rng = np.random.default_rng(5)
            sizes = [576, 1, 0, 300, 97]
            x = rng.standard_normal((sum(sizes), 80)).astype(np.float32)
            groups = np.concatenate([[0], np.cumsum(sizes)])
            for dt in ("f32", "f16"):
                E = x if dt == "f32" else x.astype(np.float16)
                for budget in ("set", "shared", "per-group"):
                    kept, scores, steps = ctx.select(E, ratio=0.1, groups=groups.tolist(),
                                                     budget=budget, group_min=3,
                                                     with_scores=True)
                    res[f"{cname}/groups.{dt}.{budget}"] = digest([kept, scores, steps])
            E = rng.standard_normal((1300, 64)).astype(np.float32)
            offs = [0, 1, 500, 501, 1300]
            idx, oo = ctx.select_batch(E, offsets=offs, ratio=0.2, order="both")
            res[f"{cname}/batch"] = digest([idx, oo])
            video = rng.standard_normal((16 * 49, 48)).astype(np.float32)
            vcls = rng.random((16, 49)).astype(np.float32)
            res[f"{cname}/video"] = digest([ctx.select(video, ratio=0.1, cls=vcls, order="both")])
    # stage 2: ratios of probabilities and of Q / K with grouped heads
    rng = np.random.default_rng(11)
    for dt in (np.float32, np.float16):
        for (B, H, Q, K) in ((1, 4, 9, 40), (2, 8, 70, 300)):
            rel = todre.Relevance(4, batch=B, tau=0.1, probe_layers=[1, 2])
            rel.set_layout(3, K - 3 - 20, 20)
            a = rng.random((B, H, Q, K)).astype(np.float32)
            a /= a.sum(-1, keepdims=True)
            rel.observe_probs(1, a.astype(dt))
            q = rng.standard_normal((B, H, Q, 64)).astype(dt)
            k = rng.standard_normal((B, H // 2, K, 64)).astype(dt)
            rel.observe_qk(2, q, k)
            r = [rel.ratios(layer, s) for layer in (1, 2) for s in range(B)]
            res[f"relevance.{np.dtype(dt).name}.{B}x{H}x{Q}x{K}"] = digest(
                [np.array(r, dtype=np.float64)])
            rel.close()
    json.dump(res, sys.stdout, sort_keys=True)


def supported_levels(lib):
    """The levels this machine runs: each one tried, kept where the library
    reports it in use."""
    code = ("import os,sys; sys.path.insert(0, %r); import todre; "
            "print(todre.devices('cpu')[0].arch)" % os.path.join(ROOT, "bindings", "python", "src"))
    have = []
    for lv in LEVELS:
        env = dict(os.environ, TODRE_LIBRARY=lib, TODRE_CPU_ISA=lv)
        arch = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True).stdout.strip()
        if arch == lv:
            have.append(lv)
    return have


def digests(lib, level, variant_env):
    env = dict(os.environ, TODRE_CPU_ISA=level, OMP_WAIT_POLICY="passive", **variant_env)
    for k in ("TODRE_CPU_GRAM", "TODRE_CPU_BF16"):
        if k not in variant_env:
            env.pop(k, None)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--emit", lib], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"selection_digest: {lib} at {level}: {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout)


def main(argv):
    if len(argv) == 3 and argv[1] == "--emit":
        emit(argv[2])
        return 0
    quick = len(argv) > 1 and argv[1] == "--quick"
    libs = argv[2:] if quick else argv[1:]
    if len(libs) != 2 or not all(os.path.isfile(a) for a in libs):
        print("usage: selection_digest.py [--quick] BEFORE_LIB AFTER_LIB | --emit LIB",
              file=sys.stderr)
        return 2
    before, after = (os.path.abspath(a) for a in libs)
    levels = supported_levels(before)
    print(f"levels on this machine: {', '.join(levels)}")
    bad = 0
    for level in levels:
        for vname, venv, lowest in VARIANTS[:1] if quick else VARIANTS:
            if LEVELS.index(level) < LEVELS.index(lowest):
                continue
            a, b = digests(before, level, venv), digests(after, level, venv)
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            print(f"{level:8s} {vname:10s} {len(a):4d} cases: "
                  f"{'identical' if not diff else f'{len(diff)} DIFFER'}")
            for k in diff[:20]:
                print(f"    {k}: {a.get(k)} -> {b.get(k)}")
            bad += len(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
