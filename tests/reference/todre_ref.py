"""Independent float64 reference for ToDRE stage 1 (diversity selection).

Written from the paper's Algorithm 1 (greedy max-sum diversification) and
docs/semantics.md ("Stage 1: diversity selection"), not from libtodre's C code.
Everything is computed in float64 with plain NumPy, for readability rather
than speed; ties always go to the lowest index (np.argmin / np.argmax return
the first occurrence, which is exactly that rule).

Public API (used by several test suites; keep the names):
    normalize(E)
    keep_count(n, keep=None, ratio=None)
    splitmix64_pivot(seed, lo, hi)
    pivot(E, cls, mode, lo=0, hi=None, seed=0, objective='max-sum')
    select(E, k, cls=None, objective='max-sum', pivot='auto',
           pivot_range=(0, None), seed=0)
    check_trajectory(E, order, cls=None, objective='max-sum', pivot='auto',
                     pivot_range=(0, None), seed=0, tol=0.0)
"""
import math
from collections import namedtuple

import numpy as np

OBJECTIVES = ("max-sum", "max-min", "cls-topk")
PIVOTS = ("auto", "cls", "center", "farthest", "random", "isolated")

_MASK64 = (1 << 64) - 1


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------

def normalize(E):
    """Rows divided by their L2 norm, in float64; a zero row stays zero."""
    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 2:
        raise ValueError("E must be [n, d]")
    norms = np.sqrt(np.sum(E * E, axis=1))
    X = np.zeros_like(E)
    nonzero = norms > 0
    X[nonzero] = E[nonzero] / norms[nonzero, None]
    return X


