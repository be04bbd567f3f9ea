#!/usr/bin/env python3
"""Write the stage-1 fixtures: inputs as .npy plus the float64 reference
selection (todre_ref.select) and its per-step margins.

Layout of --out DIR:
    cases.txt              one case per line, `key=value` fields (see CASE_KEYS)
    <name>_emb.npy         embeddings [n, d]: '<f4', '<f2', or '<u2' (bf16 bits)
    <name>_cls.npy         CLS map [n] or [frames, t] (only when cls != none)
    <name>_order.npy       '<i8' [k]: reference selection order (first = pivot)
    <name>_margin.npy      '<f8' [k]: gap between best and second-best score
                           at each step of that order (inf = no competitor)
The C test (tests/reference/test_select_reference.c) compares indices exactly where
the margins exceed its rounding tolerance and checks trajectory validity
elsewhere. A stamp file makes re-runs free when nothing changed.
"""
import argparse
import hashlib
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import todre_ref as ref  # noqa: E402

OBJ = {"max-sum": 0, "max-min": 1, "cls-topk": 2}
PIV = {"auto": 0, "cls": 1, "center": 2, "farthest": 3, "random": 4, "isolated": 5}
CASE_KEYS = ("name", "n", "d", "dtype", "cls", "cls_dtype", "frames", "objective",
             "pivot", "lo", "hi", "seed", "keep", "ratio", "k", "pad", "exact")


# --------------------------------------------------------------------------
# dtype helpers: the reference always sees the exact values the C library gets
# --------------------------------------------------------------------------

