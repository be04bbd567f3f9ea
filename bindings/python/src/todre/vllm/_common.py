"""Selection and tracing shared by the plugin's model classes."""

import json
import os

import torch

import todre


def select_each(features, keeps, cls_maps, pivot_range, settings):
    """Kept local indices (ascending int64, on the features' device) of every
    image: one todre.select_batch call, each image exactly as a single call
    with its own k (the placeholder count the processor already used).

    The features are read in place through DLPack: on the CUDA backend when the
    model is on a GPU and libtodre has its CUDA module, else on the CPU backend
    (a host copy only for a GPU model without the CUDA module). The same logic
    as todre.hf's stage 1 (bindings/python/src/todre/hf/_select.py).
    """
    feats = [f.detach() for f in features]
    device = feats[0].device
    cls = None if cls_maps is None else [c.detach().float() for c in cls_maps]
    if feats[0].is_cuda and "cuda" not in todre.available_backends():
        feats = [f.cpu() for f in feats]
        cls = None if cls is None else [c.cpu() for c in cls]
    feats = [f.contiguous() for f in feats]
    lo, hi = pivot_range
    if hi is not None and any(f.shape[0] < hi for f in feats):
        hi = None   # a set smaller than the range: choose from all its rows
    pivot = settings.pivot
    if cls is None and pivot == "cls":
        pivot = settings.fallback_pivot
    objective = settings.objective
    kept = todre.select_batch(feats, keep=[int(k) for k in keeps], cls=cls,
                              objective=objective, pivot=pivot,
                              pivot_range=None if hi is None else (lo, hi),
                              seed=settings.seed)
    return [k.to(device) for k in kept]


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
