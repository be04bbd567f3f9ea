"""Stage 2: todre.Relevance, the per-prefill drop decision."""

import contextlib
import ctypes

import numpy as np

from ._context import context_for
from ._enums import Decision, Schedule, parse
from ._errors import check, invalid
from ._handle import OwnsHandle
from ._lib import lib
from ._select import _integer, _prepare
from ._tensor import Borrowed


class Relevance(OwnsHandle):
    """Stage-2 state for one prefill: layers, tau, probe schedule, token types.

    Args:
        num_layers: decoder layers of the model (>= 1).
        batch: sequences observed together (>= 1).
        tau: drop threshold in [0, 1] (default 0.10).
        probe_layers: 0-based probe layers (default [floor(7 * num_layers / 8)]).
        schedule: 'list' (only the probe layers) or 'until-drop' (every layer
            from the smallest probe layer on, until one decides).
        context: a todre.Context to compute on; default: a per-thread one for
            the device of the observed tensors.

    Set the token types (set_types or set_layout) before observing.
    """

    def __init__(self, num_layers, batch=1, tau=None, probe_layers=None, schedule=None,
                 context=None):
        self._handle = ctypes.c_void_p()
        check(lib.todre_relevance_create(_integer(num_layers, "num_layers"),
                                         _integer(batch, "batch"), ctypes.byref(self._handle)))
        self.num_layers = int(num_layers)
        self.batch = int(batch)
        self.context = context
        if tau is not None:
            self.tau = tau
        if probe_layers is not None:
            self.set_probe_layers(probe_layers)
        if schedule is not None:
            self.set_schedule(schedule)

    @property
    def handle(self):
        return self._handle

    @property
    def tau(self):
        out = ctypes.c_double()
        check(lib.todre_relevance_get_tau(self._handle, ctypes.byref(out)))
        return out.value

    @tau.setter
    def tau(self, value):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise invalid(f"tau: expected a number, got {value!r}") from None
        check(lib.todre_relevance_set_tau(self._handle, value))

    def set_probe_layers(self, layers):
        arr = np.ascontiguousarray(np.atleast_1d(np.asarray(layers)), dtype=np.int64) \
            if np.asarray(layers).dtype.kind in "iu" else None
        if arr is None:
            raise invalid(f"probe_layers: expected integers, got {layers!r}")
        check(lib.todre_relevance_set_probe_layers(
            self._handle, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), arr.size))

    def set_schedule(self, schedule):
        check(lib.todre_relevance_set_schedule(self._handle,
                                               int(parse(Schedule, schedule, "schedule"))))

    def is_probe(self, layer, seq=0):
        """Whether `layer` will be probed for sequence `seq` (given decisions so far)."""
        out = ctypes.c_int()
        check(lib.todre_relevance_is_probe(self._handle, _integer(seq, "seq"),
                                           _integer(layer, "layer"), ctypes.byref(out)))
        return bool(out.value)

    def set_types(self, types):
        """Token types per position: [K] (all sequences) or [batch, K], values
        0 SYSTEM, 1 VISUAL, 2 TEXT (any integer array; copied as uint8)."""
        arr = _host_types(types)
        with Borrowed(arr, "types") as t:
            check(lib.todre_relevance_set_types(self._handle, t.handle))

    def set_layout(self, n_system, n_visual, n_text):
        """Types for the contiguous layout [system | visual | text]."""
        check(lib.todre_relevance_set_layout(self._handle, _integer(n_system, "n_system"),
                                             _integer(n_visual, "n_visual"),
                                             _integer(n_text, "n_text")))

    def reset(self):
        """Forget every observation (keeps layers, tau, schedule, types)."""
        check(lib.todre_relevance_reset(self._handle))

    def _ctx(self, like):
        return self.context if self.context is not None else context_for(like)

    def observe_probs(self, layer, attn):
        """Observe attention probabilities [H, Q, K] or [B, H, Q, K] at `layer`.

        Returns one todre.Decision per sequence.
        """
        attn = _prepare(attn, "attn")
        ctx = self._ctx(attn)
        decisions = (ctypes.c_int * self.batch)()
        stream = ctx.follow(attn)
        with Borrowed(attn, "attn", stream) as a:
            check(lib.todre_relevance_observe_probs(ctx.handle, self._handle,
                                                    _integer(layer, "layer"), a.handle,
                                                    decisions), ctx.handle)
        return [Decision(d) for d in decisions]

    def observe_qk(self, layer, q, k, scale=0.0):
        """Observe post-RoPE queries [(B,) H, Q, dh] and keys [(B,) H_kv, K, dh].

        scale 0 means 1/sqrt(dh). Returns one todre.Decision per sequence.
        """
        q = _prepare(q, "q")
        k = _prepare(k, "k")
        ctx = self._ctx(q)
        decisions = (ctypes.c_int * self.batch)()
        try:
            scale = float(scale)
        except (TypeError, ValueError):
            raise invalid(f"scale: expected a number, got {scale!r}") from None
        stream = ctx.follow(q)
        with contextlib.ExitStack() as stack:
            qb = stack.enter_context(Borrowed(q, "q", stream))
            kb = stack.enter_context(Borrowed(k, "k", stream))
            check(lib.todre_relevance_observe_qk(ctx.handle, self._handle,
                                                 _integer(layer, "layer"), qb.handle,
                                                 kb.handle, scale, decisions), ctx.handle)
        return [Decision(d) for d in decisions]

    def ratios(self, layer, seq=0):
        """(alpha_t2v, alpha_v2t) observed at `layer` for `seq` (TodreError STATE if
        that layer was not probed)."""
        t2v, v2t = ctypes.c_double(), ctypes.c_double()
        check(lib.todre_relevance_ratios(self._handle, _integer(seq, "seq"),
                                         _integer(layer, "layer"), ctypes.byref(t2v),
                                         ctypes.byref(v2t)))
        return t2v.value, v2t.value

    def drop_layer(self, seq=0):
        """The layer that decided to drop for `seq`, or None."""
        out = ctypes.c_int64()
        check(lib.todre_relevance_drop_layer(self._handle, _integer(seq, "seq"),
                                             ctypes.byref(out)))
        return None if out.value < 0 else out.value

    def keep_positions(self, seq=0):
        """Every non-visual position, ascending (NumPy int64): what to keep after a drop."""
        seq = _integer(seq, "seq")
        count = ctypes.c_int64()
        check(lib.todre_relevance_keep_positions(self._handle, seq, None, 0,
                                                 ctypes.byref(count)))
        out = np.empty(count.value, dtype=np.int64)
        check(lib.todre_relevance_keep_positions(
            self._handle, seq, out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
            out.size, ctypes.byref(count)))
        return out[:count.value]

    def close(self):
        if self._handle:
            lib.todre_relevance_destroy(self._handle)
            self._handle = ctypes.c_void_p()


def _host_types(types):
    if hasattr(types, "detach"):
        types = types.detach().cpu()
    try:
        arr = np.asarray(types)
    except (TypeError, ValueError) as exc:
        raise invalid(f"types: {exc}") from exc
    if arr.dtype.kind not in "iub":
        raise invalid(f"types: expected integer token types, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() > 255):
        raise invalid("types: values must be 0 (system), 1 (visual) or 2 (text)")
    return np.ascontiguousarray(arr, dtype=np.uint8)
