"""Tiny random-weight Qwen2.5-VL and LLaVA-NeXT checkpoints for vLLM, built
offline from configs (weights, tokenizer and processor; nothing downloaded).

The shapes follow bindings/python/tests/hf/tiny_models.py, with the language
model's head size raised to 64 (vLLM's CPU attention supports head sizes 32,
64, 80, ...; the HF tests use 16). Both tokenizers are word-level: "w<i>" is
token i, plus the models' special tokens, so every id of the vocabulary
decodes.
"""

import hashlib
import json
import os

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (CLIPVisionConfig, LlamaConfig, LlavaNextConfig,
                          LlavaNextForConditionalGeneration, LlavaNextImageProcessor,
                          LlavaNextProcessor, PreTrainedTokenizerFast, Qwen2_5_VLConfig,
                          Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                          Qwen2VLImageProcessor)

QWEN_VOCAB = 160
QWEN_SPECIAL = {"<|vision_start|>": 150, "<|image_pad|>": 151, "<|video_pad|>": 152,
                "<|vision_end|>": 153, "<|endoftext|>": 2, "<pad>": 0, "<s>": 1}
LLAVA_VOCAB = 128
LLAVA_SPECIAL = {"<image>": 100, "</s>": 2, "<pad>": 0, "<s>": 1}
QWEN_IMAGE_TOKEN = QWEN_SPECIAL["<|image_pad|>"]
LLAVA_IMAGE_TOKEN = LLAVA_SPECIAL["<image>"]


def _tokenizer(vocab_size, special, eos, path):
    vocab = {f"w{i}": i for i in range(vocab_size)}
    for text, i in special.items():
        del vocab[f"w{i}"]
        vocab[text] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token=eos,
                                   pad_token="<pad>", unk_token="<pad>")
    fast.add_special_tokens({"additional_special_tokens":
                             [t for t in special if t not in ("<s>", eos, "<pad>")]})
    assert all(fast.convert_tokens_to_ids(t) == i for t, i in special.items())
    assert len(fast) == vocab_size
    return fast


def qwen2_5_vl(path, num_layers=4, seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2_5_VLConfig(
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=128, patch_size=2, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=8, fullatt_block_indexes=[1],
                           in_channels=3, tokens_per_second=2),
        text_config=dict(hidden_size=128, intermediate_size=256,
                         num_hidden_layers=num_layers, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=QWEN_VOCAB,
                         max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, initializer_range=0.2, torch_dtype="float32",
                         rope_scaling={"type": "mrope", "mrope_section": [8, 12, 12]}),
        image_token_id=QWEN_IMAGE_TOKEN, video_token_id=152, vision_start_token_id=150,
        vision_end_token_id=153, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        torch_dtype="float32")
    model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    model.save_pretrained(path)
    tok = _tokenizer(QWEN_VOCAB, QWEN_SPECIAL, "<|endoftext|>", path)
    # 2-px patches merged 2x2: an image of W x H px has (H/4)(W/4) visual tokens
    image = Qwen2VLImageProcessor(patch_size=2, merge_size=2, temporal_patch_size=2,
                                  min_pixels=16 * 16, max_pixels=64 * 64)
    proc = Qwen2_5_VLProcessor(image_processor=image, tokenizer=tok,
                               video_processor=_qwen_video_processor())
    proc.save_pretrained(path)
    return path


def _qwen_video_processor():
    from transformers import Qwen2VLVideoProcessor
    return Qwen2VLVideoProcessor(patch_size=2, merge_size=2, temporal_patch_size=2,
                                 min_pixels=16 * 16, max_pixels=64 * 64)


def llava_next(path, num_layers=4, seed=0):
    torch.manual_seed(seed)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                              num_attention_heads=4, image_size=32, patch_size=8,
                              projection_dim=32)
    text = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=num_layers,
                       num_attention_heads=2, num_key_value_heads=1, vocab_size=LLAVA_VOCAB,
                       max_position_embeddings=2048, bos_token_id=1, eos_token_id=2,
                       pad_token_id=0, initializer_range=0.2)
    cfg = LlavaNextConfig(vision_config=vision, text_config=text,
                          image_token_id=LLAVA_IMAGE_TOKEN,
                          image_grid_pinpoints=[[32, 32], [32, 64], [64, 32], [64, 64]],
                          vision_feature_layer=-2, vision_feature_select_strategy="default",
                          torch_dtype="float32")
    model = LlavaNextForConditionalGeneration(cfg).eval()
    model.save_pretrained(path)
    _clip_layout(os.path.join(path, "model.safetensors"))
    tok = _tokenizer(LLAVA_VOCAB, LLAVA_SPECIAL, "</s>", path)
    image = LlavaNextImageProcessor(size={"shortest_edge": 32},
                                    crop_size={"height": 32, "width": 32},
                                    image_grid_pinpoints=[[32, 32], [32, 64], [64, 32],
                                                          [64, 64]])
    proc = LlavaNextProcessor(image_processor=image, tokenizer=tok, patch_size=8,
                              vision_feature_select_strategy="default",
                              image_token="<image>", num_additional_image_tokens=1)
    proc.save_pretrained(path)
    return path


def _clip_layout(file):
    """transformers 5.x saves the CLIP tower as vision_tower.<module>; vLLM
    0.32 (like the published llava-hf checkpoints) reads
    vision_tower.vision_model.<module>."""
    from safetensors.torch import load_file, save_file
    tensors = load_file(file)
    fixed = {("vision_tower.vision_model." + k[len("vision_tower."):]
              if k.startswith("vision_tower.") and not k.startswith("vision_tower.vision_model.")
              else k): v for k, v in tensors.items()}
    save_file(fixed, file, metadata={"format": "pt"})


def build_all(root):
    """Build both checkpoints under root (reused when already there)."""
    out = {}
    for name, fn in (("qwen2_5_vl", qwen2_5_vl), ("llava_next", llava_next)):
        path = os.path.join(root, name)
        stamp = os.path.join(path, ".todre-built")
        # rebuilt when this file changed (a cached checkpoint directory in CI)
        with open(__file__, "rb") as fh:
            tag = {"builder": "tiny_checkpoints.py",
                   "sha256": hashlib.sha256(fh.read()).hexdigest()}
        try:
            with open(stamp) as fh:
                fresh = json.load(fh) == tag
        except (OSError, ValueError):
            fresh = False
        if not fresh:
            os.makedirs(path, exist_ok=True)
            fn(path)
            with open(stamp, "w") as fh:
                json.dump(tag, fh)
        out[name] = path
    return out


if __name__ == "__main__":
    import sys
    print(build_all(sys.argv[1]))
