"""Per-deployment ToDRE settings for the vLLM plugin.

Two sources, in this order of precedence:
  1. hf_overrides={"todre": {"ratio": 0.25, ...}} (the model's HF config:
     the same in the front end, the engine core and the workers, and part of
     the config vLLM hashes);
  2. environment variables TODRE_VLLM_RATIO, TODRE_VLLM_KEEP,
     TODRE_VLLM_OBJECTIVE, TODRE_VLLM_PIVOT, TODRE_VLLM_SEED,
     TODRE_VLLM_FALLBACK_PIVOT, TODRE_VLLM_BUDGET, TODRE_VLLM_GROUP_MIN
     (inherited by vLLM's subprocesses).
Stage 1 is on only when a ratio or a keep count is given: with neither the
plugin's model classes behave exactly as vLLM's own.
"""

import os

import todre
from .._runtime import DEFAULTS as _DEFAULTS
from .._runtime import KEYS, Stage1Settings

_ENV = {k: "TODRE_VLLM_" + k.upper() for k in KEYS}


def _bad(msg):
    return todre.TodreError(todre.Status.INVALID_ARGUMENT, "todre vLLM plugin: " + msg)


def _number(text, kind, what):
    try:
        return kind(text)
    except (TypeError, ValueError):
        raise _bad(f"{what}: expected {kind.__name__}, got {text!r}") from None


class Settings(Stage1Settings):
    """The deployment's stage-1 settings (todre/_runtime.py), errors named as
    the plugin's."""

    def _validate(self):
        try:
            super()._validate()
        except todre.TodreError as exc:
            detail = str(exc).split(": ", 1)[-1]          # without the status name
            raise todre.TodreError(exc.status, f"todre vLLM plugin: invalid settings "
                                   f"{self.as_dict()}: {detail}") from None

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
            elif key in ("keep", "seed", "group_min"):
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
