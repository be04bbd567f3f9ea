#!/usr/bin/env python3
"""Stage-2 benchmark driver: runs bench_relevance (C, one process per shape)
at LLaVA-NeXT-7B shapes and prints a Markdown table of the two relevance
paths next to one attention layer computed with OpenBLAS on the same machine.

    python3 bench/bench_relevance.py --build build [--reps 9] [--json out.json]

Shapes: 32 heads, dh 128, full prefill; K = 600 (35 system + 525 visual +
40 text: after stage 1) and K = 2955 (35 + 2880 + 40: no stage 1); the
usual [system | visual | text] layout, plus a text-before-image layout where
visual queries also need a softmax (the fused path's worst case).
"""
import argparse
import json
import os
import platform
import subprocess
import sys

SHAPES = [
    # K, n_text, n_system, H, H_kv, dh, dtype, layout
    (600, 40, 35, 32, 32, 128, "f16", "std"),
    (600, 40, 35, 32, 32, 128, "f32", "std"),
    (600, 40, 35, 32, 32, 128, "f16", "textfirst"),
    (2955, 40, 35, 32, 32, 128, "f16", "std"),
    (2955, 40, 35, 32, 32, 128, "f32", "std"),
    (2955, 40, 35, 32, 8, 128, "f16", "std"),
]


def machine():
    info = {"python": platform.python_version(), "system": platform.platform()}
    try:
        with open("/proc/cpuinfo") as f:
            names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
        info["cpu"] = names[0] if names else platform.processor()
        info["logical_cpus"] = len(names)
    except OSError:
        info["cpu"] = platform.processor()
    info["online_cpus"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
        info["loadavg_before"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libopenblas0-pthread"],
                             capture_output=True, text=True, check=False)
        info["openblas"] = out.stdout.strip() or "unknown"
    except OSError:
        info["openblas"] = "unknown"
    return info


def run_shape(exe, shape, reps, threads):
    K, nt, ns, H, Hkv, dh, dtype, layout = shape
    cmd = [exe, str(K), str(nt), str(ns), str(H), str(Hkv), str(dh), dtype, str(reps), layout,
           str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["what"]: r for r in rows}


def mib(n):
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def table(results):
    lines = [
        "| K | H / H_kv | dtype | layout | attention layer (ms) | probs path (ms) | probs / attn "
        "| fused q/k path (ms) | fused / attn | probs input | probs workspace | fused input "
        "| fused workspace | alpha_t2v (probs / fused) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, r in results:
        K, _, _, H, Hkv, _, dtype, layout = shape
        a, p, q = r["attn"], r["probs"], r["qk"]
        lines.append(
            f"| {K} | {H} / {Hkv} | {dtype} | {layout} | {a['median_ms']:.1f} "
            f"| {p['median_ms']:.2f} | {p['median_ms'] / a['median_ms']:.3f} "
            f"| {q['median_ms']:.2f} | {q['median_ms'] / a['median_ms']:.3f} "
            f"| {mib(p['input_bytes'])} | {mib(p['workspace_bytes'])} "
            f"| {mib(q['input_bytes'])} | {mib(q['workspace_bytes'])} "
            f"| {p['alpha_t2v']:.5f} / {q['alpha_t2v']:.5f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="CMake build directory")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--quick", action="store_true", help="only the first shape, 3 reps")
    args = ap.parse_args()
    exe = os.path.join(args.build, "bench", "bench_relevance")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe}: not built (cmake --build {args.build} --target bench_relevance)")
    shapes = SHAPES[:1] if args.quick else SHAPES
    reps = 3 if args.quick else args.reps
    info = machine()
    results = [(s, run_shape(exe, s, reps, args.threads)) for s in shapes]
    try:
        info["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    print("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    threads = results[0][1]["attn"]["threads"]
    print(f"Medians of {reps} timed calls after one warm-up call, {threads} thread(s).\n")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "reps": reps,
                       "results": [{"shape": s, **r} for s, r in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
