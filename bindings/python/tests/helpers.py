"""Test data without near-ties, and the independent stage-2 formula."""

import numpy as np
import todre_ref as ref

MARGIN = 1e-4  # smallest score gap between the best and second-best choice


def well_separated(n, d, k, seed, dtype=np.float32, cls=False, objective="max-sum",
                   pivot="auto", pivot_range=(0, None)):
    """(E, cls, selection order) drawn from `seed` onward until every greedy step of
    the float64 reference wins by at least MARGIN (so rounding cannot flip it)."""
    for s in range(seed, seed + 50):
        r = np.random.default_rng(s)
        E = r.standard_normal((n, d)).astype(dtype)
        a = r.random(n).astype(np.float32) if cls else None
        E64 = E.astype(np.float64)
        order = ref.select(E64, k, cls=a, objective=objective, pivot=pivot,
                           pivot_range=pivot_range, seed=s)
        check = ref.check_trajectory(E64, order, cls=a, objective=objective, pivot=pivot,
                                     pivot_range=pivot_range, seed=s)
        assert check.valid
        if min(check.margins) > MARGIN:
            return E, a, order, s
    raise AssertionError("no well-separated input found")


def ratios_reference(A, types):
    """alpha_t2v, alpha_v2t of docs/semantics.md ("Stage 2", "Ratios") in float64.
    A: [H, Q, K]; the queries are the last Q of the K positions."""
    A = np.asarray(A, dtype=np.float64)
    H, Q, K = A.shape
    qt = np.asarray(types)[K - Q:]
    kt = np.asarray(types)
    text_q, vis_q = qt == 2, qt == 1
    num_t2v = A[:, text_q][:, :, kt == 1].sum()
    den_t2v = A[:, text_q].sum()
    num_v2t = A[:, vis_q][:, :, kt == 2].sum()
    den_v2t = A[:, vis_q].sum()
    return (num_t2v / den_t2v if den_t2v else 0.0, num_v2t / den_v2t if den_v2t else 0.0)


def causal_softmax(q, k, scale=None):
    """A[h, i, j] = causal softmax(scale * q . k) in float64; q [H, Q, dh],
    k [H_kv, K, dh]; query row i sits at position K - Q + i."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    H, Q, dh = q.shape
    Hkv, K, _ = k.shape
    scale = 1.0 / np.sqrt(dh) if not scale else scale
    k = np.repeat(k, H // Hkv, axis=0)
    s = scale * np.einsum("hqd,hkd->hqk", q, k)
    pos = np.arange(K - Q, K)[:, None]
    s = np.where(np.arange(K)[None, :] <= pos, s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)
