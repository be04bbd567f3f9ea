"""Stage 2 inside a transformers decoder: probe, decide, drop visual tokens.

Hooks only; the model keeps its attention implementation (sdpa or eager, read
at every prefill, so set_attn_implementation() after enable() is followed).
The hooks are installed once, at enable(), and shared by every caller; they
act only inside an enabled generate(), on the state of that call (a Call, see
_call.py), so concurrent calls from several threads never meet. A plain
forward (training, labels, scoring) runs the unmodified model, and inside a
compiled graph the hooks do nothing at all (no guard, no recompilation).

* a forward pre-hook on the top-level model sees each forward's input ids (or
  embeddings) and attention mask; a prefill (no cache, or an empty one) starts
  a new decision and sets the token types (VISUAL = image/video placeholders,
  SYSTEM = before the first one, TEXT = the rest);
* at a probe layer, a forward hook on self_attn recomputes that layer's
  post-RoPE Q and K from the attention input (two projections, one layer,
  prefill only) and hands them to todre.Relevance.observe_qk (the fused
  online-softmax path: no attention matrix is materialised);
* when a sequence decides DROP at layer l, a forward hook on decoder layer l
  removes its visual positions from the hidden states. Layers after l then run
  on a re-packed layout (left padded): pre-hooks hand them the matching
  attention mask, position embeddings and position ids, so their KV cache
  never holds the dropped tokens, during prefill, every decoding step and
  every later turn that continues from the cache. Layers up to l keep their
  full cache, as the method prescribes. These layer hooks are installed only
  when a drop is possible (tau > 0).

The per-prefill state (decisions and layouts) is attached to the KV cache the
prefill fills (cache._todre_stage2), so decoding steps, continuations from
that cache, assistant models with their own caches and interleaved calls each
find the layouts of their own prefill. The Relevance objects are closed when
the prefill forward ends.
"""

import sys

import torch

import todre

from ._call import active


class Layout:
    """Which original prefill positions a layer's sequence slots hold.

    orig [B, L] original position per slot (0 in padding), valid [B, L]."""

    def __init__(self, orig, valid):
        self.orig = orig
        self.valid = valid
        self._rope = None

    @property
    def length(self):
        return self.orig.shape[1]

    def gather_seq(self, x, dim):
        """x[..., orig, ...] along `dim` (x's batch may be 1: broadcast first)."""
        shape = list(x.shape)
        shape[0] = self.orig.shape[0]
        x = x.expand(*shape) if x.shape[0] == 1 else x
        idx = self.orig.to(x.device)
        view = [idx.shape[0]] + [1] * (x.dim() - 1)
        view[dim] = idx.shape[1]
        expand = list(x.shape)
        expand[dim] = idx.shape[1]
        return x.gather(dim, idx.view(view).expand(expand))


class Prefill:
    """The stage-2 state of one prefill (B rows of prefill_len columns)."""

    def __init__(self, valid, types, rels, rep):
        self.valid = valid
        self.types = types
        self.prefill_len = valid.shape[1]
        self.rels = rels              # representative row -> Relevance (during the prefill)
        self.rep = rep                # row -> its representative row (identical rows share)
        self.layouts = {}             # first layer index -> Layout used from there on
        self.dropped_at = {}          # row -> layer
        self.kept = {}                # representative row -> kept real positions
        self.in_prefill = True

    def layout_for(self, j):
        starts = [s for s in self.layouts if s <= j]
        return self.layouts[max(starts)] if starts else None

    def close(self):
        for rel in self.rels.values():
            rel.close()
        self.rels = {}
        self.in_prefill = False
        for layout in self.layouts.values():
            layout._rope = None

    def __getstate__(self):           # copy.deepcopy of a cache: no C handles
        state = dict(self.__dict__)
        state["rels"] = {}
        return state


class _Hook:
    """A hook that calls back into its Stage2 (an object, not a closure, so that
    copy.deepcopy of the model gives hooks of the clone's own Stage2). Inside a
    compiled graph it returns at once: generate()'s compiled decoding steps and
    compiled plain forwards see neither its state nor a guard on it."""

    def __init__(self, owner, kind, j=None):
        self.owner = owner
        self.kind = kind
        self.j = j

    def __call__(self, *args):
        if torch.compiler.is_compiling():
            return None
        return getattr(self.owner, self.kind)(self.j, *args)


