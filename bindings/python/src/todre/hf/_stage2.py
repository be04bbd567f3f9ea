"""Stage 2 inside a transformers decoder: probe, decide, drop visual tokens.

Hooks only; the model keeps its attention implementation (sdpa or eager):

* a forward pre-hook on the top-level model sees each forward's input_ids and
  attention mask; a prefill (empty cache) starts a new decision and sets the
  token types (VISUAL = image/video placeholders, SYSTEM = before the first
  one, TEXT = the rest);
* at a probe layer, a forward hook on self_attn recomputes that layer's
  post-RoPE Q and K from the attention input (two projections, one layer,
  prefill only) and hands them to todre.Relevance.observe_qk (the fused
  online-softmax path: no attention matrix is materialised);
* when a sequence decides DROP at layer l, a forward hook on decoder layer l
  removes its visual positions from the hidden states. Layers after l then run
  on a re-packed layout (left padded): pre-hooks hand them the matching
  attention mask, position embeddings and position ids, so their KV cache
  never holds the dropped tokens, during prefill and every decoding step.
  Layers up to l keep their full cache, as the method prescribes.
"""

import sys

import torch

import todre

SUPPORTED_ATTENTION = ("sdpa", "eager")


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


class Stage2:
    """The stage-2 machinery for one model (see module docstring)."""

    def __init__(self, top, layers, visual_ids, tau, probe_layers, schedule, attn_impl):
        if attn_impl not in SUPPORTED_ATTENTION:
            raise todre.TodreError(
                todre.Status.UNSUPPORTED,
                f"stage 2: attention implementation {attn_impl!r} is not supported "
                f"(use one of {SUPPORTED_ATTENTION}, or stage2=False)")
        self.layers = layers
        self.num_layers = len(layers)
        self.visual_ids = list(visual_ids)
        self.tau = tau
        self.probe_layers = probe_layers
        self.schedule = schedule
        self.eager = attn_impl == "eager"
        self._handles = []
        self._reset()
        probe = todre.Relevance(self.num_layers, tau=tau, probe_layers=probe_layers,
                                schedule=schedule)  # validates the settings once
        first = min(probe_layers) if probe_layers else self.num_layers * 7 // 8
        self._probe_candidates = [j for j in range(self.num_layers)
                                  if probe.is_probe(j) or (schedule == "until-drop"
                                                           and j >= first)]
        probe.close()
        self._install(top)

    # -- lifecycle ----------------------------------------------------------
    def _install(self, top):
        h = self._handles
        h.append(top.register_forward_pre_hook(self._begin, with_kwargs=True))
        for j in self._probe_candidates:
            attn = self.layers[j].self_attn
            h.append(attn.register_forward_hook(self._make_probe(j), with_kwargs=True))
        for j, layer in enumerate(self.layers):
            h.append(layer.register_forward_pre_hook(self._make_pre(j), with_kwargs=True))
            h.append(layer.register_forward_hook(self._make_post(j)))

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _reset(self):
        self.active = False
        self.last = {}
        self.rels = []
        self.types = None
        self.layouts = {}        # first layer index -> Layout used from there on
        self.dropped_at = {}     # seq -> layer
        self.prefill_len = 0

    # -- per forward ---------------------------------------------------------
    def _begin(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length() > 0:
            return None                     # a decoding step: keep the prefill's layouts
        self._reset()
        if ids is not None and ids.dim() == 2 and ids.shape[1] > 1:
            self._start(ids, kwargs.get("attention_mask"))
        return None

    def _start(self, ids, mask):
        """A prefill: token types, one Relevance per sequence over its real positions."""
        if isinstance(mask, torch.Tensor) and mask.dim() == 2:
            valid = mask.bool()
        else:
            valid = torch.ones_like(ids, dtype=torch.bool)
        types = self._token_types(ids, valid)
        visual = ((types == todre.TokenType.VISUAL) & valid).sum(-1)
        if not bool(visual.any()):
            return                          # a text-only prompt: nothing to drop
        self.active = True
        self.prefill_len = ids.shape[1]
        self.valid, self.types = valid, types
        for b in range(ids.shape[0]):
            rel = todre.Relevance(self.num_layers, tau=self.tau, probe_layers=self.probe_layers,
                                  schedule=self.schedule)
            rel.set_types(types[b][valid[b]].cpu())
            self.rels.append(rel)
        self.last = {"visual_tokens": [int(v) for v in visual],
                     "drop_layer": [None] * ids.shape[0], "ratios": {}}

    def _token_types(self, ids, valid):
        visual = torch.zeros_like(ids, dtype=torch.bool)
        for tok in self.visual_ids:
            visual |= ids == tok
        visual &= valid
        seen = torch.cumsum(visual.long(), dim=1) > 0
        types = torch.full_like(ids, todre.TokenType.TEXT, dtype=torch.uint8)
        types[~seen] = todre.TokenType.SYSTEM
        types[visual] = todre.TokenType.VISUAL
        return types

    def layout_for(self, j):
        starts = [s for s in self.layouts if s <= j]
        return self.layouts[max(starts)] if starts else None

    # -- probe ---------------------------------------------------------------
    def _make_probe(self, j):
        def hook(attn, args, kwargs, output):
            if not self.active or not self.rels or self._decoding(j, args, kwargs):
                return None
            seqs = [b for b, rel in enumerate(self.rels) if rel.is_probe(j)]
            if seqs:
                self._observe(j, attn, args, kwargs, seqs)
            return None
        return hook

    def _decoding(self, j, args, kwargs):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        layout = self.layout_for(j)
        length = layout.length if layout is not None else self.prefill_len
        return hidden is None or hidden.shape[1] != length

    def _observe(self, j, attn, args, kwargs, seqs):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        q, k = _post_rope_qk(attn, hidden, kwargs["position_embeddings"])
        if q.is_cuda and "cuda" not in todre.available_backends():
            q, k = q.float().cpu(), k.float().cpu()
        layout = self.layout_for(j)
        valid = layout.valid if layout is not None else self.valid
        scale = float(getattr(attn, "scaling", 0.0) or 0.0)
        for b in seqs:
            qb, kb = _real_slots(q[b], k[b], valid[b].to(q.device))
            decision = self.rels[b].observe_qk(j, qb, kb, scale=scale)[0]
            self.last["ratios"][(b, j)] = self.rels[b].ratios(j)
            if decision == todre.Decision.DROP:
                self.dropped_at[b] = j
                self.last["drop_layer"][b] = j

    # -- drop: re-pack after the drop layer ------------------------------------
    def _make_post(self, j):
        def hook(layer, args, output):
            if not self.active or j not in self.dropped_at.values() or (j + 1) in self.layouts:
                return None
            hidden = output[0] if isinstance(output, tuple) else output
            if hidden.shape[1] != self._length_at(j):
                return None
            new = self._repack(j)
            self.layouts[j + 1] = new
            gathered = _gather_slots(hidden, self._slot_index(j, new), new.valid)
            return (gathered,) + tuple(output[1:]) if isinstance(output, tuple) else gathered
        return hook

    def _length_at(self, j):
        layout = self.layout_for(j)
        return layout.length if layout is not None else self.prefill_len

    def _repack(self, j):
        """New layout after layer j: drop the visual slots of sequences deciding at j."""
        cur = self.layout_for(j)
        B = self.valid.shape[0]
        device = self.valid.device
        if cur is None:
            orig = torch.arange(self.prefill_len, device=device).expand(B, -1)
            valid = self.valid
        else:
            orig, valid = cur.orig.to(device), cur.valid.to(device)
        rows = []
        for b in range(B):
            keep = valid[b].clone()
            if self.dropped_at.get(b) == j:
                # the library's keep positions index b's real positions
                real = torch.nonzero(self.valid[b]).flatten()
                kept = real[torch.from_numpy(self.rels[b].keep_positions()).to(real.device)]
                survive = torch.zeros(self.prefill_len, dtype=torch.bool, device=device)
                survive[kept.to(device)] = True
                keep &= survive[orig[b]]
            rows.append(orig[b][keep])
        length = max(r.numel() for r in rows)
        new_orig = torch.zeros(B, length, dtype=torch.long, device=device)
        new_valid = torch.zeros(B, length, dtype=torch.bool, device=device)
        for b, r in enumerate(rows):
            new_orig[b, length - r.numel():] = r
            new_valid[b, length - r.numel():] = True
        return Layout(new_orig, new_valid)

    def _slot_index(self, j, new):
        """For every slot of `new`, its slot in the layout of layer j."""
        cur = self.layout_for(j)
        if cur is None:
            return new.orig
        # map original position -> current slot, per row
        B = new.orig.shape[0]
        lookup = torch.zeros(B, self.prefill_len, dtype=torch.long, device=new.orig.device)
        for b in range(B):
            slots = torch.nonzero(cur.valid[b]).flatten().to(new.orig.device)
            lookup[b, cur.orig[b][cur.valid[b]].to(new.orig.device)] = slots
        return lookup.gather(1, new.orig)

    # -- layers after the drop -------------------------------------------------
    def _make_pre(self, j):
        def hook(layer, args, kwargs):
            if not self.active:
                return None
            layout = self.layout_for(j)
            if layout is None:
                return None
            hidden = args[0] if args else kwargs["hidden_states"]
            q_len = hidden.shape[1]
            cache = kwargs.get("past_key_values")
            past = _layer_cache_len(cache, j)
            kwargs = dict(kwargs)
            kwargs["attention_mask"] = self._mask(layout, past, q_len, hidden)
            if past == 0:   # prefill: positions follow the kept slots
                kwargs["position_embeddings"] = _rope_for(layout, kwargs["position_embeddings"])
                pid = kwargs.get("position_ids")
                if isinstance(pid, torch.Tensor) and pid.shape[-1] == self.prefill_len:
                    kwargs["position_ids"] = layout.gather_seq(pid, pid.dim() - 1)
            return args, kwargs
        return hook

    def _mask(self, layout, past, q_len, hidden):
        """[B, 1, q_len, past + q_len] mask of this layer's keys: valid prefill slots,
        then every decoded token, causally. A padding query sees itself only (a fully
        masked row would give NaN)."""
        device = hidden.device
        B, L = layout.valid.shape
        kv = past + q_len
        key_ok = torch.ones(B, kv, dtype=torch.bool, device=device)
        key_ok[:, :L] = layout.valid.to(device)
        q_abs = past + torch.arange(q_len, device=device)
        k_idx = torch.arange(kv, device=device)
        allowed = (k_idx[None, :] <= q_abs[:, None])[None] & key_ok[:, None, :]
        if past < L:   # prefill: padding queries attend to themselves
            q_pad = ~key_ok[:, past:past + q_len]
            diag = k_idx[None, None, :] == q_abs[None, :, None]
            allowed |= q_pad[:, :, None] & diag
        allowed = allowed[:, None]
        if not self.eager:
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
