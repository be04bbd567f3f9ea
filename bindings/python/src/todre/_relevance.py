"""Stage 2: todre.Relevance, the per-prefill drop decision."""

import contextlib
import ctypes

import numpy as np

from ._api import Decision, Reset, Schedule, Status
from ._context import context_for
from ._enums import RelevanceParam, parse
from ._errors import TodreError, check, invalid
from ._handle import OwnsHandle, serialized
from ._ints import c_double, int64_array
from ._lib import lib
from ._params import _Kind
from ._selection import _integer, _prepare, _signature
from ._tensor import Borrowed, is_host

_PARAMS = _Kind("relevance", RelevanceParam)


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
        """The raw todre_relevance*; invalid after close()."""
        if not self._handle:
            raise TodreError(Status.STATE, "relevance: already closed")
        return self._handle

    @serialized
    def set_param(self, param, value):
        """Set a relevance parameter (todre.RelevanceParam / todre.Param or a name)."""
        _PARAMS.set(self.handle, param, value)

    @serialized
    def get_param(self, param):
        return _PARAMS.get(self.handle, param)

    @property
    def tau(self):
        return self.get_param(RelevanceParam.TAU)

    @tau.setter
    def tau(self, value):
        self.set_param(RelevanceParam.TAU, c_double(value, "tau"))

    @property
    def schedule(self):
        return Schedule(self.get_param(RelevanceParam.SCHEDULE))

    def set_schedule(self, schedule):
        self.set_param(RelevanceParam.SCHEDULE, parse(Schedule, schedule, "schedule"))

    @serialized
    def set_probe_layers(self, layers):
        """Probe layers (host ints, any order, duplicates ignored)."""
        arr = np.atleast_1d(int64_array(layers, "probe_layers"))
        if arr.ndim != 1:
            raise invalid(f"probe_layers: expected a list of integers, got {layers!r}")
        with Borrowed(arr, "probe_layers") as b:
            check(lib.todre_relevance_set_probe_layers(self.handle, b.ref))

    @property
    @serialized
    def probe_layers(self):
        """The probe layers, ascending and distinct (list of int)."""
        count = ctypes.c_int64()
        check(lib.todre_relevance_get_probe_layers(self.handle, None, ctypes.byref(count)))
        out = np.empty(count.value, dtype=np.int64)
        with Borrowed(out, "out", writable=True) as b:
            check(lib.todre_relevance_get_probe_layers(self.handle, b.ref, ctypes.byref(count)))
        return out[:count.value].tolist()

    @serialized
    def is_probe(self, layer, seq=0):
        """Whether `layer` will be probed for sequence `seq` (given decisions so far)."""
        out = ctypes.c_int()
        check(lib.todre_relevance_is_probe(self.handle, _integer(seq, "seq"),
                                           _integer(layer, "layer"), ctypes.byref(out)))
        return bool(out.value)

    @serialized
    def set_types(self, types):
        """Token types per position: [K] (all sequences) or [batch, K], values
        0 SYSTEM, 1 VISUAL, 2 TEXT (any integer array; copied as uint8)."""
        arr = _host_types(types, self)
        with Borrowed(arr, "types") as t:
            check(lib.todre_relevance_set_types(self.handle, t.ref))

    @serialized
    def set_layout(self, n_system, n_visual, n_text):
        """Types for the contiguous layout [system | visual | text]."""
        check(lib.todre_relevance_set_layout(self.handle, _integer(n_system, "n_system"),
                                             _integer(n_visual, "n_visual"),
                                             _integer(n_text, "n_text")))

    @serialized
    def reset(self, what="state"):
        """'state' (default) forgets every observation and decision (keeps layers,
        tau, schedule, types); 'params' restores tau, the schedule and the default
        probe layers; 'all' both."""
        check(lib.todre_relevance_reset(self.handle, int(parse(Reset, what, "what"))))

    def _ctx(self, like):
        return self.context if self.context is not None else context_for(like)

    def observe_probs(self, layer, attn):
        """Observe attention probabilities [H, Q, K] or [B, H, Q, K] at `layer`.

        Returns one todre.Decision per sequence.
        """
        attn = _prepare(attn, "attn")
        ctx = self._ctx(attn)
        decisions = np.zeros(self.batch, dtype=np.int32)
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._lock)          # this object, then its context
            stack.enter_context(ctx._lock)
            stream = ctx.follow(attn)
            a = stack.enter_context(Borrowed(attn, "attn", stream))
            d = stack.enter_context(Borrowed(decisions, "decisions", writable=True))
            check(lib.todre_relevance_observe_probs(ctx.handle, self.handle,
                                                    _integer(layer, "layer"), a.ref, d.ref),
                  ctx.handle)
        return [Decision(int(x)) for x in decisions]

    def observe_qk(self, layer, q, k, scale=0.0):
        """Observe post-RoPE queries [(B,) H, Q, dh] and keys [(B,) H_kv, K, dh].

        scale 0 means 1/sqrt(dh). Returns one todre.Decision per sequence.
        """
        q = _prepare(q, "q")
        k = _prepare(k, "k")
        ctx = self._ctx(q)
        decisions = np.zeros(self.batch, dtype=np.int32)
        scale = c_double(scale, "scale")
        with contextlib.ExitStack() as stack:
            stack.enter_context(self._lock)          # this object, then its context
            stack.enter_context(ctx._lock)
            stream = ctx.follow(q)
            qb = stack.enter_context(Borrowed(q, "q", stream))
            kb = stack.enter_context(Borrowed(k, "k", stream))
            d = stack.enter_context(Borrowed(decisions, "decisions", writable=True))
            check(lib.todre_relevance_observe_qk(ctx.handle, self.handle,
                                                 _integer(layer, "layer"), qb.ref, kb.ref,
                                                 scale, d.ref), ctx.handle)
        return [Decision(int(x)) for x in decisions]

    @serialized
    def ratios(self, layer, seq=0):
        """(alpha_t2v, alpha_v2t) observed at `layer` for `seq` (TodreError STATE if
        that layer was not probed)."""
        t2v, v2t = ctypes.c_double(), ctypes.c_double()
        check(lib.todre_relevance_ratios(self.handle, _integer(seq, "seq"),
                                         _integer(layer, "layer"), ctypes.byref(t2v),
                                         ctypes.byref(v2t)))
        return t2v.value, v2t.value

    @serialized
    def drop_layer(self, seq=0):
        """The layer that decided to drop for `seq`, or None."""
        out = ctypes.c_int64()
        check(lib.todre_relevance_drop_layer(self.handle, _integer(seq, "seq"),
                                             ctypes.byref(out)))
        return None if out.value < 0 else out.value

    @serialized
    def keep_positions(self, seq=0):
        """Every non-visual position, ascending (NumPy int64): what to keep after a drop."""
        seq = _integer(seq, "seq")
        count = ctypes.c_int64()
        check(lib.todre_relevance_keep_positions(self.handle, seq, None, ctypes.byref(count)))
        out = np.empty(count.value, dtype=np.int64)
        with Borrowed(out, "out", writable=True) as b:
            check(lib.todre_relevance_keep_positions(self.handle, seq, b.ref,
                                                     ctypes.byref(count)))
        return out[:count.value]

    @serialized
    def signature(self):
        """The canonical text of the settings that decide this handle's drops
        (todre_relevance_signature): equal exactly when two handles decide
        alike on every input."""
        return _signature(lib.todre_relevance_signature, self.handle)

    @serialized
    def close(self):
        if self._handle:
            lib.todre_relevance_destroy(self._handle)
            self._handle = ctypes.c_void_p()


def _host_types(types, rel):
    if hasattr(types, "detach"):
        types = types.detach()
    if hasattr(types, "__dlpack_device__") and not is_host(types):
        types = rel._ctx(types).to_host(types, "types")   # todre_context_copy
    try:
        arr = np.asarray(types)
    except (TypeError, ValueError) as exc:
        raise invalid(f"types: {exc}") from exc
    if arr.dtype == object:  # Python ints beyond NumPy's integer types
        arr = int64_array(arr, "types")
    if arr.dtype.kind not in "iub":
        raise invalid(f"types: expected integer token types, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() > 255):
        raise invalid("types: values must be 0 (system), 1 (visual) or 2 (text)")
    return np.ascontiguousarray(arr, dtype=np.uint8)