class Stage2:
    """The stage-2 machinery for one model (see module docstring). Holds only
    what enable() fixed; what a call decides lives in that call's Call, found
    through self.key (the model's todre state)."""

    def __init__(self, top, layers, visual_ids, tau, probe_layers, schedule):
        self.layers = layers
        self.num_layers = len(layers)
        self.visual_ids = list(visual_ids)
        self.embed = top.get_input_embeddings()
        self.tau = tau
        self.probe_layers = probe_layers
        self.schedule = schedule
        self.key = None               # the owner whose Call the hooks act on (set by enable())
        self._handles = []
        probe = todre.Relevance(self.num_layers, tau=tau, probe_layers=probe_layers,
                                schedule=schedule)  # validates the settings once
        first = min(probe_layers) if probe_layers else self.num_layers * 7 // 8
        self._probe_candidates = [j for j in range(self.num_layers)
                                  if probe.is_probe(j) or (schedule == "until-drop"
                                                           and j >= first)]
        probe.close()
        self.can_drop = tau is None or float(tau) > 0.0
        self._install(top)

    def attention_implementation(self):
        cfg = self.layers[0].self_attn.config
        return getattr(cfg, "_attn_implementation", None) or "sdpa"

    # -- lifecycle ----------------------------------------------------------
    def _install(self, top):
        h = self._handles
        h.append(top.register_forward_pre_hook(_Hook(self, "_begin"), with_kwargs=True))
        h.append(top.register_forward_hook(_Hook(self, "_end"), with_kwargs=True))
        for j in self._probe_candidates:
            attn = self.layers[j].self_attn
            h.append(attn.register_forward_hook(_Hook(self, "_probe", j), with_kwargs=True))
        if not self.can_drop:
            return                          # tau 0: nothing is ever re-packed
        for j, layer in enumerate(self.layers):
            h.append(layer.register_forward_pre_hook(_Hook(self, "_pre", j), with_kwargs=True))
            h.append(layer.register_forward_hook(_Hook(self, "_post", j)))

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- per forward ---------------------------------------------------------
    def _begin(self, _, module, args, kwargs):
        call = active(self.key)
        if call is None:
            return None                     # not inside an enabled generate(): the plain model
        call.prefill = None
        mask = kwargs.get("attention_mask")
        call.forward_mask = mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        call.eager = self.attention_implementation() == "eager"   # followed per forward
        cache = kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length() > 0:
            state = getattr(cache, "_todre_stage2", None)
            if state is not None and state.layouts:
                call.prefill = state        # a decoding step / continuation
            return None
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        if ids is not None and ids.dim() == 2:
            visual = torch.zeros_like(ids, dtype=torch.bool)
            for tok in self.visual_ids:
                visual |= ids == tok
            rows = ids
        elif isinstance(embeds, torch.Tensor) and embeds.dim() == 3:
            visual = torch.zeros(embeds.shape[:2], dtype=torch.bool, device=embeds.device)
            for tok in self.visual_ids:
                e = self.embed(torch.tensor(tok, device=embeds.device)).to(embeds.dtype)
                visual |= (embeds == e).all(-1)
            rows = embeds
        else:
            return None
        if visual.shape[1] < 2:
            return None
        self._start(call, rows, visual, call.forward_mask, cache)
        return None

    def _end(self, _, module, args, kwargs, output):
        call = active(self.key)
        if call is None:
            return None
        state, call.prefill, call.forward_mask = call.prefill, None, None
        if state is None or not state.in_prefill:
            return None
        state.close()
        cache = getattr(output, "past_key_values", None)
        if cache is None:
            cache = kwargs.get("past_key_values")
        if cache is not None:
            try:
                cache._todre_stage2 = state if state.layouts else None
            except AttributeError:
                pass
        return None

    def _start(self, call, rows, visual, mask, cache):
        """A prefill: token types; one Relevance per distinct eligible sequence over
        its real positions. A sequence is eligible for a drop when it has visual
        and non-visual real tokens and its last real token is not visual (the
        next token is predicted from it, so it must survive)."""
        if mask is not None:
            valid = mask.bool()
        else:
            valid = torch.ones(visual.shape, dtype=torch.bool, device=visual.device)
        visual = visual & valid
        types = self._token_types(visual)
        if cache is not None:
            try:
                cache._todre_stage2 = None
            except AttributeError:
                pass
        count = visual.sum(-1)
        call.record = call.depth == 1
        if call.record:
            call.stage2 = {"visual_tokens": [int(v) for v in count],
                           "drop_layer": [None] * visual.shape[0], "ratios": {}}
        if not bool(count.any()):
            return                          # a text-only prompt: nothing to drop
        B, L = visual.shape
        last_real = (valid.long() * torch.arange(1, L + 1, device=valid.device)).argmax(-1)
        rels, rep = {}, {}
        for b in range(B):
            n_real = int(valid[b].sum())
            eligible = 0 < int(count[b]) < n_real and not bool(visual[b, last_real[b]])
            if not eligible:
                continue
            same = next((r for r in rels if torch.equal(valid[r], valid[b])
                         and torch.equal(rows[r], rows[b])), None)
            if same is not None:
                rep[b] = same
                continue
            rel = todre.Relevance(self.num_layers, tau=self.tau, probe_layers=self.probe_layers,
                                  schedule=self.schedule)
            rel.set_types(types[b][valid[b]].cpu())
            rels[b] = rel
            rep[b] = b
        if not rels:
            return
        call.prefill = Prefill(valid, types, rels, rep)

    def _token_types(self, visual):
        seen = torch.cumsum(visual.long(), dim=1) > 0
        types = torch.full(visual.shape, todre.TokenType.TEXT, dtype=torch.uint8,
                           device=visual.device)
        types[~seen] = todre.TokenType.SYSTEM
        types[visual] = todre.TokenType.VISUAL
        return types

    # -- probe ---------------------------------------------------------------
    def _probe(self, j, attn, args, kwargs, output):
        call = active(self.key)
        state = None if call is None else call.prefill
        if state is None or not state.in_prefill:
            return None
        seqs = [b for b, rel in state.rels.items()
                if b not in state.kept and rel.is_probe(j)]
        if seqs:
            self._observe(call, state, j, attn, args, kwargs, seqs)
        return None

    def _observe(self, call, state, j, attn, args, kwargs, seqs):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        q, k = _post_rope_qk(attn, hidden, kwargs["position_embeddings"])
        if q.is_cuda and "cuda" not in todre.available_backends():
            q, k = q.float().cpu(), k.float().cpu()
        layout = state.layout_for(j)
        valid = layout.valid if layout is not None else state.valid
        scale = float(getattr(attn, "scaling", 0.0) or 0.0)
        for b in seqs:
            qb, kb = _real_slots(q[b], k[b], valid[b].to(q.device))
            rel = state.rels[b]
            decision = rel.observe_qk(j, qb, kb, scale=scale)[0]
            ratios = rel.ratios(j)
            dropped = decision == todre.Decision.DROP and self.can_drop
            if dropped:
                real = torch.nonzero(state.valid[b]).flatten()
                state.kept[b] = real[torch.from_numpy(rel.keep_positions()).to(real.device)]
            for row, r in state.rep.items():
                if r != b:
                    continue
                if call.record:
                    call.stage2["ratios"][(row, j)] = ratios
                if dropped:
                    state.dropped_at[row] = j
                    if call.record:
                        call.stage2["drop_layer"][row] = j

    # -- drop: re-pack after the drop layer ------------------------------------
    def _post(self, j, layer, args, output):
        call = active(self.key)
        state = None if call is None else call.prefill
        if state is None or not state.in_prefill or (j + 1) in state.layouts \
                or j not in state.dropped_at.values():
            return None
        hidden = output[0] if isinstance(output, tuple) else output
        cur = state.layout_for(j)
        if hidden.shape[1] != (cur.length if cur is not None else state.prefill_len):
            return None
        new = self._repack(state, j)
        state.layouts[j + 1] = new
        gathered = _gather_slots(hidden, self._slot_index(state, j, new), new.valid)
        return (gathered,) + tuple(output[1:]) if isinstance(output, tuple) else gathered

    def _repack(self, state, j):
        """New layout after layer j: drop the visual slots of sequences deciding at j."""
        cur = state.layout_for(j)
        B = state.valid.shape[0]
        device = state.valid.device
        if cur is None:
            orig = torch.arange(state.prefill_len, device=device).expand(B, -1)
            valid = state.valid
        else:
            orig, valid = cur.orig.to(device), cur.valid.to(device)
        rows = []
        for b in range(B):
            keep = valid[b].clone()
            if state.dropped_at.get(b) == j:
                survive = torch.zeros(state.prefill_len, dtype=torch.bool, device=device)
                survive[state.kept[state.rep[b]].to(device)] = True
                keep &= survive[orig[b]]
            rows.append(orig[b][keep])
        length = max(r.numel() for r in rows)
        new_orig = torch.zeros(B, length, dtype=torch.long, device=device)
        new_valid = torch.zeros(B, length, dtype=torch.bool, device=device)
        for b, r in enumerate(rows):
            new_orig[b, length - r.numel():] = r
            new_valid[b, length - r.numel():] = True
        return Layout(new_orig, new_valid)

    def _slot_index(self, state, j, new):
        """For every slot of `new`, its slot in the layout of layer j."""
        cur = state.layout_for(j)
        if cur is None:
            return new.orig
        B = new.orig.shape[0]
        lookup = torch.zeros(B, state.prefill_len, dtype=torch.long, device=new.orig.device)
        for b in range(B):
            slots = torch.nonzero(cur.valid[b]).flatten().to(new.orig.device)
            lookup[b, cur.orig[b][cur.valid[b]].to(new.orig.device)] = slots
        return lookup.gather(1, new.orig)

    # -- layers after the drop -------------------------------------------------
    def _pre(self, j, layer, args, kwargs):
        call = active(self.key)
        state = None if call is None else call.prefill
        if state is None:
            return None
        layout = state.layout_for(j)
        if layout is None:
            return None
        hidden = args[0] if args else kwargs["hidden_states"]
        q_len = hidden.shape[1]
        cache = kwargs.get("past_key_values")
        past = _layer_cache_len(cache, j)
        kwargs = dict(kwargs)
        kwargs["attention_mask"] = self._mask(call, state, layout, past, q_len, hidden)
        if past == 0:   # prefill: positions follow the kept slots
            kwargs["position_embeddings"] = _rope_for(layout, kwargs["position_embeddings"])
            pid = kwargs.get("position_ids")
            if isinstance(pid, torch.Tensor) and pid.shape[-1] == state.prefill_len:
                kwargs["position_ids"] = layout.gather_seq(pid, pid.dim() - 1)
        return args, kwargs

    def _mask(self, call, state, layout, past, q_len, hidden):
        """[B, 1, q_len, past + q_len] mask of this layer's keys: the valid prefill
        slots of the layout, then every later token as the forward's own 2-D mask
        has it (a continued turn may hold padding), causally. A padding query sees
        itself only (a fully masked row would give NaN)."""
        device = hidden.device
        B, L = layout.valid.shape
        kv = past + q_len
        key_ok = torch.ones(B, kv, dtype=torch.bool, device=device)
        key_ok[:, :L] = layout.valid.to(device)
        later = call.forward_mask
        if later is not None and later.shape == (B, state.prefill_len + kv - L):
            key_ok[:, L:] = later[:, state.prefill_len:].to(device).bool()
        q_abs = past + torch.arange(q_len, device=device)
        k_idx = torch.arange(kv, device=device)
        allowed = (k_idx[None, :] <= q_abs[:, None])[None] & key_ok[:, None, :]
        q_pad = ~key_ok[:, past:past + q_len]          # (no host sync: always applied)
        diag = k_idx[None, None, :] == q_abs[None, :, None]
        allowed |= q_pad[:, :, None] & diag
        allowed = allowed[:, None]
        if not call.eager:
            return allowed
        neg = torch.finfo(hidden.dtype).min
        return torch.zeros(allowed.shape, dtype=hidden.dtype, device=device).masked_fill(
            ~allowed, neg)


