"""The generate() that todre.hf.enable() installs.

Order of business for one call:

1. refusals (TodreError UNSUPPORTED) for what stage 2 cannot follow: another
   attention implementation, a static / quantized / offloaded cache, compiled
   forwards, chunked prefill, continuous batching;
2. the call's own state (a Call, see _call.py): everything below reads and
   writes only that, so calls running at the same time in other threads never
   interfere;
3. a call continuing from a KV cache: the caller's sequences are translated to
   the pruned sequence the cache holds (PromptMap), images the new turn adds
   are selected and pruned like a first turn's, and the output is translated
   back;
4. a call with images (pixel_values, or pre-encoded mm_encoder_outputs) and
   stage 1 on: features, selection, the pruned prompt, and generate() on it;
5. anything else: the model's own generate() (stage 2 still acts in prefills).
"""

import torch

from ._prompt import (PromptMap, cache_length, dropped_placeholders, effective_mask,
                      in_callers_terms, invalid, keyword_call, pad_token, placeholder_mask,
                      translate_lengths, unsupported)
from ._select import select_each

# cache implementations a stage-2 drop can follow (layers of their own length)
DYNAMIC_CACHES = (None, "dynamic")


def generate(model, state, adapter, args, kwargs):
    kw = keyword_call(args, kwargs)
    original = state.original(model)
    if state.stage2 is not None:
        check_stage2_call(model, state, kw)
    if kw.get("cache_implementation") == "paged":
        raise unsupported("generate(): cache_implementation='paged' (continuous batching) is "
                          "not supported by todre.hf; disable it first")
    with state.call() as call:
        if call.depth > 1:
            # a generate() inside an enabled one (the model as its own assistant): its
            # prompt and features are the pruned ones already
            return original(**kw)
        past = kw.get("past_key_values")
        cached = cache_length(past)
        if past is not None and cached == 0:
            tag(None, past)                    # a cache reused for a new prompt
        new_images = state.settings.enabled and adapter.has_images(kw)
        if cached > 0:
            pmap = getattr(past, "_todre_prompt", None)
            if pmap is None and not new_images:
                return original(**kw)          # a cache of unpruned prompts: continue as is
            return _continue(model, state, call, adapter, pmap, original, kw, cached,
                             new_images)
        if not new_images:
            return original(**kw)
        return _stage1(model, state, call, adapter, original, kw)


def check_stage2_call(model, state, kw):
    """What a stage-2 drop cannot follow, refused before anything runs."""
    impl = state.stage2.attention_implementation()
    if impl not in ("sdpa", "eager"):
        raise unsupported(f"stage 2: attention implementation {impl!r} is not supported "
                          "(use 'sdpa' or 'eager', or enable(..., stage2=False))")
    if is_compiled(model):
        raise unsupported("stage 2: a compiled forward (torch.compile / model.compile()) "
                          "cannot run the stage-2 hooks; use enable(..., stage2=False)")
    gc = kw.get("generation_config")
    if kw.get("prefill_chunk_size") is not None or getattr(gc, "prefill_chunk_size", None) \
            or getattr(model.generation_config, "prefill_chunk_size", None):
        raise unsupported("stage 2: chunked prefill (prefill_chunk_size) is not supported; "
                          "use enable(..., stage2=False)")
    if state.stage2.can_drop:
        impl = cache_implementation(model, kw)
        if impl not in DYNAMIC_CACHES:
            raise unsupported(f"stage 2: cache_implementation={impl!r}: a drop needs the "
                              "default dynamic cache (layers after the drop hold fewer "
                              "tokens); use enable(..., stage2=False) or tau=0")
        past = kw.get("past_key_values")
        if past is not None and not is_dynamic_cache(past):
            raise unsupported(f"stage 2: past_key_values of type {type(past).__name__}: a drop "
                              "needs a DynamicCache; use enable(..., stage2=False) or tau=0")


def cache_implementation(model, kw):
    if kw.get("cache_implementation") is not None:
        return kw["cache_implementation"]
    for cfg in (kw.get("generation_config"), model.generation_config):
        if cfg is not None and getattr(cfg, "cache_implementation", None) is not None:
            return cfg.cache_implementation
    return None


def is_dynamic_cache(cache):
    from transformers.cache_utils import DynamicCache
    if type(cache) is not DynamicCache or getattr(cache, "offloading", False):
        return False
    return all(type(layer).__name__ == "DynamicLayer" for layer in getattr(cache, "layers", []))


def is_compiled(model):
    if getattr(model, "_compiled_call_impl", None) is not None:
        return True
    forward = model.__dict__.get("forward")
    return forward is not None and hasattr(forward, "_torchdynamo_orig_callable")


# -- stage 1 ----------------------------------------------------------------------
def _select_images(model, state, adapter, kw, is_img):
    """Encode the call's images (popping their inputs off kw), select each one's
    kept tokens and find the placeholder columns that leave: (features, kept
    indices, dropped [rows, columns of is_img])."""
    with torch.no_grad():
        feats, cls, pivot_range = adapter.encode(model, kw)
        kept = select_each(feats, cls, pivot_range, state.settings)
    drop = dropped_placeholders(is_img, [f.shape[0] for f in feats], kept)
    return feats, kept, drop


def _pruned_features(kw, feats, kept):
    from transformers.modeling_outputs import BaseModelOutputWithPooling
    pruned = [f[k.to(f.device)] for f, k in zip(feats, kept)]
    mm = dict(kw.get("mm_encoder_outputs") or {})
    mm["image"] = BaseModelOutputWithPooling(pooler_output=pruned)
    kw["mm_encoder_outputs"] = mm


