"""What the runtime integrations (todre.hf, todre.vllm) share: one model of
the stage-1 settings, and one path from a batch of images' features to each
image's kept tokens. Budgets and counts come from libtodre (group counts
from sizes, grouped selection), never from Python arithmetic.

An image is one token set; with a grouped budget ('shared', 'per-group') a
leading run of its rows (LLaVA-NeXT's thumbnail) and the rest are its two
groups, each selected over its own rows; with the default budget ('set') the
leading run is the pivot range instead (the paper's AnyRes rule).
"""

import todre

from ._selection import SelectConfig

KEYS = ("ratio", "keep", "objective", "pivot", "seed", "fallback_pivot", "budget", "group_min")
DEFAULTS = {"ratio": None, "keep": None, "objective": "max-sum", "pivot": "auto", "seed": 0,
            "fallback_pivot": "center", "budget": "set", "group_min": 1}


class Stage1Settings:
    """Validated stage-1 settings of an integration. Stage 1 is on when a
    ratio or a keep count is given. A keep count above an image's tokens keeps
    them all (libtodre's 'per-group' rule, which for one group selects as
    'set' does); a keep count, when given, is the budget and the ratio is
    ignored. Invalid settings raise TodreError naming the bad one when the
    object is made, never in the middle of a request. Copies and pickles
    (copy.deepcopy of a model, vLLM's worker processes) are made from the
    settings themselves and validated again."""

    def __init__(self, ratio=None, keep=None, objective="max-sum", pivot="auto", seed=0,
                 fallback_pivot="center", budget="set", group_min=1):
        self.ratio = ratio
        self.keep = keep
        self.objective = objective
        self.pivot = pivot
        self.seed = seed
        self.fallback_pivot = fallback_pivot
        self.budget = budget
        self.group_min = group_min
        self._cfg = None
        if self.enabled:
            self._validate()

    @property
    def enabled(self):
        return self.ratio is not None or self.keep is not None

    @property
    def ratio_or_none(self):
        return None if self.keep is not None else self.ratio

    @property
    def grouped(self):
        return self.budget != "set"

    def __reduce__(self):
        return (type(self), tuple(getattr(self, k) for k in KEYS))

    def _validate(self):
        budget = "per-group" if self.keep is not None and self.budget == "set" else self.budget
        self._cfg = SelectConfig(self.keep, self.ratio_or_none, self.objective, self.pivot, None,
                                 self.seed, budget=budget, group_min=self.group_min)
        if self.pivot in ("cls", "auto") and self.fallback_pivot in ("cls", "auto"):
            raise todre.TodreError(todre.Status.INVALID_ARGUMENT,
                                   "fallback_pivot: must name a pivot that needs no CLS map "
                                   f"(got {self.fallback_pivot!r})")
        SelectConfig(None, None, "max-sum", self.fallback_pivot, None, 0).close()

    def counts(self, groups):
        """(per group, total) tokens kept of an image whose groups are at the
        row offsets `groups` ([0, ..., n]), from libtodre
        (todre.group_counts; per group -1 under 'set'); (None, n) when
        stage 1 is off."""
        if not self.enabled:
            return None, int(groups[-1])
        return self._cfg.group_counts([int(g) for g in groups])

    def keep_count(self, n):
        """Tokens kept of an image of n tokens in one group."""
        return self.counts([0, int(n)])[1]

    def as_dict(self):
        return {k: getattr(self, k) for k in KEYS}


def image_groups(n, head, settings):
    """An image's group offsets: its first `head` rows and the rest under a
    grouped budget (0 < head < n), else one group."""
    if settings.grouped and head is not None and 0 < head < n:
        return [0, int(head), int(n)]
    return [0, int(n)]


def select_images(features, cls_maps, head, settings):
    """Kept local indices (ascending int64, on the features' device) of every
    image, in one todre.select_batch call: each image exactly as a single
    call with the count settings.counts() gives for it (the count an
    integration reserved placeholders for).

    `head`: the rows at the head of every image that are its thumbnail
    (LLaVA-NeXT), or None. The features are read in place through DLPack:
    on the CUDA backend when they are on a GPU and libtodre has its CUDA
    module, else on a host copy.
    """
    feats = [f.detach() for f in features]
    device = feats[0].device
    cls = None if cls_maps is None else [c.detach().float() for c in cls_maps]
    if feats[0].is_cuda and "cuda" not in todre.available_backends():
        feats = [f.cpu() for f in feats]
        cls = None if cls is None else [c.cpu() for c in cls]
    feats = [f.contiguous() for f in feats]
    pivot = settings.pivot
    if cls is None and pivot == "cls":
        pivot = settings.fallback_pivot
    common = dict(cls=cls, objective=settings.objective, pivot=pivot, seed=settings.seed)
    if settings.grouped:
        # every group selected on its own, over all its rows
        kept = todre.select_batch(feats, keep=settings.keep, ratio=settings.ratio_or_none,
                                  groups=[image_groups(f.shape[0], head, settings) for f in feats],
                                  budget=settings.budget, group_min=settings.group_min, **common)
    else:
        hi = head
        if hi is not None and any(f.shape[0] < hi for f in feats):
            hi = None   # an image smaller than the range: choose from all its rows
        kept = todre.select_batch(feats, keep=[settings.keep_count(f.shape[0]) for f in feats],
                                  pivot_range=None if hi is None else (0, hi), **common)
    return [k.to(device) for k in kept]
