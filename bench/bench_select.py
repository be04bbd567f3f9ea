#!/usr/bin/env python3
"""Stage-1 CPU benchmark: libtodre's todre_select (through ctypes on
libtodre.so, in this process) against a straightforward NumPy implementation
of the paper's Algorithm 1, on the same inputs.

    python3 bench/bench_select.py [--lib build-x/libtodre.so] [--reps 7]

For each case (n = 2880, d = 4096 as LLaVA-NeXT-7B AnyRes; k = 288 and 720;
f16 and f32 input) it times both several times, prints medians and the
speed-up, and checks the selection: identical to NumPy's, or else a valid
greedy trajectory of the exact (float64) algorithm up to near-ties.

NumPy is used as a user would: f16 input converted to float32 first, rows
normalised, s = X @ X[p], then argmin / update / mask per step. Both sides
start from the same pivot (the argmax of a CLS map) and use the threads the
machine has (OpenBLAS inside NumPy, OpenMP + OpenBLAS inside libtodre).
"""
import argparse
import ctypes as C
import glob
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

# ---- libtodre through ctypes (public ABI only) -----------------------------

DT_F32, DT_F16, DT_BF16, DT_I64 = 0, 1, 2, 4
OBJECTIVES = {"max-sum": 0, "max-min": 1, "cls-topk": 2}
PIVOTS = {"auto": 0, "cls": 1, "center": 2, "farthest": 3, "random": 4, "isolated": 5}
SEL_OBJECTIVE, SEL_PIVOT, SEL_LO, SEL_HI, SEL_KEEP, SEL_SEED, SEL_ORDER = range(7)
CTX_WS_LIMIT, CTX_STRATEGY, CTX_THREADS = 0, 1, 2
STRATEGIES = {"auto": 0, "gemv": 1, "gram": 2, "rows": 3}
ORDER_BOTH = 2


class TodreError(RuntimeError):
    def __init__(self, status, msg):
        super().__init__(f"status {status}: {msg}")
        self.status = status
        self.msg = msg


def find_lib(path=None):
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    hits = sorted(glob.glob(os.path.join(here, "..", "build*", "libtodre.so")),
                  key=os.path.getmtime, reverse=True)
    if not hits:
        sys.exit("libtodre.so not found: build first or pass --lib")
    return hits[0]


