"""Stage 1: todre.select() and todre.select_batch() on the calling
thread's context for the data's device."""

from ._context import context_for
from ._selection import _is_list_of_arrays, _prepare, select_batch_on, select_on

def select(embeddings, keep=None, ratio=None, cls=None, objective="max-sum", pivot="auto",
           pivot_range=None, seed=0, order="position", backend="auto", groups=None,
           budget="set", group_min=1, with_scores=False):
    """Keep k of the n visual tokens by greedy diversity selection (stage 1).

    Args:
        embeddings: [n, d] float32 / float16 / bfloat16 array of any DLPack
            library (NumPy, PyTorch CPU or CUDA, CuPy, JAX), read in place.
        keep: number of tokens to keep (1..n); or
        ratio: keep ratio in (0, 1], k = clamp(floor(ratio * n + 0.5), 1, n).
            Neither: ratio 0.10.
        cls: optional CLS attention [n] or [frames, tokens_per_frame] (same
            device); used by pivot 'cls' (the 'auto' pivot of max-sum when
            given) and objective 'cls-topk'.
        objective: 'max-sum' (ToDRE), 'max-min' (DivPrune) or 'cls-topk'.
        pivot: 'auto', 'cls', 'center', 'farthest', 'random' or 'isolated'.
        pivot_range: (lo, hi) rows the pivot is chosen from; hi None = n.
        seed: seed of the 'random' pivot.
        order: 'position' (ascending, default), 'selection' (greedy order,
            first = pivot) or 'both' ([2, k]: selection row, position row).
        backend: 'auto' (the data's device), 'cpu' or 'cuda'.
        groups: None, or row offsets [G + 1] splitting the set into groups
            (the images of a prompt, AnyRes thumbnail and crops, the frames
            of a video; empty groups allowed).
        budget: how the budget falls on the groups: 'set' (one selection
            over the set, the default), 'shared' (the set's budget shared
            by size, at least group_min per group, each group selected on
            its own) or 'per-group' (each group its own ratio or keep).
        group_min: the 'shared' budget's minimum per group (>= 1).
        with_scores: also return, per token, its objective value at the end
            of its set's (or group's) selection and the step it was taken
            at (-1: not kept).

    Returns:
        int64 indices of the caller's kind on the caller's device; with
        with_scores, (indices, scores float32 [n], steps int64 [n]).

    Raises:
        TodreError: with the status and the library's message on bad input.
    """
    emb = _prepare(embeddings, "embeddings")
    return select_on(context_for(emb, backend), emb, keep=keep, ratio=ratio, cls=cls,
                     objective=objective, pivot=pivot, pivot_range=pivot_range, seed=seed,
                     order=order, groups=groups, budget=budget, group_min=group_min,
                     with_scores=with_scores)


def select_batch(embeddings, offsets=None, keep=None, ratio=None, cls=None,
                 objective="max-sum", pivot="auto", pivot_range=None, seed=0,
                 order="position", backend="auto", groups=None, budget="set", group_min=1,
                 with_scores=False):
    """Stage 1 over a ragged batch of token sets, each exactly as select() would.

    Two input forms:
      * a list of [n_b, d] arrays (and cls a list of [n_b] arrays or None):
        returns a list of per-set index arrays (views of one output). The sets
        are concatenated first (one copy, unavoidable for a list).
      * one concatenated [N, d] array plus offsets (host ints [B + 1]; set b is
        rows offsets[b]:offsets[b+1]); cls concatenated likewise: returns
        (indices [K] or [2, K], out_offsets NumPy int64 [B + 1]), zero-copy.

    keep is None (ratio budget per set), an int for every set, or one int per
    set. Indices are local to each set. groups: with the list form, one list
    of group offsets per set (local rows); with the concatenated form, row
    offsets over all N rows, every set boundary a group boundary. With
    with_scores the result is followed by scores and steps ([N], or per set
    for the list form). Other arguments as select().
    """
    first = embeddings[0] if _is_list_of_arrays(embeddings) else embeddings
    ctx = context_for(_prepare(first, "embeddings"), backend)
    return select_batch_on(ctx, embeddings, offsets=offsets, keep=keep, ratio=ratio, cls=cls,
                           objective=objective, pivot=pivot, pivot_range=pivot_range,
                           seed=seed, order=order, groups=groups, budget=budget,
                           group_min=group_min, with_scores=with_scores)
