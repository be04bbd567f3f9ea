"""Stage 1 on a given context: SelectConfig, and select_on /
select_batch_on, which todre.select / todre.select_batch (_select.py) and
Context.select / Context.select_batch call. Knows no context registry."""

import ctypes
import contextlib

import numpy as np

from ._api import Budget, Objective, Order, Pivot, Reset, SelectArgs, Status
from ._enums import SelectParam, parse
from ._errors import TodreError, check, invalid
from ._handle import OwnsHandle, serialized
from ._ints import c_double, c_int, int64_array
from ._lib import lib
from ._params import _Kind
from ._tensor import Borrowed, as_array, empty_int64, finish, is_host, kind_of, ref

_PARAMS = _Kind("select_config", SelectParam)


class SelectConfig(OwnsHandle):
    """A todre_select_config built from keyword arguments (host-only state).

    Parameters can also be set and read one by one with set() / get()
    (todre.SelectParam / todre.Param members or names such as 'pivot-lo').
    """

    def __init__(self, keep=None, ratio=None, objective="max-sum", pivot="auto",
                 pivot_range=None, seed=0, order="position", budget="set", group_min=1):
        self._handle = ctypes.c_void_p()
        check(lib.todre_select_config_create(ctypes.byref(self._handle)))
        self.order = parse(Order, order, "order")
        self.set(SelectParam.BUDGET, parse(Budget, budget, "budget"))
        self.set(SelectParam.GROUP_MIN, _integer(group_min, "group_min"))
        self.set(SelectParam.OBJECTIVE, parse(Objective, objective, "objective"))
        self.set(SelectParam.PIVOT, parse(Pivot, pivot, "pivot"))
        self.set(SelectParam.ORDER, self.order)
        self.set(SelectParam.SEED, _integer(seed, "seed"))
        if pivot_range is not None:
            try:
                lo, hi = pivot_range
            except (TypeError, ValueError):
                raise invalid(f"pivot_range: expected (lo, hi), got {pivot_range!r}") from None
            self.set(SelectParam.PIVOT_LO, _integer(lo, "pivot_range[0]"))
            self.set(SelectParam.PIVOT_HI, -1 if hi is None else _integer(hi, "pivot_range[1]"))
        if keep is not None and ratio is not None:
            raise invalid("keep and ratio: give one budget, not both")
        if keep is not None:
            k = _integer(keep, "keep")
            if k < 1:
                raise invalid(f"keep: must be >= 1, got {k}")
            self.set(SelectParam.KEEP, k)
        elif ratio is not None:
            self.set(SelectParam.RATIO, c_double(ratio, "ratio"))

    @property
    def handle(self):
        if not self._handle:
            raise TodreError(Status.STATE, "select config: already closed")
        return self._handle

    @serialized
    def set(self, param, value):
        """Set a selection parameter (int or float after its type)."""
        _PARAMS.set(self.handle, param, value)

    @serialized
    def get(self, param):
        """Read a selection parameter."""
        return _PARAMS.get(self.handle, param)

    @serialized
    def reset(self, what="params"):
        """Every parameter back to its default."""
        check(lib.todre_select_config_reset(self.handle, int(parse(Reset, what, "what"))))
        self.order = Order(self.get(SelectParam.ORDER))

    @serialized
    def keep_count(self, n):
        """k for a token set of n rows (todre_select_keep_count)."""
        out = ctypes.c_int64()
        check(lib.todre_select_keep_count(self.handle, _integer(n, "n"), ctypes.byref(out)))
        return out.value

    @serialized
    @serialized
    def group_counts(self, groups):
        """(counts per group, total) for a set split into groups at the row
        offsets `groups` ([G + 1] ints), from the sizes alone
        (todre_select_group_counts). Under the 'set' budget every count is
        -1 (the selection decides)."""
        offs = int64_array(groups, "groups")
        if offs.ndim != 1 or offs.size < 2:
            raise invalid(f"groups: expected [G + 1] offsets with G >= 1, got shape {offs.shape}")
        counts = np.zeros(offs.size - 1, dtype=np.int64)
        total = ctypes.c_int64()
        with Borrowed(offs, "groups") as g, Borrowed(counts, "counts", writable=True) as c:
            check(lib.todre_select_group_counts(self.handle, g.ref, c.ref, ctypes.byref(total)))
        return counts, total.value

    @serialized
    def signature(self):
        """The canonical text of what in this configuration decides the
        selected tokens (todre_select_config_signature): what a prefix or
        encoder cache adds to its key."""
        return _signature(lib.todre_select_config_signature, self.handle)

    def close(self):
        if self._handle:
            lib.todre_select_config_destroy(self._handle)
            self._handle = ctypes.c_void_p()