class Todre:
    """A CPU context and a selection configuration."""

    def __init__(self, lib_path=None):
        self.lib = L = C.CDLL(find_lib(lib_path))
        vp, i64 = C.c_void_p, C.c_int64
        L.todre_context_create.argtypes = [C.c_int, C.c_int, C.POINTER(vp)]
        L.todre_context_destroy.argtypes = [vp]
        L.todre_context_last_error.argtypes = [vp]
        L.todre_context_last_error.restype = C.c_char_p
        L.todre_context_set_param.argtypes = [vp, C.c_int, i64]
        L.todre_tensor_create.argtypes = [vp, C.c_int, C.c_int, C.c_int, C.c_int,
                                          C.POINTER(i64), C.POINTER(i64), C.POINTER(vp)]
        L.todre_tensor_destroy.argtypes = [vp]
        L.todre_select_config_create.argtypes = [C.POINTER(vp)]
        L.todre_select_config_destroy.argtypes = [vp]
        L.todre_select_config_set.argtypes = [vp, C.c_int, i64]
        L.todre_select.argtypes = [vp, vp, vp, vp, vp]
        L.todre_select_batch.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp]
        L.todre_last_error.restype = C.c_char_p
        self.ctx, self.cfg = vp(), vp()
        self._check(L.todre_context_create(1, 0, C.byref(self.ctx)))
        self._check(L.todre_select_config_create(C.byref(self.cfg)))

    def _check(self, st):
        if st != 0:
            msg = self.lib.todre_last_error().decode()
            raise TodreError(st, msg)

    def set_param(self, param, value):
        self._check(self.lib.todre_context_set_param(self.ctx, param, int(value)))

    def tensor(self, arr, dtype=None):
        if dtype is None:
            dtype = {np.dtype(np.float32): DT_F32, np.dtype(np.float16): DT_F16,
                     np.dtype(np.int64): DT_I64}[arr.dtype]
        shape = (C.c_int64 * arr.ndim)(*arr.shape)
        strides = (C.c_int64 * arr.ndim)(*[s // arr.itemsize for s in arr.strides])
        t = C.c_void_p()
        self._check(self.lib.todre_tensor_create(C.c_void_p(arr.ctypes.data), dtype, 0, 0,
                                                 arr.ndim, shape, strides, C.byref(t)))
        return t

    def configure(self, k, objective="max-sum", pivot="auto", lo=0, hi=-1, seed=0):
        for p, v in ((SEL_OBJECTIVE, OBJECTIVES[objective]), (SEL_PIVOT, PIVOTS[pivot]),
                     (SEL_HI, -1), (SEL_LO, lo), (SEL_HI, hi), (SEL_KEEP, k),
                     (SEL_SEED, seed), (SEL_ORDER, ORDER_BOTH)):
            self._check(self.lib.todre_select_config_set(self.cfg, p, int(v)))

    def select(self, E, k, cls=None, emb_dtype=None, cls_dtype=None, **cfg):
        """(selection order, position order). E may be a strided view; a
        uint16 array with emb_dtype=DT_BF16 is bfloat16."""
        self.configure(k, **cfg)
        out = np.empty((2, k), np.int64)
        te = self.tensor(E, emb_dtype)
        tc = self.tensor(cls, cls_dtype) if cls is not None else None
        to = self.tensor(out)
        try:
            self._check(self.lib.todre_select(self.ctx, self.cfg, te, tc, to))
        finally:
            for t in (te, tc, to):
                if t is not None:
                    self.lib.todre_tensor_destroy(t)
        return out[0].copy(), out[1].copy()

    def close(self):
        self.lib.todre_select_config_destroy(self.cfg)
        self.lib.todre_context_destroy(self.ctx)


# ---- NumPy Algorithm 1 (as a user would write it) --------------------------

def numpy_alg1(V, cls, k):
    """Greedy max-sum diversification, Algorithm 1 of the paper's supplement,
    float32 as NumPy users run it."""
    X = V.astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    p = int(np.argmax(cls))
    C_ = [p]
    s = X @ X[p]
    s[p] = np.inf
    for _ in range(k - 1):
        c = int(np.argmin(s))
        C_.append(c)
        s += X @ X[c]
        s[c] = np.inf
    return np.array(C_)


# ---- validity against exact arithmetic --------------------------------------

def trajectory_slack(V, order):
    """Largest amount by which a step of @p order was not the exact (float64)
    argmin: 0 for an exact greedy trajectory, tiny for one that differs only
    by near-ties."""
    X = V.astype(np.float64)
    nrm = np.linalg.norm(X, axis=1, keepdims=True)
    X = np.divide(X, nrm, out=np.zeros_like(X), where=nrm > 0)
    s = X @ X[order[0]]
    taken = np.zeros(len(X), bool)
    taken[order[0]] = True
    worst = 0.0
    for c in order[1:]:
        free = np.where(taken, np.inf, s)
        worst = max(worst, s[c] - free.min())
        taken[c] = True
        s += X @ X[c]
    return worst


def describe_machine():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = [l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name")]
        model = model[0] if model else platform.processor()
    except OSError:
        model = platform.processor()
    return f"{model}, {os.cpu_count()} logical CPUs, NumPy {np.__version__}"


def numpy_blas_threads(n):
    """Set the thread count of the BLAS inside NumPy (its bundled OpenBLAS)
    without extra packages; returns False when it cannot."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for path in libs:
        lib = C.CDLL(path)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                     "openblas_set_num_threads"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn(int(n))
                return True
    return False


def timed(fn, reps):
    ts, res = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        res = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts), res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--n", type=int, default=2880)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--k", type=int, nargs="+", default=[288, 720])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "f32"])
    ap.add_argument("--strategy", default="auto", choices=list(STRATEGIES))
    ap.add_argument("--data", default="clustered", choices=["clustered", "gaussian"])
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for both sides (0 = all; NumPy via its OpenBLAS)")
    args = ap.parse_args()

    td = Todre(args.lib)
    td.set_param(CTX_STRATEGY, STRATEGIES[args.strategy])
    td.set_param(CTX_THREADS, args.threads)
    if args.threads and not numpy_blas_threads(args.threads):
        print("note: could not set NumPy's BLAS thread count")
    rng = np.random.default_rng(1234)
    n, d = args.n, args.d
    if args.data == "gaussian":
        V32 = rng.standard_normal((n, d), dtype=np.float32)
    else:
        # tokens around a few dozen centres with a shared offset, closer to
        # projector outputs than white noise
        centres = rng.standard_normal((48, d)).astype(np.float32)
        V32 = (centres[rng.integers(0, 48, n)] + 0.6 * rng.standard_normal((n, d), np.float32)
               + 0.8 * rng.standard_normal(d).astype(np.float32))
    cls = rng.random(n).astype(np.float32)

    print(f"machine: {describe_machine()}")
    print(f"n = {n}, d = {d}, data = {args.data}, reps = {args.reps}, strategy = {args.strategy}, "
          f"threads = {args.threads or os.cpu_count()}, medians (min) in ms")
    hdr = f"{'dtype':>5} {'k':>5} | {'numpy':>15} | {'libtodre':>15} | {'speed-up':>8} | selection"
    print(hdr)
    print("-" * len(hdr))
    for dt in args.dtypes:
        V = V32.astype(np.float16) if dt == "f16" else V32
        for k in args.k:
            t_np, m_np, ref = timed(lambda: numpy_alg1(V, cls, k), args.reps)
            t_td, m_td, (sel, _) = timed(lambda: td.select(V, k, cls, pivot="cls"), args.reps)
            if np.array_equal(sel, ref):
                verdict = "identical to NumPy"
            else:
                first = int(np.argmax(sel != ref))
                slack = trajectory_slack(V, sel)
                verdict = (f"differs from step {first}; exact-greedy slack {slack:.1e} "
                           f"({'valid' if slack < 1e-5 else 'INVALID'}; NumPy's: "
                           f"{trajectory_slack(V, ref):.1e})")
            print(f"{dt:>5} {k:>5} | {t_np * 1e3:7.1f} ({m_np * 1e3:5.1f}) | "
                  f"{t_td * 1e3:7.1f} ({m_td * 1e3:5.1f}) | {t_np / t_td:7.2f}x | {verdict}")
            sys.stdout.flush()
    td.close()


if __name__ == "__main__":
    main()
