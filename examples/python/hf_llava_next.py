"""ToDRE on LLaVA-NeXT with Hugging Face transformers: one call, then generate().

By default this builds a tiny LLaVA-NeXT with random weights from a config
(nothing is downloaded) and a random "image", so it runs anywhere in seconds;
the output text is meaningless, the mechanics are real. With --model it loads
a real checkpoint (a local directory, or a hub id if you are online), e.g.

    python3 examples/python/hf_llava_next.py --model llava-hf/llava-v1.6-mistral-7b-hf \
        --image cat.jpg --question "What is in this image?" --ratio 0.1 --tau 0.1

Needs torch and transformers (see bindings/python/requirements-test.txt).
"""

import argparse
import time

import torch

import todre
import todre.hf


def tiny_model_and_inputs():
    from transformers import (CLIPVisionConfig, LlamaConfig, LlavaNextConfig,
                              LlavaNextForConditionalGeneration)
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches
    torch.manual_seed(0)
    cfg = LlavaNextConfig(
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64,
                                       num_hidden_layers=3, num_attention_heads=4,
                                       image_size=32, patch_size=8),
        text_config=LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=8,
                                num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                bos_token_id=1, eos_token_id=2, pad_token_id=0,
                                initializer_range=0.2),
        image_token_id=100, image_grid_pinpoints=[[32, 32], [32, 64], [64, 32], [64, 64]])
    model = LlavaNextForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = 0
    sizes = torch.tensor([[40, 60]])
    patches = image_size_to_num_patches(sizes[0], cfg.image_grid_pinpoints, 32)
    pixel_values = torch.randn(1, patches, 3, 32, 32)
    with torch.no_grad():
        n = model.model.get_image_features(pixel_values, sizes,
                                           return_dict=True).pooler_output[0].shape[0]
    ids = torch.tensor([[1, 5, 6] + [100] * n + [7, 8, 9]])   # system, image, question
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": pixel_values, "image_sizes": sizes}
    return model, inputs, None


def real_model_and_inputs(path, image, question):
    from PIL import Image
    from transformers import AutoProcessor, LlavaNextForConditionalGeneration
    processor = AutoProcessor.from_pretrained(path)
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    model = LlavaNextForConditionalGeneration.from_pretrained(
        path, dtype=dtype, device_map="auto" if torch.cuda.is_available() else None).eval()
    conversation = [{"role": "user", "content": [{"type": "image"},
                                                 {"type": "text", "text": question}]}]
    prompt = processor.apply_chat_template(conversation, add_generation_prompt=True)
    inputs = processor(images=Image.open(image).convert("RGB"), text=prompt,
                       return_tensors="pt").to(model.device)
    return model, dict(inputs), processor


def run(model, inputs, max_new_tokens):
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return out[:, inputs["input_ids"].shape[1]:], time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint directory or hub id (default: tiny random)")
    ap.add_argument("--image", help="image file (with --model)")
    ap.add_argument("--question", default="Describe the image in one sentence.")
    ap.add_argument("--ratio", type=float, default=0.1, help="stage-1 keep ratio")
    ap.add_argument("--tau", type=float, default=0.1, help="stage-2 threshold")
    ap.add_argument("--probe-layer", type=int, action="append",
                    help="stage-2 probe layer (default floor(7L/8)); repeatable")
    ap.add_argument("--no-stage2", action="store_true")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()

    if args.model:
        if not args.image:
            ap.error("--model needs --image")
        model, inputs, processor = real_model_and_inputs(args.model, args.image, args.question)
    else:
        model, inputs, processor = tiny_model_and_inputs()

    base, t_base = run(model, inputs, args.max_new_tokens)
    todre.hf.enable(model, ratio=args.ratio, tau=args.tau, probe_layers=args.probe_layer,
                    stage2=not args.no_stage2)
    pruned, t_pruned = run(model, inputs, args.max_new_tokens)
    st = todre.hf.stats(model)
    todre.hf.disable(model)

    print(f"visual tokens per image: {st['image_tokens']} -> kept {st['kept_tokens']}")
    if "drop_layer" in st:
        print(f"stage 2 drop layer per sequence: {st['drop_layer']}; ratios (t2v, v2t): "
              + ", ".join(f"layer {j}: ({a:.3f}, {b:.3f})" for (_, j), (a, b)
                          in st["ratios"].items()))
    decode = processor.batch_decode if processor is not None else (lambda x, **k: x.tolist())
    print(f"unpruned ({t_base:.2f} s):", decode(base, skip_special_tokens=True)[0])
    print(f"ToDRE    ({t_pruned:.2f} s):", decode(pruned, skip_special_tokens=True)[0])


if __name__ == "__main__":
    main()
