#!/usr/bin/env python3
"""Stage-1 CPU benchmark: libtodre's todre_select (through the todre Python
package, ctypes on libtodre.so.1 in this process) against a straightforward
NumPy implementation of the paper's Algorithm 1, on the same inputs.

    python3 bench/bench_select.py [--lib build-x/libtodre.so.1] [--reps 7]

For each case (n = 2880, d = 4096 as LLaVA-NeXT-7B AnyRes; k = 288 and 720;
f16 and f32 input, bf16 with PyTorch) it times both several times, prints
medians and the speed-up, and checks the selection: identical to NumPy's, or
else a valid greedy trajectory of the exact (float64) algorithm up to near-ties.

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = {"auto": 0, "gemv": 1, "gram": 2, "rows": 3}


def import_todre(path=None):
    """The todre package of this source tree on libtodre at `path`, else
    $TODRE_LIBRARY, else the newest build*/libtodre.so.1 of the tree."""
    if path:
        os.environ["TODRE_LIBRARY"] = path
    elif not os.environ.get("TODRE_LIBRARY"):
        hits = sorted(glob.glob(os.path.join(ROOT, "build*", "libtodre.so.1")),
                      key=os.path.getmtime, reverse=True)
        if not hits:
            sys.exit("libtodre.so.1 not found: build first, or pass --lib / set TODRE_LIBRARY")
        os.environ["TODRE_LIBRARY"] = hits[0]
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
    import todre
    return todre


class Todre:
    """A CPU context of the todre package (one workspace, reused)."""

    def __init__(self, lib_path=None, strategy="auto", threads=0):
        self.todre = import_todre(lib_path)
        self.ctx = self.todre.Context("cpu", select_strategy=STRATEGIES[strategy],
                                      num_threads=threads)

    def select(self, E, k, cls=None, pivot="cls"):
        """(selection order, position order) of k tokens of E (NumPy f16/f32, or a
        torch bf16 tensor)."""
        out = self.ctx.select(E, keep=k, cls=cls, pivot=pivot, order="both")
        out = out.numpy() if hasattr(out, "numpy") else out
        return out[0].copy(), out[1].copy()

    def close(self):
        self.ctx.close()


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


def numpy_blas_fn(stem):
    """Function openblas_<stem> of the OpenBLAS bundled with NumPy (under
    the names its builds export), or None."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for path in libs:
        lib = C.CDLL(path)
        for name in (f"scipy_openblas_{stem}64_", f"openblas_{stem}64_", f"openblas_{stem}"):
            fn = getattr(lib, name, None)
            if fn is not None:
                return fn
    return None


def numpy_blas_core():
    """The kernel set NumPy's bundled OpenBLAS chose (its corename), or None."""
    fn = numpy_blas_fn("get_corename")
    if fn is None:
        return None
    fn.restype, fn.argtypes = C.c_char_p, []
    return fn().decode(errors="replace")


def describe_setup(todre):
    """What decides the kernels on both sides: libtodre's CPU code path, the
    OpenBLAS cores of both sides, and the environment that caps them."""
    try:
        arch = todre.devices("cpu")[0].arch
    except Exception:  # noqa: BLE001 - a description, never fatal
        arch = "?"
    try:
        from todre.__main__ import _openblas
        ours = (_openblas() or {}).get("core", "?")
    except Exception:  # noqa: BLE001
        ours = "?"
    env = " ".join(f"{k}={os.environ[k]}" for k in
                   ("TODRE_CPU_ISA", "TODRE_CPU_BF16", "OPENBLAS_CORETYPE") if k in os.environ)
    return (f"libtodre CPU path {arch}, its OpenBLAS core {ours}; NumPy's OpenBLAS core "
            f"{numpy_blas_core() or '?'}" + (f"; {env}" if env else ""))


def numpy_blas_threads(n):
    """Set the thread count of the BLAS inside NumPy (its bundled OpenBLAS)
    without extra packages; returns False when it cannot."""
    fn = numpy_blas_fn("set_num_threads")
    if fn is None:
        return False
    fn(int(n))
    return True


def make_data(n, d, data="clustered"):
    """(embeddings n x d float32, CLS values n float32), seed 1234: 'gaussian'
    i.i.d., or 'clustered': tokens around a few dozen centres with a shared
    offset, closer to projector outputs than white noise."""
    rng = np.random.default_rng(1234)
    if data == "gaussian":
        V32 = rng.standard_normal((n, d), dtype=np.float32)
    else:
        centres = rng.standard_normal((48, d)).astype(np.float32)
        V32 = (centres[rng.integers(0, 48, n)] + 0.6 * rng.standard_normal((n, d), np.float32)
               + 0.8 * rng.standard_normal(d).astype(np.float32))
    return V32, rng.random(n).astype(np.float32)


SETTLE_S = 0.3


def timed(fn, reps, settle=None):
    """(median, min, last result) of `reps` timed calls of fn, after a pause
    and one untimed call. Both sides get the same treatment: the pause lets
    the other side's idle threads stop spinning (OpenBLAS's workers, NumPy's
    included, spin about 2^28 cycles, ~0.1 s, after each call, on the cores
    the next side needs; libtodre timed right after NumPy ran 2x slower in
    its first call and 1.2-1.5x in the next two), and the untimed call
    brings each side's own data back into the caches the other evicted."""
    time.sleep(SETTLE_S if settle is None else settle)
    res = fn()
    ts = []
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
    ap.add_argument("--dtypes", nargs="+", default=["f16", "f32"],
                    choices=["f16", "f32", "bf16"], help="bf16 needs PyTorch")
    ap.add_argument("--strategy", default="auto", choices=list(STRATEGIES))
    ap.add_argument("--data", default="clustered", choices=["clustered", "gaussian"])
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help="seconds of pause before each side's untimed call and timed reps")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for both sides (0 = all; NumPy via its OpenBLAS)")
    args = ap.parse_args()

    td = Todre(args.lib, args.strategy, args.threads)
    if args.threads and not numpy_blas_threads(args.threads):
        print("note: could not set NumPy's BLAS thread count")
    n, d = args.n, args.d
    V32, cls = make_data(n, d, args.data)

    print(f"machine: {describe_machine()}; libtodre {td.todre.version()} "
          f"({td.todre.library_path})")
    print(f"setup: {describe_setup(td.todre)}")
    print(f"n = {n}, d = {d}, data = {args.data}, reps = {args.reps}, strategy = {args.strategy}, "
          f"threads = {args.threads or os.cpu_count()}, medians (min) in ms")
    hdr = f"{'dtype':>5} {'k':>5} | {'numpy':>15} | {'libtodre':>15} | {'speed-up':>8} | selection"
    print(hdr)
    print("-" * len(hdr))
    for dt in args.dtypes:
        V = V32.astype(np.float16) if dt == "f16" else V32
        Vin = V
        if dt == "bf16":
            import torch
            Vin = torch.from_numpy(V32).to(torch.bfloat16)
            V = Vin.float().numpy()   # NumPy (and the check) see the rounded values
        for k in args.k:
            t_np, m_np, ref = timed(lambda: numpy_alg1(V, cls, k), args.reps, args.settle)
            t_td, m_td, (sel, _) = timed(lambda: td.select(Vin, k, cls, pivot="cls"), args.reps,
                                         args.settle)
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