def keep_count(n, keep=None, ratio=None):
    """Tokens kept from a set of n: keep itself (1 <= keep <= n), or
    clamp(floor(ratio * n + 0.5), 1, n) for ratio in (0, 1] (default 0.10)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    if keep is not None and keep != 0:
        if keep < 1 or keep > n:
            raise ValueError("keep must be in [1, n]")
        return int(keep)
    r = 0.10 if ratio is None else float(ratio)
    if not (r > 0.0 and r <= 1.0):
        raise ValueError("ratio must be in (0, 1]")
    return int(min(max(math.floor(r * n + 0.5), 1), n))


def _splitmix64_next(state):
    state = (state + 0x9E3779B97F4A7C15) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def splitmix64_pivot(seed, lo, hi):
    """RANDOM pivot: uniform in [lo, hi) by rejection sampling on splitmix64
    seeded with (uint64)seed (a negative int64 seed wraps mod 2^64)."""
    m = hi - lo
    if m < 1:
        raise ValueError("empty pivot range")
    state = seed & _MASK64
    reject_below = (1 << 64) % m
    while True:
        state, z = _splitmix64_next(state)
        if z >= reject_below:
            return lo + z % m


def gram(X):
    """All similarities s(i, j) = x_i . x_j. Computed over the distinct rows
    and expanded, so identical rows get bitwise-identical similarities and
    their exact ties stay exact (BLAS may round a row differently depending
    on where it sits in the matrix)."""
    U, inv = np.unique(X, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return (U @ U.T)[np.ix_(inv, inv)]


def _rowwise_dot(X, y):
    """x_i . y for every row, identical rows giving identical values."""
    U, inv = np.unique(X, axis=0, return_inverse=True)
    return (U @ y)[inv.reshape(-1)]


def _flat_cls(cls):
    return None if cls is None else np.asarray(cls, dtype=np.float64).reshape(-1)


def _resolve_range(n, lo, hi):
    hi = n if hi is None or hi == -1 else hi
    if not (0 <= lo < hi <= n):
        raise ValueError("pivot range [%d, %d) does not fit n = %d" % (lo, hi, n))
    return lo, hi


def _resolve_pivot_mode(mode, objective, cls):
    if mode != "auto":
        return mode
    if objective == "max-min":
        return "isolated"
    return "cls" if cls is not None else "center"


def _pivot_scores(X, cls, mode, lo, hi):
    """Score of every candidate in [lo, hi) and whether the pivot is its
    argmax (True) or argmin (False). RANDOM has no scores (None)."""
    if mode == "cls":
        if cls is None:
            raise ValueError("CLS pivot needs a CLS map")
        return _flat_cls(cls)[lo:hi], True
    if mode in ("center", "farthest"):
        mu = X[lo:hi].mean(axis=0)
        return _rowwise_dot(X[lo:hi], mu), mode == "center"
    if mode == "isolated":
        n = X.shape[0]
        if n == 1:
            return np.zeros(1), False
        sims = gram(X)[lo:hi].copy()
        for v in range(lo, hi):
            sims[v - lo, v] = -np.inf  # u != v
        return sims.max(axis=1), False
    if mode == "random":
        return None, True
    raise ValueError("unknown pivot mode %r" % (mode,))


def pivot(E, cls, mode, lo=0, hi=None, seed=0, objective="max-sum"):
    """The pivot (first selected token) for a given mode, as an index into
    all n rows. 'auto' resolves with `objective` (MAX_SUM: CLS if a map is
    given else CENTER; MAX_MIN: ISOLATED)."""
    return _choose_pivot(E, cls, mode, lo, hi, seed, objective)


def _choose_pivot(E, cls, mode, lo, hi, seed, objective):
    X = normalize(E)
    lo, hi = _resolve_range(X.shape[0], lo, hi)
    mode = _resolve_pivot_mode(mode, objective, cls)
    if mode == "random":
        return splitmix64_pivot(seed, lo, hi)
    scores, want_max = _pivot_scores(X, cls, mode, lo, hi)
    return lo + int(np.argmax(scores) if want_max else np.argmin(scores))


# --------------------------------------------------------------------------
# Greedy selection
# --------------------------------------------------------------------------

def _greedy_scores_init(sim_p, objective):
    """Score vector after choosing the pivot p (sim_p[v] = s(v, p)). MAX_SUM
    minimises the running sum of similarities; MAX_MIN maximises the min
    distance 1 - s."""
    if objective == "max-sum":
        return sim_p.copy()
    return 1.0 - sim_p


def _greedy_scores_update(scores, sim_c, objective):
    if objective == "max-sum":
        return scores + sim_c
    return np.minimum(scores, 1.0 - sim_c)


def _best_remaining(scores, taken, objective):
    """The lowest-index best remaining candidate (argmin for MAX_SUM, argmax
    for MAX_MIN)."""
    masked = scores.copy()
    if objective == "max-sum":
        masked[taken] = np.inf
        return int(np.argmin(masked))
    masked[taken] = -np.inf
    return int(np.argmax(masked))


def _cls_topk(cls, k):
    a = _flat_cls(cls)
    # stable sort on -a: descending value, lower index first among ties
    return [int(i) for i in np.argsort(-a, kind="stable")[:k]]


def select(E, k, cls=None, objective="max-sum", pivot="auto", pivot_range=(0, None),
           seed=0):
    """Indices of the k kept tokens, in selection order (first = pivot)."""
    if objective not in OBJECTIVES:
        raise ValueError("unknown objective %r" % (objective,))
    E = np.asarray(E, dtype=np.float64)
    n = E.shape[0]
    if not 1 <= k <= n:
        raise ValueError("k must be in [1, n]")
    if objective == "cls-topk":
        if cls is None:
            raise ValueError("CLS_TOPK needs a CLS map")
        return _cls_topk(cls, k)
    lo, hi = pivot_range
    p = _choose_pivot(E, cls, pivot, lo, hi, seed, objective)
    X = normalize(E)
    G = gram(X)
    order = [p]
    taken = np.zeros(n, dtype=bool)
    taken[p] = True
    scores = _greedy_scores_init(G[p], objective)
    while len(order) < k:
        c = _best_remaining(scores, taken, objective)
        order.append(c)
        taken[c] = True
        scores = _greedy_scores_update(scores, G[c], objective)
    return order


# --------------------------------------------------------------------------
# Trajectory validity (oracle for implementations that round differently)
# --------------------------------------------------------------------------

class TrajectoryCheck(namedtuple("TrajectoryCheck", ["valid", "margins"])):
    """(valid, margins). Also carries .step (first invalid step or None) and
    .reason (text)."""


def _step_check(scores, candidates, chosen, want_max, tol):
    """Judge one greedy step. Returns (ok, margin): margin = gap between the
    best and second-best candidate score (inf with a single candidate)."""
    s = scores[candidates]
    best_pos = int(np.argmax(s) if want_max else np.argmin(s))
    best = s[best_pos]
    if len(s) > 1:
        rest = np.delete(s, best_pos)
        second = rest.max() if want_max else rest.min()
        margin = float(best - second if want_max else second - best)
    else:
        margin = math.inf
    if chosen not in candidates:
        return False, margin
    mine = scores[chosen]
    deficit = (best - mine) if want_max else (mine - best)
    if tol == 0.0:
        ok = chosen == candidates[best_pos]  # exact arithmetic: lowest index on ties
    else:
        ok = deficit <= tol
    return bool(ok), margin


def _tol_at(tol, step):
    return tol(step) if callable(tol) else float(tol)


def check_trajectory(E, order, cls=None, objective="max-sum", pivot="auto",
                     pivot_range=(0, None), seed=0, tol=0.0):
    """Tell whether `order` is a valid greedy trajectory of the exact
    algorithm up to `tol`: the pivot and every later choice must score within
    tol of the best remaining candidate (scores recomputed in float64 along
    `order` itself). tol may be a number or a function of the step index
    (0 = pivot). With tol = 0 exact ties must go to the lowest index.

    Returns TrajectoryCheck(valid, margins), margins[j] = gap between the best
    and the second-best score at step j (inf where there is no competitor,
    e.g. the RANDOM pivot). .step/.reason describe the first failure."""
    E = np.asarray(E, dtype=np.float64)
    n = E.shape[0]
    order = [int(i) for i in order]
    result = _check(E, order, cls, objective, pivot, pivot_range, seed, tol, n)
    margins, bad_step, reason = result
    check = TrajectoryCheck(bad_step is None, margins)
    check.step = bad_step
    check.reason = reason
    return check


def _check(E, order, cls, objective, pivot_mode, pivot_range, seed, tol, n):
    """(margins, first bad step or None, reason) for check_trajectory."""
    if len(order) == 0 or len(set(order)) != len(order) or min(order) < 0 or max(order) >= n:
        return [], 0, "order is empty, repeats an index or leaves [0, n)"
    if objective == "cls-topk":
        return _check_topk(_flat_cls(cls), order, tol, n)
    X = normalize(E)
    lo, hi = _resolve_range(n, *pivot_range)
    mode = _resolve_pivot_mode(pivot_mode, objective, cls)
    ok, m = _check_pivot(X, cls, mode, lo, hi, seed, order[0], tol)
    margins = [m]
    if not ok:
        return margins, 0, "pivot %d is not a valid %s pivot" % (order[0], mode)
    taken = np.zeros(n, dtype=bool)
    taken[order[0]] = True
    G = gram(X)
    scores = _greedy_scores_init(G[order[0]], objective)
    for j in range(1, len(order)):
        c = order[j]
        ok, m = _step_check(scores, np.flatnonzero(~taken), c, objective == "max-min",
                            _tol_at(tol, j))
        margins.append(m)
        if not ok:
            return margins, j, "step %d: %d is not a best remaining candidate" % (j, c)
        taken[c] = True
        scores = _greedy_scores_update(scores, G[c], objective)
    return margins, None, ""


def _check_pivot(X, cls, mode, lo, hi, seed, p, tol):
    if mode == "random":
        return p == splitmix64_pivot(seed, lo, hi), math.inf
    scores, want_max = _pivot_scores(X, cls, mode, lo, hi)
    full = np.full(X.shape[0], np.nan)
    full[lo:hi] = scores
    return _step_check(full, np.arange(lo, hi), p, want_max, _tol_at(tol, 0))


def _check_topk(a, order, tol, n):
    margins, taken = [], np.zeros(n, dtype=bool)
    for j, c in enumerate(order):
        ok, m = _step_check(a, np.flatnonzero(~taken), c, True, _tol_at(tol, j))
        margins.append(m)
        if not ok:
            return margins, j, "step %d: CLS value of %d is not the largest left" % (j, c)
        taken[c] = True
    return margins, None, ""
