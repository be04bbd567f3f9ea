"""Per-deployment ToDRE settings for the vLLM plugin.

Two sources, in this order of precedence:
  1. hf_overrides={"todre": {"ratio": 0.25, ...}} (the model's HF config:
     the same in the front end, the engine core and the workers, and part of
     the config vLLM hashes);
  2. environment variables TODRE_VLLM_RATIO, TODRE_VLLM_KEEP,
     TODRE_VLLM_OBJECTIVE, TODRE_VLLM_PIVOT, TODRE_VLLM_SEED,
     TODRE_VLLM_FALLBACK_PIVOT (inherited by vLLM's subprocesses).
Stage 1 is on only when a ratio or a keep count is given: with neither the
plugin's model classes behave exactly as vLLM's own.
"""

import os

import todre
from todre._select import SelectConfig

KEYS = ("ratio", "keep", "objective", "pivot", "seed", "fallback_pivot")
_DEFAULTS = {"ratio": None, "keep": None, "objective": "max-sum", "pivot": "auto",
             "seed": 0, "fallback_pivot": "center"}
_ENV = {k: "TODRE_VLLM_" + k.upper() for k in KEYS}


def _bad(msg):
    return todre.TodreError(todre.Status.INVALID_ARGUMENT, "todre vLLM plugin: " + msg)


def _number(text, kind, what):
    try:
        return kind(text)
    except (TypeError, ValueError):
        raise _bad(f"{what}: expected {kind.__name__}, got {text!r}") from None


class Settings:
    """Validated stage-1 settings; keep_count(n) is the library's k."""

    def __init__(self, ratio=None, keep=None, objective="max-sum", pivot="auto", seed=0,
                 fallback_pivot="center"):
        self.ratio = ratio
        self.keep = keep
        self.objective = objective
        self.pivot = pivot
        self.seed = seed
        self.fallback_pivot = fallback_pivot
        self._cfg = None
        if self.enabled:
            self._validate()

    @property
    def enabled(self):
        return self.ratio is not None or self.keep is not None

    def _validate(self):
        """Every setting through the library's own checks (a TodreError naming
        the bad one), so that a bad deployment fails at start-up."""
        try:
            self._cfg = SelectConfig(self.keep, None if self.keep is not None else self.ratio,
                                     self.objective, self.pivot, None, self.seed)
            if self.fallback_pivot in ("cls", "auto"):
                raise _bad("fallback_pivot: must name a pivot that needs no CLS map "
                           f"(got {self.fallback_pivot!r})")
            SelectConfig(None, None, "max-sum", self.fallback_pivot, None, 0).close()
            self._cfg.keep_count(self.keep if self.keep is not None else 1)
        except todre.TodreError as exc:
            if str(exc).startswith("todre vLLM plugin"):
                raise
            detail = str(exc).split(": ", 1)[-1]          # without the status name
            raise todre.TodreError(exc.status, f"todre vLLM plugin: invalid settings "
                                   f"{self.as_dict()}: {detail}") from None

    def keep_count(self, n):
        """Tokens kept of an image with n visual tokens (n when disabled).
        With a fixed keep, an image smaller than it keeps all its tokens."""
        if not self.enabled:
            return int(n)
        if self.keep is not None:
            return min(int(self.keep), int(n))
        return self._cfg.keep_count(int(n))

    def as_dict(self):
        return {k: getattr(self, k) for k in KEYS}

    def __repr__(self):
        return f"todre.vllm.Settings({self.as_dict()})"


def from_sources(overrides=None, environ=None):
    """Settings from an hf_overrides-style mapping, then the environment."""
    environ = os.environ if environ is None else environ
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(KEYS))
    if unknown:
        raise _bad(f"unknown setting(s) {unknown} in hf_overrides['todre'] "
                   f"(known: {list(KEYS)})")
    values = dict(_DEFAULTS)
    for key in KEYS:
        if key in overrides:
            values[key] = overrides[key]
        elif environ.get(_ENV[key], "") != "":
            text = environ[_ENV[key]]
            if key == "ratio":
                values[key] = _number(text, float, _ENV[key])
            elif key in ("keep", "seed"):
                values[key] = _number(text, int, _ENV[key])
            else:
                values[key] = text
    if values["ratio"] is not None and values["keep"] is not None:
        raise _bad("ratio and keep: give one budget, not both")
    if values["ratio"] is not None and not isinstance(values["ratio"], (int, float)):
        raise _bad(f"ratio: expected a number, got {values['ratio']!r}")
    return Settings(**values)


def from_hf_config(hf_config):
    """The settings of a deployment (the model's HF config carries the
    hf_overrides; the environment fills the rest)."""
    overrides = getattr(hf_config, "todre", None)
    if overrides is not None and not isinstance(overrides, dict):
        raise _bad(f"hf_overrides['todre'] must be a dict, got {type(overrides).__name__}")
    return from_sources(overrides)
