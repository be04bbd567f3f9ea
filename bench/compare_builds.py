#!/usr/bin/env python3
"""Two libtodre builds timed side by side in one run, on the same inputs:
stage 1 at every CPU instruction-set level this machine has
(TODRE_CPU_ISA), each dtype, with the NumPy implementation of the paper's
Algorithm 1 (bench/bench_select.py) timed beside each, and a long video.

    python3 bench/compare_builds.py BEFORE/libtodre.so.1 AFTER/libtodre.so.1
        [--rounds 3] [--reps 5] [--threads 2] [--levels generic avx2 avx512]
        [--video-n 18000] [--no-video]

Each (level, dtype, k) runs in `rounds` rounds; a round times BEFORE then
AFTER (alternating which goes first), each in a fresh process that times
NumPy and libtodre on the same input (medians of `reps` calls, after a
pause and an untimed call: bench_select.timed). Printed per row: the
medians over rounds of each build's time, AFTER / BEFORE (1.00 = the same
speed; the spread of the rounds shows the noise), and each build's speed-up
over NumPy. Selections are compared too: both builds must keep the same
tokens.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LEVELS = ("generic", "avx2", "avx512", "amx")


def worker(args):
    sys.path.insert(0, HERE)
    import numpy as np
    from bench_select import Todre, make_data, numpy_alg1, timed

    td = Todre(args.lib, "auto", args.threads)
    V32, cls = make_data(args.n, args.d)
    if args.dtype == "bf16":
        import torch
        V = torch.from_numpy(V32).to(torch.bfloat16)
        Vnp = V.float().numpy()
    else:
        V = V32.astype(np.float16) if args.dtype == "f16" else V32
        Vnp = V
    out = {"level": td.todre.devices("cpu")[0].arch}
    t_td, _, (order, _) = timed(lambda: td.select(V, args.k, cls), args.reps)
    out["todre"] = t_td
    out["selection"] = [int(i) for i in order]
    if not args.no_numpy:
        t_np, _, _ = timed(lambda: numpy_alg1(Vnp, cls, args.k), args.reps)
        out["numpy"] = t_np
    td.close()
    print(json.dumps(out))


def run_one(lib, level, dtype, n, d, k, reps, threads, no_numpy):
    env = dict(os.environ, TODRE_CPU_ISA=level, OMP_WAIT_POLICY="passive")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--lib", lib,
           "--dtype", dtype, "--n", str(n), "--d", str(d), "--k", str(k),
           "--reps", str(reps), "--threads", str(threads)] + (["--no-numpy"] if no_numpy else [])
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"compare_builds: {lib} {level} {dtype}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def levels_of(lib):
    have = []
    for lv in LEVELS:
        r = run_one(lib, lv, "f32", 64, 32, 4, 1, 1, True)
        if r["level"] == lv:
            have.append(lv)
    return have


def compare(label, before, after, level, dtype, n, d, k, a, numpy=True):
    tb, ta, nb, na, same = [], [], [], [], True
    for r in range(a.rounds):
        order = [(before, tb, nb), (after, ta, na)]
        if r % 2:
            order.reverse()
        sels = {}
        for lib, times, nps in order:
            res = run_one(lib, level, dtype, n, d, k, a.reps, a.threads, not numpy)
            times.append(res["todre"])
            if "numpy" in res:
                nps.append(res["numpy"])
            sels[lib] = res["selection"]
        same = same and sels[before] == sels[after]
    mb, ma = statistics.median(tb), statistics.median(ta)
    ratios = sorted(x / y for x, y in zip(ta, tb))
    sp = lambda nps, t: f"{statistics.median(nps) / t:6.2f}x" if nps else "     -"
    print(f"{label:12s} {dtype:5s} {k:6d} | {mb * 1e3:9.1f} {ma * 1e3:9.1f} | "
          f"{ma / mb:5.3f} [{ratios[0]:.3f}, {ratios[-1]:.3f}] | {sp(nb, mb)} {sp(na, ma)} | "
          f"{'same' if same else 'DIFFERENT'}", flush=True)
    return same


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", nargs="?")
    ap.add_argument("after", nargs="?")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="f16", help=argparse.SUPPRESS)
    ap.add_argument("--no-numpy", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=2880)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--k", type=int, nargs="+", default=[288])
    ap.add_argument("--dtypes", nargs="+", default=["f16", "bf16", "f32"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", nargs="+")
    ap.add_argument("--video-n", type=int, default=18000)
    ap.add_argument("--video-k", type=int, default=1800)
    ap.add_argument("--no-video", action="store_true")
    a = ap.parse_args()
    if a.worker:
        a.k = a.k[0]
        worker(a)
        return 0
    if not (a.before and a.after and os.path.isfile(a.before) and os.path.isfile(a.after)):
        print("usage: compare_builds.py BEFORE_LIB AFTER_LIB [options]", file=sys.stderr)
        return 2
    before, after = os.path.abspath(a.before), os.path.abspath(a.after)
    sys.path.insert(0, HERE)
    from bench_select import describe_machine
    levels = a.levels or levels_of(before)
    print(f"machine: {describe_machine()}")
    print(f"before: {before}\nafter:  {after}")
    print(f"n = {a.n}, d = {a.d}, threads = {a.threads}, {a.rounds} rounds of {a.reps} reps; "
          f"times are medians over rounds (ms); after/before with the rounds' range; "
          f"speed-up over NumPy of before, after")
    print(f"{'level':12s} {'dtype':5s} {'k':>6s} | {'before':>9s} {'after':>9s} | "
          f"after/before [range]  | numpy/b numpy/a | tokens")
    ok = True
    for level in levels:
        for dt in a.dtypes:
            for k in a.k:
                ok &= compare(level, before, after, level, dt, a.n, a.d, k, a)
    if not a.no_video:
        for level in levels:
            if level == "generic":
                continue   # minutes a call at n = 18000 on the portable kernels
            ok &= compare(f"video/{level}", before, after, level, "f16", a.video_n, a.d,
                          a.video_k, a, numpy=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
