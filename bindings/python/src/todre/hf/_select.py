"""Stage-1 selection over the images of one generate() call: the path every
runtime integration shares (todre/_runtime.py)."""

import torch

from .._runtime import select_images


def select_each(features, cls_maps, pivot_range, settings):
    """Kept local indices (ascending, CPU int64) for every image's features;
    pivot_range (0, thumbnail rows) or (0, None): the image's head rows, its
    pivot range under the 'set' budget and its first group otherwise."""
    kept = select_images(features, cls_maps, pivot_range[1], settings)
    return [k.cpu() if isinstance(k, torch.Tensor) else torch.from_numpy(k) for k in kept]
