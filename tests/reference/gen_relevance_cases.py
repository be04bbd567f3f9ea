#!/usr/bin/env python3
"""Write the stage-2 fixtures: inputs as .npy plus float64 reference ratios
(relevance_ref.py, written from the paper's formula).

Layout of --out DIR (default $TODRE_TEST_DATA/relevance):
    cases.txt            one case per line, `key=value` fields (see CASE_KEYS)
    <name>_types.npy     '|u1' [B, K]
    <name>_q.npy         [B, H, Q, dh]; '<f4', '<f2', or '<u2' (bf16 bits)
    <name>_k.npy         [B, H_kv, K, dh], same dtype
    <name>_attn.npy      [B, H, Q, K] causal probabilities (float64 softmax of
                         the stored q, k, then rounded to the case dtype);
                         absent for the long cases
    <name>_ref.npy       '<f8' [B, 4]: alpha_t2v, alpha_v2t from the stored
                         attn (probability path), then from the stored q, k
                         (fused path); the reference sees the exact values
                         the C library gets.
A stamp file makes re-runs free when nothing changed.
"""
import argparse
import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import relevance_ref as ref  # noqa: E402

S, V, T = ref.SYSTEM, ref.VISUAL, ref.TEXT
CASE_KEYS = ("name", "dtype", "B", "H", "H_kv", "Q", "K", "dh", "scale", "probs")


