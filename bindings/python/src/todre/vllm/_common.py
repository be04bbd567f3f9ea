"""Selection and tracing shared by the plugin's model classes."""

import json
import os

import todre
from . import _settings
from .._runtime import image_groups, select_images  # noqa: F401 (image_groups: the adapters')


def select_each(features, cls_maps, head, settings):
    """Kept local indices (ascending int64, on the features' device) of every
    image, and each image's count: the path todre.hf shares
    (todre/_runtime.py), one todre.select_batch call with the counts the
    processor reserved placeholders for. `head`: the thumbnail rows at the
    head of each image (LLaVA-NeXT), or None."""
    kept = select_images(features, cls_maps, head, settings)
    return kept, [int(k.numel()) for k in kept]


class Trace:
    """TODRE_VLLM_TRACE=<file>: one JSON line per stage-1 call and per forward
    that carries image tokens (what the tests and a curious operator read).
    Off (no cost) when the variable is unset."""

    def __init__(self, model_name):
        self.path = os.environ.get("TODRE_VLLM_TRACE") or None
        self.model = model_name

    def __bool__(self):
        return self.path is not None

    def write(self, event, **fields):
        if self.path is None:
            return
        rec = {"model": self.model, "event": event, "pid": os.getpid(), **fields}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")


def host_list(t):
    return t.detach().cpu().tolist()


class SettingsInfo:
    """Mixin of the plugin's ProcessingInfo classes: the deployment's
    settings, read once from the model's config (hf_overrides) and the
    environment."""

    @property
    def todre_settings(self):
        s = getattr(self, "_todre_settings", None)
        if s is None:
            s = self._todre_settings = _settings.from_hf_config(self.get_hf_config())
        return s


def attach(model, vllm_config, trace_name):
    """The deployment's settings on a plugin model class being built
    (model.todre), its refusals raised now, and its trace."""
    model.todre = _settings.from_hf_config(model.config)
    check_deployment(vllm_config, model.todre, type(model).__name__)
    model._todre_trace = Trace(trace_name)


def check_deployment(vllm_config, settings, name):
    """Refusals that the deployment already decides (raised while the model
    is built, i.e. inside LLM() / at `vllm serve` start-up)."""
    if not settings.enabled:
        return
    pp = getattr(vllm_config.parallel_config, "pipeline_parallel_size", 1)
    if pp != 1:
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            f"todre vLLM plugin: {name}: pipeline_parallel_size={pp} is not supported "
            "(the pruned image tokens' positions are set on the first stage)")
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is not None:
        raise todre.TodreError(
            todre.Status.UNSUPPORTED,
            f"todre vLLM plugin: {name}: speculative decoding is not supported "
            "(the drafter would embed the image tokens without the plugin)")
