"""ToDRE for Hugging Face transformers vision-language models.

    import todre.hf
    todre.hf.enable(model, ratio=0.1, tau=0.1)
    out = model.generate(**inputs, max_new_tokens=64)   # pruned, same call
    print(todre.hf.stats(model))

Supported: LlavaNextForConditionalGeneration and
Qwen2_5_VLForConditionalGeneration, transformers 5.x (tested with 5.23). Only
generate() changes (every input and decoding mode of the plain model, or a
TodreError UNSUPPORTED where stage 2 cannot follow: attention other than
'sdpa' / 'eager', compiled forwards, non-dynamic caches when a drop is
possible, chunked prefill). Several threads may call generate() on one
enabled model at once (each call keeps its own state; stats() is per
thread), and a chat turn that continues from the cache with new images is
pruned like a first turn. See docs/hf.md.
"""

import types

import transformers

import todre

if int(transformers.__version__.split(".")[0]) < 5:
    raise ImportError(f"todre.hf needs transformers 5.x (tested with 5.23); found "
                      f"{transformers.__version__}")

from . import _generate, _llava_next, _qwen2_5_vl
from .._runtime import Stage1Settings
from ._call import Owner
from ._stage2 import Stage2

__all__ = ["enable", "disable", "stats", "is_enabled"]

_ADAPTERS = {
    "LlavaNextForConditionalGeneration": _llava_next,
    "Qwen2_5_VLForConditionalGeneration": _qwen2_5_vl,
}


class _State(Owner):
    """Everything enable() attaches to a model (model._todre_state). Holds no
    reference to the model itself, so copy.deepcopy(model) gives a clone whose
    state, generate() and hooks are the clone's own. What one generate() call
    decides lives in that call's Call (see _call.py), never here."""

    def __init__(self, settings, stage2, adapter_name, original_generate, hooks):
        super().__init__()
        self.settings = settings
        self.stage2 = stage2
        self.adapter_name = adapter_name
        self.original_generate = original_generate   # an instance-level generate, if any
        self.hooks = hooks                             # the adapter's own hook handles

    def original(self, model):
        if self.original_generate is not None:
            return self.original_generate
        return types.MethodType(type(model).generate, model)


def _generate_method(model, *args, **kwargs):
    """The generate() of an enabled model (bound to it, so deepcopy rebinds it)."""
    state = model._todre_state
    return _generate.generate(model, state, _ADAPTERS[state.adapter_name], args, kwargs)


def _adapter_name(model):
    if hasattr(model, "_orig_mod"):
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            "model: a torch.compile() wrapper; enable() the model itself (compiled._orig_mod) "
            "before compiling (only generate() is affected; stage 2 refuses compiled forwards)")
    for cls in type(model).__mro__:
        if cls.__name__ in _ADAPTERS:
            return cls.__name__
    raise todre.TodreError(
        todre.Status.UNSUPPORTED,
        f"model: {type(model).__name__} is not supported by todre.hf (supported: "
        + ", ".join(_ADAPTERS) + ")")


def _visual_token_ids(cfg):
    ids = [cfg.image_token_id]
    if getattr(cfg, "video_token_id", None) is not None:
        ids.append(cfg.video_token_id)
    return ids


