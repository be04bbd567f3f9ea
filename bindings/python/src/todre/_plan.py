"""Prune plans (libtodre 1.1): group counts from sizes, positions after
pruning, and the signatures a cache keys on."""

import ctypes

import numpy as np

from ._api import PositionsPolicy
from ._enums import parse
from ._errors import check, invalid
from ._ints import int64_array
from ._lib import lib
from ._selection import SelectConfig
from ._tensor import Borrowed, kind_of

__all__ = ["group_counts", "positions", "select_signature"]


def group_counts(groups, keep=None, ratio=None, budget="set", group_min=1):
    """(counts per group [G] NumPy int64, total) for a token set split into
    groups at the row offsets `groups` ([G + 1] ints), from the sizes alone:
    what to size placeholders with before any embedding exists. The same
    code as the selection (todre_select_group_counts). Under budget 'set'
    every group count is -1 (the selection decides how the total falls)."""
    cfg = SelectConfig(keep, ratio, budget=budget, group_min=group_min)
    try:
        return cfg.group_counts(groups)
    finally:
        cfg.close()


def _host_ints(x, what):
    if kind_of(x) == "torch":
        x = x.detach().cpu()
    return np.ascontiguousarray(int64_array(x, what))


def positions(positions, kept, policy="keep"):
    """Position ids after pruning one span of visual tokens (todre_positions).

    Args:
        positions: [n] (1-D RoPE) or [n, P] (e.g. P = 3 for mRoPE's
            (t, h, w)) ints: each token's id in the unpruned prompt.
        kept: ascending, distinct indices of the kept tokens (a selection in
            position order).
        policy: 'keep' (kept tokens keep their ids; the text continues where
            it continues after the unpruned span), 'compact' (kept tokens
            numbered consecutively; the text right after them) or
            'keep-max' (kept ids; the text after the largest kept id).

    Returns:
        (ids [k] or [k, P] NumPy int64, next, delta): the kept tokens' ids,
        the id the text after the span continues at, and next - start - k
        (start: the span's smallest id), which summed over a prompt's spans
        is Qwen2.5-VL's rope delta.
    """
    pol = parse(PositionsPolicy, policy, "policy")
    pos = _host_ints(positions, "positions")
    flat = pos.ndim == 1
    if flat:
        pos = pos.reshape(-1, 1)
    if pos.ndim != 2:
        raise invalid(f"positions: expected [n] or [n, P], got shape {pos.shape}")
    kp = _host_ints(kept, "kept").reshape(-1)
    out = np.empty((kp.size, pos.shape[1]), dtype=np.int64)
    nxt, delta = ctypes.c_int64(), ctypes.c_int64()
    with Borrowed(pos, "positions") as p, Borrowed(kp, "kept") as k, \
            Borrowed(out, "out", writable=True) as o:
        check(lib.todre_positions(int(pol), p.ref, k.ref, o.ref, ctypes.byref(nxt),
                                  ctypes.byref(delta)))
    return (out[:, 0] if flat else out), nxt.value, delta.value


def select_signature(keep=None, ratio=None, objective="max-sum", pivot="auto",
                     pivot_range=None, seed=0, budget="set", group_min=1):
    """The canonical text of a selection configuration
    (todre_select_config_signature): equal exactly when two configurations
    select the same tokens from every input; what a prefix or encoder cache
    adds to its key."""
    cfg = SelectConfig(keep, ratio, objective, pivot, pivot_range, seed, "position", budget,
                       group_min)
    try:
        return cfg.signature()
    finally:
        cfg.close()
