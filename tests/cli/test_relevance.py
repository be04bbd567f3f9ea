"""`todre relevance` against a float64 computation of the paper's formula,
written here from docs/semantics.md (stage 2):

  alpha_t2v = sum_{h, i in TEXT, j in VISUAL} A / sum_{h, i in TEXT, all j} A
  alpha_v2t = sum_{h, i in VISUAL, j in TEXT} A / sum_{h, i in VISUAL, all j} A

(0 when a denominator is 0), queries being the last Q of the K positions;
drop iff both ratios < tau. The fused form uses A = causal softmax(scale q.k)
with query head h reading key head h // (H / H_kv).
"""
import json

import numpy as np
import pytest

SYSTEM, VISUAL, TEXT = 0, 1, 2


def layout(*parts):
    """types from (type, count) pairs, e.g. layout((0, 3), (1, 10), (2, 4))."""
    return np.concatenate([np.full(c, t, dtype=np.int64) for t, c in parts])


def formula(A, types):
    A = np.asarray(A, dtype=np.float64)
    if A.ndim == 2:
        A = A[None]
    K = A.shape[2]
    qtypes = types[K - A.shape[1]:]
    text_rows, vis_rows = A[:, qtypes == TEXT, :], A[:, qtypes == VISUAL, :]

    def ratio(num, den):
        return num / den if den != 0 else 0.0

    return (ratio(text_rows[:, :, types == VISUAL].sum(), text_rows.sum()),
            ratio(vis_rows[:, :, types == TEXT].sum(), vis_rows.sum()))


