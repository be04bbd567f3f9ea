"""ToDRE for Hugging Face transformers vision-language models.

    import todre.hf
    todre.hf.enable(model, ratio=0.1, tau=0.1)
    out = model.generate(**inputs, max_new_tokens=64)   # pruned, same call
    print(todre.hf.stats(model))

Supported: LlavaNextForConditionalGeneration and
Qwen2_5_VLForConditionalGeneration, transformers 5.x (tested with 5.23),
attention 'sdpa' or 'eager', the default dynamic KV cache. See docs/hf.md.
"""

import functools

import transformers

import todre

if int(transformers.__version__.split(".")[0]) < 5:
    raise ImportError(f"todre.hf needs transformers 5.x (tested with 5.23); found "
                      f"{transformers.__version__}")

from . import _llava_next, _qwen2_5_vl
from ._stage2 import Stage2

__all__ = ["enable", "disable", "stats", "is_enabled"]

_ADAPTERS = {
    "LlavaNextForConditionalGeneration": _llava_next,
    "Qwen2_5_VLForConditionalGeneration": _qwen2_5_vl,
}


class _Settings:
    def __init__(self, ratio, keep, objective, pivot, seed, fallback_pivot):
        self.ratio = ratio
        self.keep = keep
        self.objective = objective
        self.pivot = pivot
        self.seed = seed
        self.fallback_pivot = fallback_pivot
        self.last = {}

    @property
    def stage1_off(self):
        return self.ratio is None and self.keep is None

    @property
    def ratio_or_none(self):
        return None if self.keep is not None else self.ratio

    def record_stage1(self, before, kept, llm_ids, llm_mask, image_token_id):
        visual = (llm_ids == image_token_id) & llm_mask.bool()
        self.last = {"image_tokens": [int(n) for n in before],
                     "kept_tokens": [int(k.numel()) for k in kept],
                     "kept_indices": [k.clone() for k in kept],
                     "llm_image_tokens": [int(v) for v in visual.sum(-1)]}


class _State:
    def __init__(self, settings, stage2, original_generate):
        self.settings = settings
        self.stage2 = stage2
        self.original_generate = original_generate


def _adapter(model):
    for cls in type(model).__mro__:
        if cls.__name__ in _ADAPTERS:
            return _ADAPTERS[cls.__name__]
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
           fallback_pivot="center"):
    """Enable ToDRE on `model` for generate(). Returns the model.

    Args:
        ratio: stage-1 keep ratio in (0, 1] over each image's visual tokens
            (k = round(ratio * n)); None (with keep None) turns stage 1 off.
        keep: keep exactly this many tokens per image instead of a ratio.
        tau: stage-2 threshold: drop when both text<->vision ratios are < tau.
        probe_layers: 0-based LLM layers to probe (default [floor(7L/8)]).
        stage2: False turns the relevance drop off.
        objective, pivot, seed: as todre.select (default max-sum with the
            'auto' pivot: CLS for LLaVA-NeXT, CENTER for Qwen2.5-VL).
        schedule: 'list' (only probe_layers) or 'until-drop' (every layer from
            the first probe layer on until one decides).
        fallback_pivot: the pivot used when 'cls' is asked for but the model
            has no [CLS] attention.
    """
    adapter = _adapter(model)
    if is_enabled(model):
        disable(model)
    settings = _Settings(ratio, keep, objective, pivot, seed, fallback_pivot)
    _validate(settings)
    drop = None
    if stage2:
        lm = model.model.language_model
        text_cfg = getattr(model.config, "text_config", model.config)
        attn = getattr(text_cfg, "_attn_implementation", None) or \
            getattr(model.config, "_attn_implementation", "sdpa")
        drop = Stage2(model, lm.layers, _visual_token_ids(model.config), tau, probe_layers,
                      schedule, attn)
    original = model.generate
    state = _State(settings, drop, original)

    @functools.wraps(original)
    def generate(*args, **kwargs):
        return adapter.generate(model, original, settings, args, kwargs)

    model.generate = generate
    model._todre_state = state
    return model


def _validate(settings):
    """Fail at enable() time, not in the middle of generate()."""
    from .._select import SelectConfig
    SelectConfig(settings.keep, settings.ratio_or_none, settings.objective, settings.pivot,
                 None, settings.seed).close()
    if settings.pivot in ("cls", "auto") and settings.fallback_pivot in ("cls", "auto"):
        raise todre.TodreError(todre.Status.INVALID_ARGUMENT,
                               "fallback_pivot: must name a pivot that needs no CLS map")
    SelectConfig(None, None, "max-sum", settings.fallback_pivot, None, 0).close()


def disable(model):
    """Remove every hook and restore the model's own generate()."""
    state = getattr(model, "_todre_state", None)
    if state is None:
        return model
    if state.stage2 is not None:
        state.stage2.remove()
    if "generate" in model.__dict__:
        del model.__dict__["generate"]
    del model._todre_state
    return model


def is_enabled(model):
    return getattr(model, "_todre_state", None) is not None


def stats(model):
    """What the last generate() did: image tokens per image before / after
    stage 1 and the kept indices; per sequence the visual tokens that reached
    the LLM, the drop layer (None = no drop) and the probed ratios
    {(seq, layer): (alpha_t2v, alpha_v2t)}."""
    state = getattr(model, "_todre_state", None)
    if state is None:
        return {}
    out = dict(state.settings.last)
    if state.stage2 is not None:
        out.update(state.stage2.last)
    return out