def to_bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f64(b):
    return (np.asarray(b, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)


def store(a, dtype):
    """(array as written to .npy, its exact float64 values)."""
    if dtype == "f32":
        s = np.asarray(a, dtype=np.float32)
        return s, s.astype(np.float64)
    if dtype == "f16":
        s = np.asarray(a, dtype=np.float16)
        return s, s.astype(np.float64)
    if dtype == "bf16":
        s = to_bf16_bits(a)
        return s, bf16_bits_to_f64(s)
    raise ValueError(dtype)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def gaussian(rng, n, d):
    return rng.standard_normal((n, d))


def clustered(rng, n, d, clusters, spread):
    centers = rng.standard_normal((clusters, d))
    labels = rng.integers(0, clusters, n)
    return centers[labels] + spread * rng.standard_normal((n, d))


def low_rank(rng, n, d, rank, noise):
    """Embedding-like rows: a shared mean, a low-rank part and noise."""
    mean = rng.standard_normal(d)
    basis = rng.standard_normal((rank, d))
    return mean + rng.standard_normal((n, rank)) @ basis + noise * rng.standard_normal((n, d))


def with_duplicates(rng, distinct, copies, d):
    base = rng.standard_normal((distinct, d))
    rows = np.repeat(base, copies, axis=0)
    return rows[rng.permutation(len(rows))]


def pow2(rng, n):
    return 2.0 ** rng.integers(-2, 4, n)


def scaled_basis(rng, n, d):
    """Rows c * e_j with c a power of two: every normalised row, similarity,
    score and pivot score is exact in any floating-point arithmetic (also
    e * (1/||e||)), so all ties are exact and must go to the lowest index."""
    E = np.zeros((n, d))
    E[np.arange(n), rng.integers(0, d, n)] = pow2(rng, n)
    return E


def signs_1d(rng, n):
    """d = 1: normalised rows are exactly -1, 0 or +1 (exact ties, as above)."""
    return (rng.integers(-1, 2, n) * pow2(rng, n))[:, None]


def cls_map(rng, n, ties=False):
    a = rng.random(n)
    if ties:  # few distinct values: exact ties, exactly representable in f16
        return np.floor(a * 8) / 8
    return a / a.sum()


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

def case(name, E, dtype="f32", cls=None, cls_dtype="f32", frames=0, objective="max-sum",
         pivot="auto", lo=0, hi=-1, seed=0, keep=0, ratio=0.10, pad=0, exact=0):
    """exact=1: every score is exact in any arithmetic, so the library must
    reproduce the reference order exactly, ties included."""
    return dict(name=name, E=E, dtype=dtype, cls=cls, cls_dtype=cls_dtype, frames=frames,
                objective=objective, pivot=pivot, lo=lo, hi=hi, seed=seed, keep=keep,
                ratio=ratio, pad=pad, exact=exact)


def all_cases():
    """Every case, in a fixed order (one RNG stream: reordering changes data)."""
    rng = np.random.default_rng(20260522)
    out = []
    mixed, mixed_cls = _mode_cases(rng, out)
    _structured_cases(rng, out)
    _dtype_and_size_cases(rng, out)
    _pivot_range_cases(mixed, mixed_cls, out)
    _video_and_large_cases(rng, out)
    return out


def _mode_cases(rng, out):
    """Every objective x pivot mode on one clustered set with a CLS map."""
    out.append(case("basic_center", gaussian(rng, 64, 32), keep=8))
    out.append(case("basic_strided", gaussian(rng, 64, 32), keep=8, pad=5))

    mixed = clustered(rng, 300, 48, 12, 0.6)
    mixed_cls = cls_map(rng, 300)
    for obj in ("max-sum", "max-min"):
        for piv in PIV:
            out.append(case("modes_%s_%s" % (obj.replace("-", ""), piv), mixed,
                            cls=mixed_cls, objective=obj, pivot=piv, seed=7, keep=40))
    out.append(case("maxsum_auto_nocls", mixed, keep=40))
    out.append(case("maxmin_auto_nocls", mixed, objective="max-min", keep=40))
    out.append(case("topk_ties", mixed, cls=cls_map(rng, 300, ties=True),
                    objective="cls-topk", pivot="random", lo=5, hi=9, keep=30))
    out.append(case("topk_ties_f16cls", mixed, cls=cls_map(rng, 300, ties=True),
                    cls_dtype="f16", objective="cls-topk", keep=100))
    return mixed, mixed_cls


def _structured_cases(rng, out):
    """Tight clusters, duplicate rows, exact ties, d = 1, zero rows."""
    out.append(case("clusters_tight", clustered(rng, 400, 64, 10, 0.05), keep=60))
    out.append(case("duplicates", with_duplicates(rng, 40, 3, 16), keep=60))
    out.append(case("duplicates_maxmin", with_duplicates(rng, 40, 3, 16),
                    objective="max-min", keep=60))
    ties = scaled_basis(rng, 64, 8)
    out.append(case("ties_basis", ties, keep=30, exact=1))
    out.append(case("ties_basis_f16", ties, dtype="f16", keep=64, exact=1))
    out.append(case("ties_basis_maxmin", ties, objective="max-min", keep=20, exact=1))
    out.append(case("ties_basis_farthest", ties, pivot="farthest", keep=20, exact=1))
    out.append(case("d1_signs", signs_1d(rng, 50), keep=50, exact=1))
    out.append(case("d1_signs_maxmin", signs_1d(rng, 50), objective="max-min", keep=5, exact=1))

    zr = gaussian(rng, 100, 32)
    zr[rng.choice(100, 10, replace=False)] = 0.0
    out.append(case("zero_rows", zr, keep=50))
    out.append(case("zero_rows_maxmin", zr, objective="max-min", keep=50))
    out.append(case("all_zero", np.zeros((10, 4)), keep=10, exact=1))
    out.append(case("all_zero_center_range", np.zeros((10, 4)), lo=3, hi=7, keep=4, exact=1))


def _dtype_and_size_cases(rng, out):
    """f16/bf16 rows and CLS maps, padded rows, n = 1, k = n, d = 4096."""
    cl = clustered(rng, 500, 128, 16, 0.4)
    cl_cls = cls_map(rng, 500)
    out.append(case("f16_cls", cl, dtype="f16", cls=cl_cls, cls_dtype="f16", keep=50))
    out.append(case("bf16_cls", cl, dtype="bf16", cls=cl_cls, cls_dtype="bf16", keep=50))
    out.append(case("f16_strided", cl, dtype="f16", keep=50, pad=3))
    out.append(case("bf16_center", cl, dtype="bf16", pivot="center", keep=50, pad=1))

    one = gaussian(rng, 1, 16)
    out.append(case("n1_maxsum", one, keep=1))
    out.append(case("n1_maxmin", one, objective="max-min", keep=1))
    out.append(case("n1_topk", one, cls=np.array([0.5]), objective="cls-topk", keep=1))
    out.append(case("n1_ratio", one, ratio=0.10))
    kn = clustered(rng, 100, 24, 5, 0.5)
    out.append(case("k_eq_n_maxsum", kn, keep=100))
    out.append(case("k_eq_n_maxmin", kn, objective="max-min", keep=100))
    out.append(case("wide_d4096", gaussian(rng, 40, 4096), keep=10))


def _pivot_range_cases(mixed, mixed_cls, out):
    """RANDOM pivots from several seeds (splitmix64) and pivot sub-ranges."""
    for i, seed in enumerate((0, 1, -1, 4611686018427400000, -(2 ** 63), 2 ** 63 - 1)):
        out.append(case("random_seed%d" % i, mixed, pivot="random", lo=17, hi=190,
                        seed=seed, keep=20))
    out.append(case("center_range", mixed, pivot="center", lo=100, hi=200, keep=20))
    out.append(case("farthest_range", mixed, pivot="farthest", lo=100, hi=200, keep=20))
    out.append(case("isolated_range", mixed, pivot="isolated", lo=250, hi=-1, keep=20))
    out.append(case("cls_range", mixed, cls=mixed_cls, pivot="cls", lo=30, hi=60, keep=20))


def _video_and_large_cases(rng, out):
    """Video [frames, tokens] CLS maps, n = 3001, LLaVA-NeXT AnyRes."""
    frames, t = 8, 144
    video = clustered(rng, frames * t, 256, 20, 0.5)
    vcls = rng.random((frames, t))
    out.append(case("video_cls", video, dtype="f16", cls=vcls, frames=frames, ratio=0.25))
    out.append(case("video_topk", video, cls=vcls, frames=frames, objective="cls-topk",
                    ratio=0.10))

    big = clustered(rng, 3001, 64, 40, 0.7)
    out.append(case("n3001_k_eq_n", big, keep=3001))
    out.append(case("n3001_maxmin", big, objective="max-min", keep=300))

    # LLaVA-NeXT AnyRes: 576 thumbnail tokens first, then 2304 crop tokens; the
    # CLS pivot is restricted to the thumbnail while the CLS peak lies in a crop.
    anyres = low_rank(rng, 2880, 4096, 32, 0.5)
    acls = cls_map(rng, 2880)
    acls[1500] = 1.0
    out.append(case("anyres_llava", anyres, dtype="f16", cls=acls, pivot="cls",
                    lo=0, hi=576, ratio=0.10))


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def reference(c, E64, cls64):
    n = E64.shape[0]
    k = ref.keep_count(n, keep=c["keep"] or None, ratio=c["ratio"])
    hi = None if c["hi"] == -1 else c["hi"]
    order = ref.select(E64, k, cls=cls64, objective=c["objective"], pivot=c["pivot"],
                       pivot_range=(c["lo"], hi), seed=c["seed"])
    # Validate the reference against its own float64 oracle (a tiny tol only
    # absorbs gemm-vs-gemv rounding of float64 on exact ties).
    check = ref.check_trajectory(E64, order, cls=cls64, objective=c["objective"],
                                 pivot=c["pivot"], pivot_range=(c["lo"], hi),
                                 seed=c["seed"], tol=1e-12)
    if not check.valid:
        raise RuntimeError("%s: reference fails its own check: %s" % (c["name"], check.reason))
    return k, np.array(order, dtype=np.int64), np.array(check.margins, dtype=np.float64)


def write_case(outdir, c):
    emb, E64 = store(c["E"], c["dtype"])
    cls64 = None
    if c["cls"] is not None:
        cls_arr, cls64 = store(c["cls"], c["cls_dtype"])
        if c["frames"]:
            cls_arr = cls_arr.reshape(c["frames"], -1)
            cls64 = cls64.reshape(c["frames"], -1)
        np.save(os.path.join(outdir, c["name"] + "_cls.npy"), cls_arr)
    k, order, margins = reference(c, E64, cls64)
    np.save(os.path.join(outdir, c["name"] + "_emb.npy"), emb)
    np.save(os.path.join(outdir, c["name"] + "_order.npy"), order)
    np.save(os.path.join(outdir, c["name"] + "_margin.npy"), margins)
    fields = dict(name=c["name"], n=E64.shape[0], d=E64.shape[1], dtype=c["dtype"],
                  cls="none" if c["cls"] is None else ("video" if c["frames"] else "flat"),
                  cls_dtype=c["cls_dtype"], frames=c["frames"],
                  objective=OBJ[c["objective"]], pivot=PIV[c["pivot"]], lo=c["lo"],
                  hi=c["hi"], seed=c["seed"], keep=c["keep"], ratio=repr(float(c["ratio"])),
                  k=k, pad=c["pad"], exact=c["exact"])
    return " ".join("%s=%s" % (key, fields[key]) for key in CASE_KEYS)


def source_stamp():
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for f in ("gen_select_cases.py", "todre_ref.py"):
        with open(os.path.join(here, f), "rb") as fh:
            h.update(fh.read())
    h.update(np.__version__.encode())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    stamp_path = os.path.join(args.out, "stamp.txt")
    stamp = source_stamp()
    if os.path.exists(stamp_path) and open(stamp_path).read().strip() == stamp:
        print("select fixtures up to date in", args.out)
        return 0
    if os.path.exists(stamp_path):
        os.remove(stamp_path)  # an interrupted run must not look up to date
    lines = [write_case(args.out, c) for c in all_cases()]
    with open(os.path.join(args.out, "cases.txt"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(stamp_path, "w") as fh:
        fh.write(stamp + "\n")
    print("wrote %d select cases to %s" % (len(lines), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