def causal_softmax(q, k, scale):
    """q [H, Q, dh], k [H_kv, K, dh] -> A [H, Q, K] in float64."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    H, Q, _ = q.shape
    K = k.shape[1]
    kk = np.repeat(k, H // k.shape[0], axis=0)
    logits = scale * np.einsum("hqd,hkd->hqk", q, kk)
    pos = np.arange(K - Q, K)[:, None]
    logits = np.where(np.arange(K)[None, :] <= pos, logits, -np.inf)
    e = np.exp(logits - logits.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def random_probs(rng, H, types, Q=None, sharp=2.0, visual_boost=0.0):
    """Causal attention probabilities [H, Q, K] from random logits."""
    K = len(types)
    Q = K if Q is None else Q
    logits = sharp * rng.standard_normal((H, Q, K)) + visual_boost * (types == VISUAL)
    pos = np.arange(K - Q, K)[:, None]
    logits = np.where(np.arange(K)[None, :] <= pos, logits, -np.inf)
    e = np.exp(logits - logits.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def run(cli, *args):
    return json.loads(cli("relevance", *args, "--json").ok())


def check(out, expected, tol):
    assert out["alpha_t2v"] == pytest.approx(expected[0], abs=tol)
    assert out["alpha_v2t"] == pytest.approx(expected[1], abs=tol)
    tau = out["tau"]
    assert out["drop"] == (expected[0] < tau and expected[1] < tau)


LAYOUTS = {
    "llava": layout((SYSTEM, 6), (VISUAL, 48), (TEXT, 10)),
    "question_first": layout((SYSTEM, 4), (TEXT, 9), (VISUAL, 30), (TEXT, 7)),
    "two_images": layout((SYSTEM, 3), (VISUAL, 20), (TEXT, 5), (VISUAL, 20), (TEXT, 6)),
    "no_text": layout((SYSTEM, 3), (VISUAL, 20)),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float16, 2e-3)])
def test_probabilities_match_formula(cli, npy, name, dtype, tol):
    types = LAYOUTS[name]
    A = random_probs(np.random.default_rng(1), 4, types).astype(dtype)
    out = run(cli, "--attn", npy("a", A), "--types", npy("t", types))
    check(out, formula(A, types), tol)
    if name == "question_first":
        assert out["alpha_v2t"] > 0  # text before the image is visible to visual queries
    if name == "llava":
        assert out["alpha_v2t"] == 0  # causal: no visual query sees a text key


def test_two_dimensional_attention_is_one_head(cli, npy):
    types = LAYOUTS["question_first"]
    A = random_probs(np.random.default_rng(2), 1, types).astype(np.float32)
    two_d = run(cli, "--attn", npy("a2", A[0]), "--types", npy("t", types))
    three_d = run(cli, "--attn", npy("a3", A), "--types", npy("t", types))
    assert two_d == three_d
    check(two_d, formula(A, types), 1e-6)


def test_last_rows_only(cli, npy):
    types = LAYOUTS["two_images"]
    A = random_probs(np.random.default_rng(3), 3, types, Q=15).astype(np.float32)
    assert A.shape == (3, 15, len(types))
    check(run(cli, "--attn", npy("a", A), "--types", npy("t", types)), formula(A, types), 1e-6)


@pytest.mark.parametrize("dtype", ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"])
def test_types_of_any_integer_dtype(cli, npy, dtype):
    types = LAYOUTS["question_first"]
    A = random_probs(np.random.default_rng(4), 2, types).astype(np.float32)
    out = run(cli, "--attn", npy("a", A), "--types", npy("t", types.astype(dtype)))
    check(out, formula(A, types), 1e-6)


def test_tau_decides_strictly_below(cli, npy):
    types = LAYOUTS["question_first"]
    A = random_probs(np.random.default_rng(5), 4, types).astype(np.float32)
    t2v, v2t = formula(A, types)
    top = max(t2v, v2t)
    assert top > 0.01
    pa, pt = npy("a", A), npy("t", types)
    above = run(cli, "--attn", pa, "--types", pt, "--tau", repr(float(top + 1e-4)))
    below = run(cli, "--attn", pa, "--types", pt, "--tau", repr(float(top - 1e-4)))
    assert above["drop"] is True and below["drop"] is False
    assert above["tau"] == pytest.approx(top + 1e-4)
    assert run(cli, "--attn", pa, "--types", pt, "--tau", "0")["drop"] is False
    assert run(cli, "--attn", pa, "--types", pt, "--tau", "1")["drop"] is True


def test_default_tau_and_plain_output(cli, npy):
    types = LAYOUTS["llava"]
    A = random_probs(np.random.default_rng(6), 2, types, visual_boost=-6).astype(np.float32)
    pa, pt = npy("a", A), npy("t", types)
    out = run(cli, "--attn", pa, "--types", pt)
    assert set(out) == {"alpha_t2v", "alpha_v2t", "drop", "tau"}
    assert out["tau"] == 0.1  # JSON numbers read back exactly
    t2v, v2t = formula(A, types)
    assert t2v < 0.1 and out["drop"] is True
    text = cli("relevance", "--attn", pa, "--types", pt).ok()
    fields = text.split()
    assert text.count("\n") == 1 and len(fields) == 3
    assert float(fields[0]) == pytest.approx(t2v, abs=1e-6)
    assert float(fields[1]) == pytest.approx(v2t, abs=1e-6)
    assert fields[2] == "1"


@pytest.mark.parametrize("H,H_kv", [(4, 4), (8, 2), (6, 1)])
@pytest.mark.parametrize("name", ["llava", "question_first"])
def test_fused_matches_causal_softmax(cli, npy, H, H_kv, name):
    types = LAYOUTS[name]
    K, dh = len(types), 16
    rng = np.random.default_rng(H * 10 + H_kv)
    q = rng.standard_normal((H, K, dh)).astype(np.float32)
    k = rng.standard_normal((H_kv, K, dh)).astype(np.float32)
    expected = formula(causal_softmax(q, k, 1 / np.sqrt(dh)), types)
    out = run(cli, "--q", npy("q", q), "--k", npy("k", k), "--types", npy("t", types))
    check(out, expected, 2e-5)


def test_fused_scale_last_rows_and_two_dimensional(cli, npy):
    types = LAYOUTS["two_images"]
    K, dh = len(types), 8
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 12, dh)).astype(np.float32)
    k = rng.standard_normal((1, K, dh)).astype(np.float32)
    pt = npy("t", types)
    out = run(cli, "--q", npy("q", q), "--k", npy("k", k), "--types", pt, "--scale", "0.7")
    check(out, formula(causal_softmax(q, k, 0.7), types), 2e-5)
    one = run(cli, "--q", npy("q1", q[0]), "--k", npy("k1", k[0]), "--types", pt)
    check(one, formula(causal_softmax(q[:1], k, 1 / np.sqrt(dh)), types), 2e-5)


def test_fused_float16(cli, npy):
    types = LAYOUTS["question_first"]
    K, dh = len(types), 32
    rng = np.random.default_rng(10)
    q = rng.standard_normal((4, K, dh)).astype(np.float16)
    k = rng.standard_normal((2, K, dh)).astype(np.float16)
    out = run(cli, "--q", npy("q", q), "--k", npy("k", k), "--types", npy("t", types))
    check(out, formula(causal_softmax(q, k, 1 / np.sqrt(dh)), types), 1e-4)


def test_fused_agrees_with_probabilities(cli, npy):
    types = LAYOUTS["two_images"]
    K, dh = len(types), 16
    rng = np.random.default_rng(11)
    q = rng.standard_normal((4, K, dh)).astype(np.float32)
    k = rng.standard_normal((2, K, dh)).astype(np.float32)
    pt = npy("t", types)
    fused = run(cli, "--q", npy("q", q), "--k", npy("k", k), "--types", pt)
    A = causal_softmax(q, k, 1 / np.sqrt(dh)).astype(np.float32)
    probs = run(cli, "--attn", npy("a", A), "--types", pt)
    assert fused["alpha_t2v"] == pytest.approx(probs["alpha_t2v"], abs=1e-5)
    assert fused["alpha_v2t"] == pytest.approx(probs["alpha_v2t"], abs=1e-5)


def test_backend_option(cli, npy):
    types = LAYOUTS["question_first"]
    A = random_probs(np.random.default_rng(12), 2, types).astype(np.float32)
    pa, pt = npy("a", A), npy("t", types)
    cpu = run(cli, "--attn", pa, "--types", pt, "--backend", "cpu")
    check(cpu, formula(A, types), 1e-6)
    auto = run(cli, "--attn", pa, "--types", pt)  # CUDA where it can run
    check(auto, formula(A, types), 1e-5)