def _signature(fn, handle):
    n = ctypes.c_size_t()
    check(fn(handle, None, 0, ctypes.byref(n)))
    buf = ctypes.create_string_buffer(n.value + 1)
    check(fn(handle, buf, n.value + 1, ctypes.byref(n)))
    return buf.value.decode()


def _integer(value, what):
    """An int64 argument (see _ints.c_int)."""
    return c_int(value, what)


def _prepare(x, what):
    x = as_array(x, what)
    if kind_of(x) == "torch" and getattr(x, "requires_grad", False):
        x = x.detach()  # a view: DLPack refuses tensors that require grad
    return x


def _rows(borrowed, what):
    if borrowed.ndim < 1:
        raise invalid(f"{what}: expected [n, d], got a rank-{borrowed.ndim} array")
    return borrowed.shape[0]


def _group_totals(cfg, offs, keep_arr, groups):
    """Per-set output counts under cfg with groups (absolute row offsets, or
    None: each set one group); None where the input is invalid (the C call
    then says why, before anything is sized from it)."""
    offs = [int(v) for v in offs]
    grp = offs if groups is None else [int(v) for v in groups]
    if grp[0] != 0 or grp[-1] != offs[-1] or any(b < a for a, b in zip(grp, grp[1:])) \
            or any(b <= a for a, b in zip(offs, offs[1:])):
        return None
    totals = []
    for s in range(len(offs) - 1):
        lo, hi = offs[s], offs[s + 1]
        inner = [lo] + [g for g in grp if lo < g < hi] + [hi]
        rel = [g - lo for g in inner]
        if keep_arr is not None:
            k = int(keep_arr.reshape(-1)[s])
            if cfg.get(SelectParam.BUDGET) == Budget.PER_GROUP:
                totals.append(sum(min(k, b - a) for a, b in zip(rel, rel[1:]) if b > a))
            else:
                totals.append(k)
            continue
        try:
            totals.append(cfg.group_counts(rel)[1])
        except TodreError:
            return None
    return totals


def _select_ex(ctx, emb, cfg, cls, offs, keep_arr, groups, with_scores):
    """todre_select_ex: (indices, out_offsets, scores or None, steps or None)."""
    N = int(emb.shape[0]) if len(emb.shape) else 0
    offs_list = np.array([0, N], dtype=np.int64) if offs is None else offs
    grp = None if groups is None else int64_array(groups, "groups")
    totals = _group_totals(cfg, offs_list, keep_arr, grp) if N else None
    total = 0 if totals is None else sum(totals)
    nsets = offs_list.size - 1
    out_offs = np.zeros(nsets + 1, dtype=np.int64)
    args = SelectArgs()
    args.struct_size = ctypes.sizeof(SelectArgs)
    with contextlib.ExitStack() as stack:
        stack.enter_context(ctx._lock)      # the stream and the call, one thread at a time
        stream = ctx.follow(emb)

        def arg(obj, what, dev_stream=None, writable=False):
            b = stack.enter_context(Borrowed(obj, what, dev_stream, writable=writable))
            return ctypes.pointer(b.tensor)

        args.embeddings = arg(emb, "embeddings", stream)
        if cls is not None:
            args.cls = arg(cls, "cls", stream)
        if offs is not None:
            args.offsets = arg(offs, "offsets")
        if keep_arr is not None:
            args.keep = arg(keep_arr, "keep")
        if grp is not None:
            args.groups = arg(grp, "groups")
        out = empty_int64(emb, (2, total) if cfg.order == Order.BOTH else (total,))
        args.out = arg(out, "out", stream, True)
        args.out_offsets = arg(out_offs, "out_offsets", None, True)
        scores = steps = None
        if with_scores:
            scores = empty_int64(emb, (N,), "float32")
            steps = empty_int64(emb, (N,))
            args.scores = arg(scores, "scores", stream, True)
            args.steps = arg(steps, "steps", stream, True)
        check(lib.todre_select_ex(ctx.handle, cfg.handle, ctypes.byref(args)), ctx.handle)
    return finish(emb, out), out_offs, scores, steps