def _record(call, feats, kept, reaching):
    call.stage1 = {"image_tokens": [int(f.shape[0]) for f in feats],
                   "kept_tokens": [int(k.numel()) for k in kept],
                   "kept_indices": [k.clone() for k in kept],
                   "llm_image_tokens": [int(v) for v in reaching]}


def _stage1(model, state, call, adapter, original, kw):
    ids, embeds = kw.get("input_ids"), kw.get("inputs_embeds")
    if ids is None and embeds is None:
        return original(**kw)                  # generate() reports what is missing
    token = adapter.image_token_id(model)
    mask, had_mask = effective_mask(model, ids, embeds, kw)
    is_img = placeholder_mask(model, ids, embeds, token)
    feats, kept, drop = _select_images(model, state, adapter, kw, is_img)
    is_pad = (mask == 0).to(drop.device) & ~is_img
    pmap = PromptMap.build(~drop, is_pad, ids)

    orig_kw = dict(kw)
    pad = pad_token(model, ids, mask)
    new_mask = pmap.gather(mask, 0)
    added = bool((pmap.index < 0).any())
    if had_mask or added:
        kw["attention_mask"] = new_mask
    if ids is not None:
        kw["input_ids"] = pmap.gather(ids, pad)
    if embeds is not None:
        fill = model.get_input_embeddings()(torch.tensor(pad, device=embeds.device))
        kw["inputs_embeds"] = pmap.gather(embeds, fill.detach())
    new_img = pmap.gather(is_img, False)
    adapter.prune_columns(model, kw, orig_kw, pmap, mask, new_mask)
    _pruned_features(kw, feats, kept)
    shrink = pmap.length - pmap.new_length
    translate_lengths(model, kw, shrink)
    _record(call, feats, kept, (new_img & new_mask.bool().to(new_img.device)).sum(-1))

    past = kw.get("past_key_values")
    out = _run(original, kw, shrink)
    tag(pmap, past, out)
    return pmap.restore(out, ids)


def _run(original, kw, shrink):
    """The model's own generate() on the pruned call; its complaint about the
    prompt's length against max_length is given in the caller's lengths."""
    try:
        return original(**kw)
    except ValueError as exc:
        mapped = in_callers_terms(exc, shrink)
        if mapped is None:
            raise
        raise mapped from None


# -- continuing from a cache ----------------------------------------------------------
def _continue(model, state, call, adapter, pmap, original, kw, cached, new_images):
    """A call whose cache holds an earlier turn (pmap: how that turn was pruned;
    None: not pruned). The caller passes its whole sequence; the columns the
    cache holds are translated by the map, and images in the uncached columns
    (the new turn) are selected and pruned like a first turn's."""
    ids, embeds = kw.get("input_ids"), kw.get("inputs_embeds")
    ref = ids if ids is not None else embeds
    if ref is None:
        return original(**kw)                  # generate() reports what is missing
    n, T = ref.shape[:2]
    base = pmap
    if base is None:
        base = PromptMap.identity(n, cached, None if ids is None else ids[:, :cached],
                                  ref.device)
    covered = base.length + (cached - base.new_length)   # the caller's columns in the cache
    if T <= covered:
        if new_images:
            raise invalid(f"input_ids: the call passes images, but its {T} columns hold no "
                          f"new turn after the {covered} the cache holds")
        if T < base.length:
            return original(**kw)              # generate() reports the short input
    rows = base.rows_for(n)
    if ids is not None and base.orig_ids is not None and not torch.equal(
            ids[:, :base.length], base.orig_ids.to(ids.device)[rows]):
        raise invalid("past_key_values: input_ids do not start with the prompt this "
                      "cache was filled from (pass the sequences generate() returned)")
    mask, had_mask = effective_mask(model, ids, embeds, kw)
    if mask.shape[:2] != (n, T):
        raise invalid(f"attention_mask: shape {tuple(mask.shape)} for {n} rows of {T} "
                      "columns (a continued call's mask covers the whole sequence)")
    orig_kw = dict(kw)
    pm = base
    if new_images:
        token = adapter.image_token_id(model)
        is_img = placeholder_mask(model, None if ids is None else ids[:, covered:],
                                  None if embeds is None else embeds[:, covered:], token)
        feats, kept, drop = _select_images(model, state, adapter, kw, is_img)
        pm = base.extend(rows, T, covered, ~drop, ids)
        _pruned_features(kw, feats, kept)
    if ids is not None:
        kw["input_ids"] = pm.gather(ids, pad_token(model, ids, None))
    if embeds is not None and embeds.shape[1] >= pm.length:
        fill = model.get_input_embeddings()(torch.tensor(pad_token(model, None, None),
                                                          device=embeds.device))
        kw["inputs_embeds"] = pm.gather(embeds, fill.detach())
    new_mask = pm.gather(mask, 0)
    if had_mask or bool((pm.index < 0).any()):
        kw["attention_mask"] = new_mask
    adapter.continue_columns(model, kw, orig_kw, base, pm, mask, new_mask)
    shrink = pm.length - pm.new_length
    translate_lengths(model, kw, shrink)
    if pm is not base:
        # the new turn's columns are those after the `cached` ones the cache holds
        new_img = placeholder_mask(model, kw.get("input_ids"), kw.get("inputs_embeds"), token)
        reaching = (new_img & new_mask.bool().to(new_img.device))[:, cached:]
        _record(call, feats, kept, reaching.sum(-1))
    past = kw.get("past_key_values")
    out = _run(original, kw, shrink)
    tag(pm, past, out)
    return pm.restore(out, None if ids is None else ids[:, :pm.length])


def tag(pmap, *caches):
    """Let the caches this call filled carry the prompt map."""
    for cache in caches:
        cache = getattr(cache, "past_key_values", cache)
        if cache is not None and not isinstance(cache, torch.Tensor):
            try:
                cache._todre_prompt = pmap
            except AttributeError:
                pass