def to_bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def store(a, dtype):
    """(array as written to .npy, its exact float64 values)."""
    if dtype == "f32":
        s = np.asarray(a, dtype=np.float32)
        return s, s.astype(np.float64)
    if dtype == "f16":
        s = np.asarray(a, dtype=np.float16)
        return s, s.astype(np.float64)
    s = to_bf16_bits(a)
    return s, (s.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def runs(*parts):
    """Types from (type, count) pairs, e.g. runs((S, 4), (V, 10), (T, 3))."""
    return np.concatenate([np.full(n, t, dtype=np.uint8) for t, n in parts])


# name, dtype, H, H_kv, Q, dh, logit gain, per-sequence types ([K] each),
# scale (None = 1/sqrt(dh)), whether to write probabilities.
def case_list():
    rng = np.random.default_rng(20251122)
    rand96 = rng.integers(0, 3, 96).astype(np.uint8)
    multi = runs((S, 5), (V, 30), (T, 6), (V, 30), (T, 6))
    return [
        ("std_f32", "f32", 4, 4, 96, 32, 1.0, [runs((S, 6), (V, 70), (T, 20))], None, True),
        ("textfirst_gqa_f32", "f32", 8, 2, 130, 64, 1.0,
         [runs((S, 4), (T, 10), (V, 80), (T, 36))], None, True),
        ("chunk_f32", "f32", 4, 1, 40, 16, 1.0, [rng.integers(0, 3, 200).astype(np.uint8)], None, True),
        ("chunk_std_f32", "f32", 4, 2, 25, 32, 1.0, [runs((S, 10), (V, 150), (T, 40))], 0.3, True),
        ("random_types_f32", "f32", 2, 2, 96, 8, 1.0, [rand96], None, True),
        ("multi_image_f16", "f16", 4, 2, 77, 48, 1.0, [multi], None, True),
        ("multi_image_bf16", "bf16", 4, 2, 77, 48, 1.0, [multi], None, True),
        ("peaky_f32", "f32", 4, 4, 300, 128, 4.0, [runs((S, 20), (T, 30), (V, 200), (T, 50))],
         None, True),
        ("dh1_f32", "f32", 3, 1, 33, 1, 3.0, [runs((T, 3), (V, 20), (S, 2), (T, 8))], 1.0, True),
        ("batch_f32", "f32", 4, 2, 64, 16, 1.0, [
            runs((S, 4), (V, 40), (T, 20)),    # usual layout: v2t = 0
            runs((S, 2), (T, 12), (V, 40), (T, 10)),
            runs((S, 10), (V, 54)),            # no text: both ratios 0
            runs((S, 20), (T, 44)),            # no visual: both ratios 0
        ], None, True),
        ("batch_chunk_bf16", "bf16", 4, 4, 24, 32, 1.0, [
            runs((S, 3), (V, 50), (T, 27)),
            runs((T, 15), (V, 50), (T, 15)),
        ], None, True),
        ("batch_chunk_f16", "f16", 6, 3, 50, 40, 1.0, [
            runs((S, 3), (V, 50), (T, 27)),
            runs((T, 15), (V, 50), (T, 15)),
        ], 0.2, True),
    ]


def long_cases():
    """K = 8192 for the fused path only (probabilities would take H*Q*K*4
    bytes). Text before the image makes ~8000 visual rows need a softmax."""
    return [
        ("long_textfirst_f32", "f32", 2, 1, 8192, 64, 1.0,
         [runs((S, 16), (T, 48), (V, 8000), (T, 128))], None, False),
        ("long_std_bf16", "bf16", 8, 2, 8192, 64, 1.0,
         [runs((S, 32), (V, 8000), (T, 160))], None, False),
    ]


def build(case, rng):
    name, dtype, H, Hkv, Q, dh, gain, types, scale, probs = case
    B, K = len(types), len(types[0])
    scale = 1.0 / np.sqrt(dh) if scale is None else scale
    q = rng.standard_normal((B, H, Q, dh)) * gain
    k = rng.standard_normal((B, Hkv, K, dh)) * gain
    qs, q64 = store(q, dtype)
    ks, k64 = store(k, dtype)
    out = {"types": np.stack(types).astype(np.uint8), "q": qs, "k": ks}
    refs = np.zeros((B, 4))
    attn = []
    for b in range(B):
        refs[b, 2:] = ref.ratios_from_qk(q64[b], k64[b], types[b], scale)
        if probs:
            a_s, a64 = store(ref.causal_probs(q64[b], k64[b], scale), dtype)
            attn.append(a_s)
            refs[b, :2] = ref.ratios_from_probs(a64, types[b])
    if probs:
        out["attn"] = np.stack(attn)
    out["ref"] = refs
    meta = dict(name=name, dtype=dtype, B=B, H=H, H_kv=Hkv, Q=Q, K=K, dh=dh,
                scale=repr(float(scale)), probs=int(probs))
    return meta, out


def self_check():
    """The reference on uniform causal attention (q = 0), where the ratios
    have a closed form: a text query at position p sees (#visual <= p) of
    its p + 1 keys."""
    types = runs((S, 3), (T, 4), (V, 9), (T, 5))
    K = len(types)
    q = np.zeros((2, K, 4))
    k = np.random.default_rng(0).standard_normal((1, K, 4))
    t2v, v2t = ref.ratios_from_qk(q, k, types, 0.5)
    nv = np.cumsum(types == V)
    nt = np.cumsum(types == T)
    pos = np.arange(K)
    want_t2v = np.mean((nv / (pos + 1))[types == T])
    want_v2t = np.mean((nt / (pos + 1))[types == V])
    assert abs(t2v - want_t2v) < 1e-12 and abs(v2t - want_v2t) < 1e-12, (t2v, want_t2v, v2t, want_v2t)
    a = ref.causal_probs(q, k, 0.5)
    assert ref.ratios_from_probs(a, types) == (t2v, v2t) or \
        np.allclose(ref.ratios_from_probs(a, types), (t2v, v2t), rtol=1e-12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("TODRE_TEST_DATA", "."), "relevance"))
    ap.add_argument("--no-long", action="store_true", help="skip the K = 8192 cases")
    args = ap.parse_args()
    self_check()
    cases = case_list() + ([] if args.no_long else long_cases())
    with open(__file__, "rb") as f:
        digest = hashlib.sha256(f.read())
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "relevance_ref.py"), "rb") as f:
        digest.update(f.read())
    digest.update(repr([c[0] for c in cases]).encode())
    stamp = os.path.join(args.out, "stamp")
    if os.path.exists(stamp) and open(stamp).read() == digest.hexdigest():
        return 0
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(7)
    lines = []
    for case in cases:
        meta, arrays = build(case, rng)
        for key, arr in arrays.items():
            np.save(os.path.join(args.out, f"{meta['name']}_{key}.npy"), np.ascontiguousarray(arr))
        lines.append(" ".join(f"{k}={meta[k]}" for k in CASE_KEYS))
    with open(os.path.join(args.out, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(stamp, "w") as f:
        f.write(digest.hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
