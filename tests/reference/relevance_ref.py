"""Float64 NumPy reference for ToDRE stage 2 (relevance drop).

Written from the paper's equation (alpha_{t->v}, alpha_{v->t}; section
"Relevance-Driven Token Compression") and docs/semantics.md ("Stage 2:
relevance drop"), not from the C code:

    alpha_t2v = sum_{h, i in T, j in V} A[h,i,j] / sum_{h, i in T, all j} A[h,i,j]
    alpha_v2t = sum_{h, i in V, j in T} A[h,i,j] / sum_{h, i in V, all j} A[h,i,j]

Queries are the last Q of the K positions (query row i sits at K - Q + i).
A ratio whose denominator is 0 is 0. From Q and K, A is the causal
softmax(scale * q . k) per head; with grouped-query attention query head h
reads key head h // (H // H_kv). Decision: drop iff both ratios < tau.
"""
import numpy as np

SYSTEM, VISUAL, TEXT = 0, 1, 2


def _ratio(num, den):
    return float(num / den) if den != 0 else 0.0


def ratios_from_probs(attn, types):
    """attn [H, Q, K] (any float dtype), types [K] -> (alpha_t2v, alpha_v2t)."""
    a = np.asarray(attn, dtype=np.float64)
    types = np.asarray(types)
    H, Q, K = a.shape
    qtypes = types[K - Q:]
    t_rows = a[:, qtypes == TEXT, :]
    v_rows = a[:, qtypes == VISUAL, :]
    t2v = _ratio(t_rows[:, :, types == VISUAL].sum(), t_rows.sum())
    v2t = _ratio(v_rows[:, :, types == TEXT].sum(), v_rows.sum())
    return t2v, v2t


def causal_probs(q, k, scale, rows=None):
    """Causal softmax(scale * q . k) in float64.

    q [H, Q, dh], k [H_kv, K, dh]; returns A [H, len(rows), K] for the query
    rows `rows` (default: all Q), zeros past each query's position."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    H, Q, _ = q.shape
    H_kv, K, _ = k.shape
    assert H % H_kv == 0
    rows = np.arange(Q) if rows is None else np.asarray(rows)
    group = H // H_kv
    kk = np.repeat(k, group, axis=0)                      # [H, K, dh]
    logits = scale * np.matmul(q[:, rows, :], kk.transpose(0, 2, 1))
    pos = (K - Q + rows)[:, None]                          # [R, 1]
    visible = np.arange(K)[None, :] <= pos                 # [R, K]
    logits = np.where(visible[None], logits, -np.inf)
    logits -= logits.max(axis=2, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=2, keepdims=True)


def ratios_from_qk(q, k, types, scale=None, chunk=256):
    """Ratios of the causal softmax attention, computed chunk by chunk of
    query rows so long sequences fit in memory. scale None = 1/sqrt(dh)."""
    q = np.asarray(q)
    types = np.asarray(types)
    H, Q, dh = q.shape
    K = np.asarray(k).shape[1]
    scale = 1.0 / np.sqrt(dh) if scale is None else scale
    qtypes = types[K - Q:]
    sums = np.zeros(4)
    for r0 in range(0, Q, chunk):
        rows = np.arange(r0, min(Q, r0 + chunk))
        keep = (qtypes[rows] == TEXT) | (qtypes[rows] == VISUAL)
        if not keep.any():
            continue
        rows = rows[keep]
        a = causal_probs(q, k, scale, rows)
        rt = qtypes[rows]
        sums[0] += a[:, rt == TEXT, :][:, :, types == VISUAL].sum()
        sums[1] += a[:, rt == TEXT, :].sum()
        sums[2] += a[:, rt == VISUAL, :][:, :, types == TEXT].sum()
        sums[3] += a[:, rt == VISUAL, :].sum()
    return _ratio(sums[0], sums[1]), _ratio(sums[2], sums[3])


def decide(t2v, v2t, tau):
    """Drop iff both ratios are strictly below tau."""
    return t2v < tau and v2t < tau


def layout_types(n_system, n_visual, n_text):
    return np.array([SYSTEM] * n_system + [VISUAL] * n_visual + [TEXT] * n_text, dtype=np.uint8)
