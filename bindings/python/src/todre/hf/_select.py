"""Stage-1 selection over the images of one generate() call."""

import torch

import todre


def select_each(features, cls_maps, pivot_range, settings):
    """Kept local indices (ascending, CPU int64) for every image's features.

    One todre.select_batch call over all images (each exactly as a single
    call). Device tensors are selected on the CUDA backend when libtodre has it,
    else on a host copy (the features are small next to the model).
    """
    feats = [f.detach() for f in features]
    cls = None if cls_maps is None else [c.detach().float() for c in cls_maps]
    if feats[0].is_cuda and "cuda" not in todre.available_backends():
        feats = [f.cpu() for f in feats]
        cls = None if cls is None else [c.cpu() for c in cls]
    lo, hi = pivot_range
    if hi is not None and any(f.shape[0] < hi for f in feats):
        hi = None   # a set smaller than the range: choose from all its rows
    pivot = settings.pivot
    if cls is None and pivot == "cls":
        pivot = settings.fallback_pivot
    kept = todre.select_batch(feats, keep=settings.keep, ratio=settings.ratio_or_none, cls=cls,
                              objective=settings.objective, pivot=pivot,
                              pivot_range=None if hi is None else (lo, hi),
                              seed=settings.seed)
    return [k.cpu() if isinstance(k, torch.Tensor) else torch.from_numpy(k) for k in kept]
