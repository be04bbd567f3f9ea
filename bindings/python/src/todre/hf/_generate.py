"""The generate() that todre.hf.enable() installs.

Order of business for one call:

1. refusals (TodreError UNSUPPORTED) for what stage 2 cannot follow: another
   attention implementation, a static / quantized / offloaded cache, compiled
   forwards, chunked prefill, continuous batching;
2. a call continuing from a KV cache that an enabled generate() filled: the
   caller's sequences are translated to the pruned prompt the cache holds
   (PromptMap), the output is translated back;
3. a call with images (pixel_values, or pre-encoded mm_encoder_outputs) and
   stage 1 on: features, selection, the pruned prompt, and generate() on it;
4. anything else: the model's own generate() (stage 2 still acts in prefills).
"""

import torch

from ._prompt import (PromptMap, cache_length, dropped_placeholders, effective_mask, invalid,
                      keyword_call, pad_token, padding_side, placeholder_mask,
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
    if state.depth > 0:
        # a generate() inside an enabled one (the model as its own assistant): its
        # prompt and features are the pruned ones already
        with state.generating():
            return original(**kw)
    with state.generating():
        past = kw.get("past_key_values")
        if past is not None and cache_length(past) == 0:
            tag(None, past)                    # a cache reused for a new prompt
        if cache_length(past) > 0:
            pmap = getattr(past, "_todre_prompt", None)
            if pmap is None:
                return original(**kw)          # a cache of unpruned prompts: continue as is
            return _continue(model, adapter, pmap, original, kw)
        if state.settings.stage1_off or not adapter.has_images(kw):
            return original(**kw)
        return _stage1(model, state, adapter, original, kw)


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
def _stage1(model, state, adapter, original, kw):
    settings = state.settings
    ids, embeds = kw.get("input_ids"), kw.get("inputs_embeds")
    if ids is None and embeds is None:
        return original(**kw)                  # generate() reports what is missing
    token = adapter.image_token_id(model)
    mask, had_mask = effective_mask(model, ids, embeds, kw)

    with torch.no_grad():
        feats, cls, pivot_range = adapter.encode(model, kw)
        is_img = placeholder_mask(model, ids, embeds, token)
        kept = select_each(feats, cls, pivot_range, settings)
    drop = dropped_placeholders(is_img, [f.shape[0] for f in feats], kept)
    is_pad = (mask == 0).to(drop.device) & ~is_img
    pmap = PromptMap.build(~drop, is_pad, ids, padding_side(mask))

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

    from transformers.modeling_outputs import BaseModelOutputWithPooling
    pruned = [f[k.to(f.device)] for f, k in zip(feats, kept)]
    mm = dict(kw.get("mm_encoder_outputs") or {})
    mm["image"] = BaseModelOutputWithPooling(pooler_output=pruned)
    kw["mm_encoder_outputs"] = mm
    translate_lengths(model, kw, pmap.length - pmap.new_length)
    if state.depth == 1:
        settings.record_stage1([f.shape[0] for f in feats], kept,
                               (new_img & new_mask.bool().to(new_img.device)).sum(-1))

    past = kw.get("past_key_values")
    out = original(**kw)
    tag(pmap, past, out)
    return pmap.restore(out, ids)


# -- continuing from a pruned cache ---------------------------------------------------
def _continue(model, adapter, pmap, original, kw):
    ids, embeds = kw.get("input_ids"), kw.get("inputs_embeds")
    caller_prefix = None
    if ids is not None and ids.shape[1] >= pmap.length:
        rows = pmap.rows_for(ids.shape[0])
        if pmap.orig_ids is not None and not torch.equal(
                ids[:, :pmap.length], pmap.orig_ids.to(ids.device)[rows]):
            raise invalid("past_key_values: input_ids do not start with the prompt this "
                          "cache was filled from (pass the sequences generate() returned)")
        caller_prefix = ids[:, :pmap.length]
        kw["input_ids"] = pmap.gather(ids, pad_token(model, ids, None))
    if embeds is not None and embeds.shape[1] >= pmap.length:
        fill = model.get_input_embeddings()(torch.tensor(pad_token(model, None, None),
                                                          device=embeds.device))
        kw["inputs_embeds"] = pmap.gather(embeds, fill.detach())
    mask = kw.get("attention_mask")
    if mask is not None and mask.shape[1] >= pmap.length:
        kw["attention_mask"] = pmap.gather(mask, 0)
    elif mask is None and caller_prefix is not None and bool((pmap.index < 0).any()):
        # added padding columns need a mask: the one generate() would infer, translated
        full, _ = effective_mask(model, ids, None, kw)
        kw["attention_mask"] = pmap.gather(full, 0)
    adapter.continue_columns(model, kw, pmap)
    translate_lengths(model, kw, pmap.length - pmap.new_length)
    past = kw.get("past_key_values")
    out = original(**kw)
    tag(pmap, past, out)
    return pmap.restore(out, caller_prefix)


def tag(pmap, *caches):
    """Let the caches this call filled carry the prompt map."""
    for cache in caches:
        cache = getattr(cache, "past_key_values", cache)
        if cache is not None and not isinstance(cache, torch.Tensor):
            try:
                cache._todre_prompt = pmap
            except AttributeError:
                pass