def _real_slots(q, k, valid):
    """q, k [H, L, dh] restricted to the real slots: a view when they are a
    suffix (left padding, the usual case), else a gathered copy."""
    n = int(valid.sum())
    if bool(valid[q.shape[1] - n:].all()):
        return q[:, q.shape[1] - n:], k[:, k.shape[1] - n:]
    return q[:, valid], k[:, valid]


def _layer_cache_len(cache, j):
    if cache is None:
        return 0
    layers = getattr(cache, "layers", None)
    if layers is not None and j < len(layers):
        return int(layers[j].get_seq_length())
    return int(cache.get_seq_length(j))


def _gather_slots(hidden, index, valid):
    idx = index.to(hidden.device)[..., None].expand(-1, -1, hidden.shape[-1])
    return hidden.gather(1, idx) * valid.to(hidden.device)[..., None].to(hidden.dtype)


def _rope_for(layout, position_embeddings):
    if layout._rope is None:
        cos, sin = position_embeddings
        layout._rope = (layout.gather_seq(cos, cos.dim() - 2),
                        layout.gather_seq(sin, sin.dim() - 2))
    return layout._rope


def _post_rope_qk(attn, hidden, position_embeddings):
    """The layer's post-RoPE queries [B, H, L, dh] and keys [B, H_kv, L, dh],
    recomputed exactly as the attention module computes them."""
    B, L, _ = hidden.shape
    hd = attn.head_dim
    q = attn.q_proj(hidden).view(B, L, -1, hd)
    k = attn.k_proj(hidden).view(B, L, -1, hd)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    cos, sin = position_embeddings
    rope = getattr(sys.modules[type(attn).__module__], "apply_rotary_pos_emb")
    return rope(q, k, cos, sin)