def select_on(ctx, embeddings, keep=None, ratio=None, cls=None, objective="max-sum",
              pivot="auto", pivot_range=None, seed=0, order="position", groups=None,
              budget="set", group_min=1, with_scores=False):
    emb = _prepare(embeddings, "embeddings")
    cls = None if cls is None else _prepare(cls, "cls")
    cfg = SelectConfig(keep, ratio, objective, pivot, pivot_range, seed, order, budget,
                       group_min)
    if groups is not None or with_scores:
        try:
            out, _, scores, steps = _select_ex(ctx, emb, cfg, cls, None, None, groups,
                                               with_scores)
        finally:
            cfg.close()
        return (out, scores, steps) if with_scores else out
    with contextlib.ExitStack() as stack:
        stack.enter_context(ctx._lock)      # the stream and the call, one thread at a time
        stream = ctx.follow(emb)
        e = stack.enter_context(Borrowed(emb, "embeddings", stream))
        c = None if cls is None else stack.enter_context(Borrowed(cls, "cls", stream))
        k = cfg.keep_count(_rows(e, "embeddings"))
        out = empty_int64(emb, (2, k) if cfg.order == Order.BOTH else (k,))
        o = stack.enter_context(Borrowed(out, "out", stream, writable=True))
        check(lib.todre_select(ctx.handle, cfg.handle, e.ref, ref(c), o.ref), ctx.handle)
    cfg.close()
    return finish(emb, out)


def _concat(parts, what):
    parts = [_prepare(p, f"{what}[{i}]") for i, p in enumerate(parts)]
    if not parts:
        raise invalid(f"{what}: empty list")
    kind = kind_of(parts[0])
    if kind == "torch":
        import torch
        return torch.cat([p.reshape(p.shape[0], -1) if what == "embeddings" else p.reshape(-1)
                          for p in parts])
    if kind == "cupy":
        import cupy as xp
    else:
        xp = np
    flat = [p if what == "embeddings" else xp.reshape(xp.asarray(p), (-1,)) for p in parts]
    try:
        return xp.concatenate(flat)
    except ValueError as exc:
        raise invalid(f"{what}: cannot concatenate the sets: {exc}") from exc


def _host_int64(x, what, ctx):
    """Host int64 NumPy copy (or view) of an integer sequence or array; device
    arrays are copied to the host through the context (todre_context_copy)."""
    if kind_of(x) == "torch":
        x = x.detach()
    if hasattr(x, "__dlpack_device__") and not is_host(x):
        x = ctx.to_host(x, what)
    return int64_array(x, what)


def _is_list_of_arrays(x):
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(
        hasattr(p, "__dlpack__") or hasattr(p, "__array_interface__") for p in x)