def enable(model, ratio=0.1, tau=0.1, probe_layers=None, stage2=True, keep=None,
           objective="max-sum", pivot="auto", seed=0, schedule="list",
           fallback_pivot="center", budget="set", group_min=1):
    """Enable ToDRE on `model` for generate(). Returns the model.

    Args:
        ratio: stage-1 keep ratio in (0, 1] over each image's visual tokens
            (k = round(ratio * n)); None (with keep None) turns stage 1 off.
        keep: keep this many tokens per image instead of a ratio (an image
            with fewer keeps them all).
        tau: stage-2 threshold: drop when both text<->vision ratios are < tau.
        probe_layers: 0-based LLM layers to probe (default [floor(7L/8)]).
        stage2: False turns the relevance drop off.
        objective, pivot, seed: as todre.select (default max-sum with the
            'auto' pivot: CLS for LLaVA-NeXT, CENTER for Qwen2.5-VL).
        schedule: 'list' (only probe_layers) or 'until-drop' (every layer from
            the first probe layer on until one decides).
        fallback_pivot: the pivot used when 'cls' is asked for but the model
            has no [CLS] attention.
        budget: how an image's budget falls on its groups (LLaVA-NeXT: the
            thumbnail and the crop grid; a Qwen2.5-VL image is one group):
            'set' (one selection over the image, the paper's), 'shared'
            (shared by size, at least group_min each) or 'per-group'; see
            todre.select.
        group_min: the 'shared' budget's minimum per group.

    Only generate() is affected: a plain forward (training, labels, scoring)
    runs the unmodified model. What generate() supports and refuses (with
    TodreError UNSUPPORTED) is listed in docs/hf.md.
    """
    name = _adapter_name(model)
    if is_enabled(model):
        model._todre_state.check_idle("enable")
    settings = Stage1Settings(ratio, keep, objective, pivot, seed, fallback_pivot, budget,
                              group_min)
    if is_enabled(model):
        disable(model)
    drop = None
    if stage2:
        lm = model.model.language_model
        drop = Stage2(model, lm.layers, _visual_token_ids(model.config), tau, probe_layers,
                      schedule)
        try:
            _check_stage2_model(model, drop)
        except Exception:
            drop.remove()
            raise
    hooks = _ADAPTERS[name].install(model) if settings.enabled else []
    state = _State(settings, drop, name, model.__dict__.get("generate"), hooks)
    if drop is not None:
        drop.key = state
    model.generate = types.MethodType(_generate_method, model)
    model._todre_state = state
    return model


def _check_stage2_model(model, drop):
    """Refusals that the model's current setup already decides."""
    impl = drop.attention_implementation()
    if impl not in ("sdpa", "eager"):
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            f"stage 2: attention implementation {impl!r} is not supported "
            f"(use 'sdpa' or 'eager', or stage2=False)")
    if _generate.is_compiled(model):
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            "stage 2: the model's forward is compiled (torch.compile / model.compile()); "
            "the stage-2 hooks cannot run in a compiled graph: use stage2=False")
    text = getattr(model.config, "text_config", model.config)
    kinds = set(getattr(text, "layer_types", None) or [])
    windowed = (kinds - {"full_attention"}) if kinds else \
        ({"sliding_window"} if getattr(text, "sliding_window", None) is not None
         and getattr(text, "use_sliding_window", True) else set())
    if drop.can_drop and windowed:
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            f"stage 2: the language model has {sorted(windowed)} layers; the layers after a "
            "drop get a full causal mask, so a drop is only supported without sliding "
            "windows: use stage2=False or tau=0")
    gc = model.generation_config
    if getattr(gc, "prefill_chunk_size", None):
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            "stage 2: generation_config.prefill_chunk_size (chunked prefill) is not supported")
    impl = getattr(gc, "cache_implementation", None)
    if drop.can_drop and impl not in _generate.DYNAMIC_CACHES:
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            f"stage 2: generation_config.cache_implementation={impl!r}: a drop needs the "
            "default dynamic cache; use stage2=False or tau=0")


def disable(model):
    """Remove every hook and restore the model's own generate(). TodreError
    STATE while a generate() of the model is running (in any thread)."""
    state = getattr(model, "_todre_state", None)
    if state is None:
        return model
    state.check_idle("disable")
    if state.stage2 is not None:
        state.stage2.remove()
    for handle in state.hooks:
        handle.remove()
    state.hooks = []
    if "generate" in model.__dict__:
        del model.__dict__["generate"]
    if state.original_generate is not None:
        model.generate = state.original_generate
    del model._todre_state
    return model


def is_enabled(model):
    return getattr(model, "_todre_state", None) is not None


def stats(model):
    """What the last generate() of `model` made in the calling thread did:
    image tokens per image before / after stage 1 and the kept indices; per
    sequence the image tokens that reached the LLM, the visual tokens of the
    prefill, the drop layer (None = no drop) and the probed ratios
    {(seq, layer): (alpha_t2v, alpha_v2t)}. Calls made in other threads at
    the same time do not change it."""
    state = getattr(model, "_todre_state", None)
    if state is None:
        return {}
    return state.last_stats()