def select_batch_on(ctx, embeddings, offsets=None, keep=None, ratio=None, cls=None,
                    objective="max-sum", pivot="auto", pivot_range=None, seed=0,
                    order="position", groups=None, budget="set", group_min=1,
                    with_scores=False):
    listed = _is_list_of_arrays(embeddings)
    if listed and groups is not None:
        # per-set group offsets (local) -> absolute row offsets
        if len(groups) != len(embeddings):
            raise invalid(f"groups: {len(groups)} group lists for {len(embeddings)} sets")
        absolute, start = [0], 0
        for b, (part, g) in enumerate(zip(embeddings, groups)):
            g = [int(v) for v in int64_array(g, f"groups[{b}]").reshape(-1)]
            if not g or g[0] != 0 or g[-1] != int(part.shape[0]):
                raise invalid(f"groups[{b}]: offsets must run from 0 to the set's "
                              f"{int(part.shape[0])} rows")
            absolute += [start + v for v in g[1:]]
            start += int(part.shape[0])
        groups = absolute
    if listed:
        if offsets is not None:
            raise invalid("offsets: not allowed with a list of token sets")
        offsets = np.cumsum([0] + [int(p.shape[0]) for p in embeddings], dtype=np.int64)
        emb = _concat(embeddings, "embeddings")
        if cls is not None:
            cls = _concat(cls, "cls")
    else:
        if offsets is None:
            raise invalid("offsets: required with concatenated embeddings")
        emb = _prepare(embeddings, "embeddings")
    offs = _host_int64(offsets, "offsets", ctx)
    if offs.ndim != 1 or offs.size < 2:
        raise invalid(f"offsets: expected [B + 1] with B >= 1, got shape {offs.shape}")
    nsets = offs.size - 1
    keep_arr = None
    if keep is not None and np.ndim(keep):
        if ratio is not None:
            raise invalid("keep and ratio: give one budget, not both")
        keep_arr = _host_int64(keep, "keep", ctx)
        cfg = SelectConfig(None, None, objective, pivot, pivot_range, seed, order, budget,
                           group_min)
    else:
        cfg = SelectConfig(keep, ratio, objective, pivot, pivot_range, seed, order, budget,
                           group_min)
    cls = None if cls is None else _prepare(cls, "cls")
    if groups is not None or with_scores:
        try:
            out, out_offs, scores, steps = _select_ex(ctx, emb, cfg, cls, offs, keep_arr,
                                                      groups, with_scores)
        finally:
            cfg.close()
        parts = [out[..., out_offs[b]:out_offs[b + 1]] for b in range(nsets)] if listed \
            else out
        result = parts if listed else (out, out_offs)
        if not with_scores:
            return result
        if listed:
            starts = np.cumsum([0] + [int(p.shape[0]) for p in embeddings])
            scores = [scores[starts[b]:starts[b + 1]] for b in range(nsets)]
            steps = [steps[starts[b]:starts[b + 1]] for b in range(nsets)]
        return result, scores, steps
    total = _batch_total(cfg, offs, keep_arr)
    out_offs = np.zeros(nsets + 1, dtype=np.int64)
    with contextlib.ExitStack() as stack:
        stack.enter_context(ctx._lock)      # the stream and the call, one thread at a time
        stream = ctx.follow(emb)
        e = stack.enter_context(Borrowed(emb, "embeddings", stream))
        c = None if cls is None else stack.enter_context(Borrowed(cls, "cls", stream))
        of = stack.enter_context(Borrowed(offs, "offsets"))
        kp = None if keep_arr is None else stack.enter_context(Borrowed(keep_arr, "keep"))
        out = empty_int64(emb, (2, total) if cfg.order == Order.BOTH else (total,))
        o = stack.enter_context(Borrowed(out, "out", stream, writable=True))
        oo = stack.enter_context(Borrowed(out_offs, "out_offsets", writable=True))
        check(lib.todre_select_batch(ctx.handle, cfg.handle, e.ref, ref(c), of.ref, ref(kp),
                                     o.ref, oo.ref), ctx.handle)
    cfg.close()
    out = finish(emb, out)
    if listed:
        return [out[..., out_offs[b]:out_offs[b + 1]] for b in range(nsets)]
    return out, out_offs


def _batch_total(cfg, offs, keep_arr):
    """Output length K; an invalid budget or invalid offsets yield 0 and are
    reported by the C call (so that no output is sized from them). Python
    ints: NumPy's int64 sums and differences would wrap."""
    offs = [int(v) for v in offs]
    sizes = [b - a for a, b in zip(offs, offs[1:])]
    if offs[0] != 0 or min(sizes) < 1:
        return 0
    if keep_arr is not None:
        keeps = [int(v) for v in keep_arr.reshape(-1)]
        if len(keeps) != len(sizes) or any(not 1 <= k <= n for k, n in zip(keeps, sizes)):
            return 0
        return sum(keeps)
    total = 0
    for n in sizes:
        try:
            total += cfg.keep_count(n)
        except TodreError:
            return 0
    return total
