"""Which patches of a photograph ToDRE, DivPrune and CLS top-k keep, drawn.

Writes one PNG with three panels over the same photograph, at the same budget:
  * ToDRE    : greedy max-sum diversification from a pivot (the argmax of the
               CLS map); the pivot is marked with a ring;
  * DivPrune : greedy max-min diversification (its own 'isolated' pivot);
  * CLS top-k: the k patches with the largest CLS value.
Kept patches are shown at full brightness with an outline, dropped ones dimmed.
Every selection is a todre.select() call (libtodre), nothing re-implemented.

The photograph ships inside scikit-image's wheel (skimage/data/*.png, read
from the file, so nothing is downloaded). The patch features, by default, are
NOT from a trained model (the default needs no model download); they are fixed,
hand-made descriptors, and the "CLS" map is a saliency stand-in:
  * geometry: a GRID x GRID grid of PATCH-px patches of a centre crop resized to
    GRID * PATCH px (default 24 x 24 patches of 14 px of a 336-px crop: CLIP
    ViT-L/14 at 336 px, LLaVA-NeXT's base image);
  * feature of a patch (35 values): a colour histogram (8 bins per R, G, B
    channel, fractions of the patch's pixels; 24 values) scaled to unit L2
    norm, then weight 1.0; a gradient-orientation histogram (9 unsigned bins
    over 0..180 degrees, weighted by Sobel gradient magnitude: a HOG cell
    without block normalisation; 9 values) divided by the largest such
    histogram norm over the image (so flat patches get a short vector), then
    weight 1.0; the patch centre (x, y) in [-1, 1] (2 values), weight 0.5;
    then the image's mean feature is subtracted (so cosine similarities
    spread over [-1, 1], as they do for real encoders' centred tokens);
    libtodre L2-normalises rows itself (docs/semantics.md);
  * "CLS" map: edge energy, the mean Sobel gradient magnitude of each patch,
    a saliency proxy; it is NOT a model's attention.

With --model DIR the features and the CLS map come from a local Hugging Face
checkpoint's real vision tower instead (LLaVA-NeXT: the CLIP tower's tokens
at vision_feature_layer through the projector, CLS = that layer's [CLS]
attention row averaged over heads; Qwen2.5-VL: the merged tokens, and, having
no [CLS], the mean attention each merged token receives in the last
full-attention block). See docs/picture.md.

Run:  TODRE_LIBRARY=build/libtodre.so.1 PYTHONPATH=bindings/python/src \\
      python3 examples/python/picture.py --out build/demo/todre_picture.png
"""

import argparse
import json
import os
import sys

import numpy as np

import todre

PHOTOS = {  # name: (file in skimage/data, credit shown on the picture)
    "astronaut": ("astronaut.png", "astronaut Eileen Collins (NASA, public domain)"),
    "chelsea": ("chelsea.png", "Chelsea the cat (Stefan van der Walt, CC0)"),
    "coffee": ("coffee.png", "a cup of coffee (Rachel Michetti, CC0)"),
    "rocket": ("rocket.jpg", "the launch of DSCOVR on a Falcon 9 (SpaceX, public domain)"),
}

METHODS = (  # key, panel title, todre.select arguments
    ("todre", "ToDRE: max-sum from a pivot", dict(objective="max-sum", pivot="cls")),
    ("divprune", "DivPrune: max-min", dict(objective="max-min")),
    ("cls_topk", "CLS top-k", dict(objective="cls-topk")),
)


# ---- the photograph ---------------------------------------------------------

def photo_path(name):
    """The sample image's file inside the installed scikit-image (never fetched)."""
    import skimage
    if name not in PHOTOS:
        sys.exit(f"picture.py: --image: {name!r} is not one of {', '.join(PHOTOS)}")
    path = os.path.join(os.path.dirname(skimage.__file__), "data", PHOTOS[name][0])
    if not os.path.exists(path):
        sys.exit(f"picture.py: {path} is not in this scikit-image; pick another --image")
    return path


def load_crop(path, side):
    """Centre square crop of the photograph, resized to side x side, uint8 RGB."""
    from PIL import Image
    img = Image.open(path).convert("RGB")
    w, h = img.size
    s = min(w, h)
    box = ((w - s) // 2, (h - s) // 2, (w - s) // 2 + s, (h - s) // 2 + s)
    return np.asarray(img.resize((side, side), Image.Resampling.BICUBIC, box=box))


# ---- hand-made patch features (the default) ---------------------------------

COLOUR_BINS, ORIENT_BINS = 8, 9
W_COLOUR, W_ORIENT, W_POS = 1.0, 1.0, 0.5


def handmade_features(rgb, grid, patch):
    """(features [grid*grid, 37] float32, edge energy [grid*grid] float32),
    patches in raster order (row-major, as a ViT lays its tokens out)."""
    from skimage.color import rgb2gray
    from skimage.filters import sobel_h, sobel_v
    n = grid * grid
    x = rgb.astype(np.float64) / 255.0
    gy, gx = sobel_h(rgb2gray(x)), sobel_v(rgb2gray(x))
    mag = np.hypot(gx, gy)
    ang = np.mod(np.degrees(np.arctan2(gy, gx)), 180.0)

    def cells(a):  # [grid*grid, patch*patch, ...] in raster order
        a = a.reshape(grid, patch, grid, patch, *a.shape[2:]).swapaxes(1, 2)
        return a.reshape(n, patch * patch, *a.shape[4:])

    px, pm, pa = cells(x), cells(mag), cells(ang)
    colour = np.zeros((n, 3 * COLOUR_BINS))
    cbin = np.minimum((px * COLOUR_BINS).astype(int), COLOUR_BINS - 1)
    for c in range(3):
        for b in range(COLOUR_BINS):
            colour[:, c * COLOUR_BINS + b] = (cbin[:, :, c] == b).mean(axis=1)
    colour /= np.linalg.norm(colour, axis=1, keepdims=True)
    orient = np.zeros((n, ORIENT_BINS))
    obin = np.minimum((pa / (180.0 / ORIENT_BINS)).astype(int), ORIENT_BINS - 1)
    for b in range(ORIENT_BINS):
        orient[:, b] = np.where(obin == b, pm, 0.0).sum(axis=1)
    orient /= max(np.linalg.norm(orient, axis=1).max(), 1e-12)
    r, c = np.divmod(np.arange(n), grid)
    pos = np.stack([(c + 0.5) / grid * 2 - 1, (r + 0.5) / grid * 2 - 1], axis=1)
    feats = np.concatenate([W_COLOUR * colour, W_ORIENT * orient, W_POS * pos], axis=1)
    feats -= feats.mean(axis=0)
    energy = pm.mean(axis=1)
    return feats.astype(np.float32), energy.astype(np.float32)


def handmade_caption(grid, patch):
    """Paragraphs saying what the default features are (drawn on the picture)."""
    side = grid * patch
    return [
        f"Features (no trained encoder was available): a {grid}x{grid} grid of {patch}-px "
        f"patches of a {side}-px centre crop (the geometry of CLIP ViT-L/14 at 336 px); per "
        f"patch: RGB colour histogram (3x{COLOUR_BINS} bins) + gradient-orientation histogram "
        f"({ORIENT_BINS} bins, magnitude-weighted) + (x, y) position, mean-centred. "
        f"\"CLS\" map: edge energy (mean Sobel gradient magnitude of the patch), a saliency "
        f"proxy, NOT a model's attention.",
    ]


# ---- a Hugging Face checkpoint's vision tower (--model DIR) -----------------

def model_features(model_dir, photo, grid_hint):
    """(features [n, d] float32, cls [n] float32, grid, caption, name of the CLS map)."""
    import torch
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(model_dir)
    kind = cfg.model_type
    torch.set_grad_enabled(False)
    if kind == "llava_next":
        return _llava_next(model_dir, cfg, photo)
    if kind == "qwen2_5_vl":
        return _qwen2_5_vl(model_dir, cfg, photo, grid_hint)
    sys.exit(f"picture.py: --model: model_type {kind!r}; supported: llava_next, qwen2_5_vl")


def _norm_stats(model_dir, default_mean, default_std):
    """image_mean / image_std of the checkpoint's preprocessor_config.json, if any."""
    path = os.path.join(model_dir, "preprocessor_config.json")
    if os.path.exists(path):
        with open(path) as f:
            p = json.load(f)
        return p.get("image_mean", default_mean), p.get("image_std", default_std)
    return default_mean, default_std


CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def _pixels(crop, mean, std):
    x = crop.astype(np.float32) / 255.0
    return (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)  # [H, W, 3]


def _llava_next(model_dir, cfg, photo):
    import torch
    from transformers import LlavaNextForConditionalGeneration
    model = LlavaNextForConditionalGeneration.from_pretrained(
        model_dir, attn_implementation="eager", dtype="auto").eval()
    vc = cfg.vision_config
    side, patch = vc.image_size, vc.patch_size
    grid = side // patch
    crop = load_crop(photo, side)
    mean, std = _norm_stats(model_dir, CLIP_MEAN, CLIP_STD)
    tower = model.model.vision_tower
    pv = torch.from_numpy(_pixels(crop, mean, std)).permute(2, 0, 1)[None].to(tower.dtype)
    out = tower(pv, output_hidden_states=True, output_attentions=True)
    layer = cfg.vision_feature_layer
    layer = layer[-1] if isinstance(layer, (list, tuple)) else layer
    nlayers = len(out.attentions)
    h = layer if layer >= 0 else nlayers + 1 + layer   # hidden_states[h] = output of layer h-1
    hidden = out.hidden_states[h][0, 1:]               # drop [CLS] ('default' strategy)
    feats = model.model.multi_modal_projector(hidden)
    cls = out.attentions[max(h - 1, 0)][0].mean(dim=0)[0, 1:]   # [CLS] row, heads averaged
    caption = [
        f"Features: LLaVA-NeXT vision tower of {os.path.basename(os.path.abspath(model_dir))} "
        f"(CLIP, {grid}x{grid} patches of {patch} px of a {side}-px centre crop), layer "
        f"{layer}, through the projector.",
        "\"CLS\" map: the [CLS] row of that layer's attention, averaged over heads. "
        "(With a random-weight checkpoint, as in the tests, both are meaningless.)",
    ]
    return feats.float().numpy(), cls.float().numpy(), grid, caption, "[CLS] attention"


def _window_index(visual, thw):
    """The merged-token permutation the tower runs its blocks in (window order)."""
    if hasattr(visual, "get_window_index"):                 # transformers 4.x
        return visual.get_window_index(thw)[0]
    from transformers.vision_utils import get_vision_window_index   # 5.x
    return get_vision_window_index(thw, spatial_merge_size=visual.spatial_merge_size,
                                   window_size=visual.window_size,
                                   patch_size=visual.patch_size, kwargs={})[0]


def _qwen2_5_vl(model_dir, cfg, photo, grid_hint):
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as mq
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        model_dir, attn_implementation="eager", dtype="auto").eval()
    vc = cfg.vision_config
    p, m, tp = vc.patch_size, vc.spatial_merge_size, vc.temporal_patch_size
    grid = grid_hint                       # merged tokens per side
    side = grid * m * p
    crop = load_crop(photo, side)
    mean, std = _norm_stats(model_dir, CLIP_MEAN, CLIP_STD)
    x = _pixels(crop, mean, std).transpose(2, 0, 1)                # [3, H, W]
    x = np.repeat(x[None], tp, axis=0)                              # [tp, 3, H, W] (still image)
    g = grid * m                                                    # patches per side
    # the Qwen2-VL image processor's patch layout: merge blocks in raster order
    x = x.reshape(1, tp, 3, g // m, m, p, g // m, m, p).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    visual = model.model.visual
    pv = torch.from_numpy(np.ascontiguousarray(x.reshape(g * g, 3 * tp * p * p)))
    pv = pv.to(visual.dtype)
    thw = torch.tensor([[1, g, g]])
    blk = visual.blocks[vc.fullatt_block_indexes[-1]].attn
    seen = {}

    def hook(attn, args, kwargs):     # recompute that block's attention probabilities
        hs = kwargs.get("hidden_states", args[0] if args else None)
        cos, sin = kwargs["position_embeddings"]
        q, k, _ = attn.qkv(hs).reshape(hs.shape[0], 3, attn.num_heads, -1).permute(1, 0, 2, 3)
        q, k = mq.apply_rotary_pos_emb_vision(q, k, cos, sin)
        probs = torch.softmax(torch.einsum("qhd,khd->hqk", q.float(), k.float())
                              * attn.scaling, dim=-1)
        seen["received"] = probs.mean(dim=(0, 1))   # attention each patch receives
    handle = blk.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        feats = model.model.get_image_features(pv, thw, return_dict=True).pooler_output[0]
    finally:
        handle.remove()
    # the blocks run in window order (groups of m*m patches = merged tokens)
    window_index = _window_index(visual, thw)
    per_unit = seen["received"].reshape(-1, m * m).sum(dim=1)      # window order
    cls = torch.empty_like(per_unit)
    cls[window_index] = per_unit                                   # raster order
    caption = [
        f"Features: Qwen2.5-VL vision tower of {os.path.basename(os.path.abspath(model_dir))}: "
        f"{grid}x{grid} merged tokens ({m}x{m} patches of {p} px) of a {side}-px centre crop.",
        "\"CLS\" map (the tower has no [CLS]): attention each merged token receives in the "
        "last full-attention block, averaged over heads and queries. "
        "(With a random-weight checkpoint, as in the tests, both are meaningless.)",
    ]
    return feats.float().numpy(), cls.float().numpy(), grid, caption, "attention received"


# ---- selection (libtodre) ---------------------------------------------------

def run_selections(feats, cls, k):
    """{method: {'selection': [...] (first = pivot), 'kept': [...] ascending}}."""
    out = {}
    for key, _, kw in METHODS:
        sel, pos = todre.select(feats, keep=k, cls=cls, order="both", **kw)
        out[key] = {"selection": sel.tolist(), "kept": pos.tolist(), "args": kw}
    return out


# ---- drawing ----------------------------------------------------------------

def _font(size):
    from PIL import ImageFont
    try:
        return ImageFont.load_default(size=size)
    except TypeError:   # Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


KEPT_EDGE, PIVOT_RED = (255, 214, 0), (235, 20, 60)


def _panel(crop, grid, kept, pivot):
    """One panel: crop is the drawn crop, grid * cell px square."""
    from PIL import Image, ImageDraw
    side = crop.shape[0]
    c = side // grid
    grey = crop.astype(np.float32).mean(axis=2, keepdims=True)
    dim = (0.33 * (0.3 * crop + 0.7 * grey)).astype(np.uint8)       # dimmed, desaturated
    mask = np.zeros((grid, grid), bool)
    mask.flat[kept] = True
    big = np.kron(mask, np.ones((c, c), bool))
    img = Image.fromarray(np.where(big[..., None], crop, dim))
    d = ImageDraw.Draw(img)
    for i in kept:
        r, q = divmod(i, grid)
        d.rectangle([q * c, r * c, (q + 1) * c - 1, (r + 1) * c - 1], outline=KEPT_EDGE,
                    width=max(1, c // 12))
    if pivot is not None:
        r, q = divmod(pivot, grid)
        rad = max(12, min(1.5 * c, 0.5 * c + 14))      # around the cell, not over others
        _ring(d, (q + 0.5) * c, (r + 0.5) * c, rad)
        tag, font = "pivot", _font(15)
        w = d.textlength(tag, font=font)
        tx = (q + 0.5) * c - w / 2
        ty = (r + 0.5) * c + rad + 3
        if ty + 20 > side:                                  # no room below: above
            ty = (r + 0.5) * c - rad - 23
        tx = min(max(tx, 2), side - w - 8)
        d.rectangle([tx - 3, ty - 1, tx + w + 3, ty + 18], fill=PIVOT_RED)
        d.text((tx, ty), tag, fill=(255, 255, 255), font=font)
    return img


def _ring(d, cx, cy, rad):
    for w, col, pad in ((7, (255, 255, 255), 1), (4, PIVOT_RED, 0)):
        d.ellipse([cx - rad - pad, cy - rad - pad, cx + rad + pad, cy + rad + pad],
                  outline=col, width=w)


def _wrap(d, text, font, width):
    lines, line = [], ""
    for word in text.split(" "):
        trial = word if not line else line + " " + word
        if line and d.textlength(trial, font=font) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return lines + [line]


def draw(crop, grid, sel, k, n, ratio, caption, credit, cls_name):
    """(picture, [(x, y) of each panel's top-left corner]). crop: the drawn crop
    (grid * cell px square); caption: paragraphs about the features, wrapped
    to the picture's width."""
    from PIL import Image, ImageDraw
    side = crop.shape[0]
    gap, label_h, line_h = 16, 28, 21
    f_title, f_label, f_cap = _font(23), _font(19), _font(16)
    width = 3 * side + 4 * gap
    scratch = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    paras = caption + [f"Kept: outlined; dropped: dimmed. Ring: ToDRE's pivot (argmax of the "
                       f"\"CLS\" map). Selection: libtodre {todre.version()} (todre.select). "
                       f"Photo: {credit}, shipped with scikit-image."]
    lines = [ln for p in paras for ln in _wrap(scratch, p, f_cap, width - 2 * gap)]
    top = 14 + 30
    height = top + label_h + side + 12 + line_h * len(lines) + 10
    out = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(out)
    d.text((gap, 12), f"Patches kept at the same budget by each method: {k} of {n} "
           f"(keep ratio {ratio:g})", fill=(0, 0, 0), font=f_title)
    corners = []
    for j, (key, title, _) in enumerate(METHODS):
        x = gap + j * (side + gap)
        if key == "cls_topk":
            title = f"{title} ({cls_name})"
        d.text((x, top + 2), title, fill=(20, 20, 20), font=f_label)
        pivot = sel[key]["selection"][0] if key == "todre" else None
        out.paste(_panel(crop, grid, sel[key]["kept"], pivot), (x, top + label_h))
        corners.append((x, top + label_h))
    y = top + label_h + side + 12
    for line in lines:
        d.text((gap, y), line, fill=(55, 55, 55), font=f_cap)
        y += line_h
    return out, corners


def save_png(img, path):
    """A 256-colour palette PNG: the photo panels compress ~4x better than RGB."""
    from PIL import Image
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    img.quantize(256, method=Image.Quantize.MEDIANCUT,
                 dither=Image.Dither.NONE).save(path, optimize=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/demo/todre_picture.png", help="PNG to write")
    ap.add_argument("--ratio", type=float, default=0.1, help="keep ratio (default 0.1)")
    ap.add_argument("--image", default="astronaut", choices=sorted(PHOTOS),
                    help="scikit-image sample photograph (default astronaut)")
    ap.add_argument("--grid", type=int, default=24,
                    help="patches per side (default 24; with --model: Qwen2.5-VL only)")
    ap.add_argument("--patch", type=int, default=14, help="patch size in px (default 14)")
    ap.add_argument("--panel", type=int, default=336,
                    help="drawn size of each panel in px, rounded to whole cells (default 336)")
    ap.add_argument("--model", metavar="DIR",
                    help="local Hugging Face LLaVA-NeXT or Qwen2.5-VL checkpoint: its vision "
                         "tower's features and CLS attention instead of the hand-made ones")
    ap.add_argument("--json", metavar="PATH", help="also write the kept indices as JSON")
    ap.add_argument("--features", metavar="PATH",
                    help="also write the features and CLS map as .npz (emb, cls)")
    args = ap.parse_args(argv)

    photo = photo_path(args.image)
    if args.model:
        feats, cls, grid, caption, cls_name = model_features(args.model, photo, args.grid)
    else:
        grid = args.grid
        feats, cls = handmade_features(load_crop(photo, grid * args.patch), grid, args.patch)
        caption, cls_name = handmade_caption(grid, args.patch), "edge energy"
    n = feats.shape[0]
    k = todre.SelectConfig(ratio=args.ratio).keep_count(n)
    sel = run_selections(feats, cls, k)
    cell = max(1, round(args.panel / grid))
    shown = load_crop(photo, grid * cell)   # the same crop, at the drawn size
    img, corners = draw(shown, grid, sel, k, n, args.ratio, caption, PHOTOS[args.image][1],
                        cls_name)
    save_png(img, args.out)
    if args.features:
        np.savez(args.features, emb=feats, cls=cls)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"n": n, "k": k, "grid": grid, "ratio": args.ratio, "cell": cell,
                       "image": args.image, "model": args.model, "size": list(img.size),
                       "panels": {key: xy for (key, _, _), xy in zip(METHODS, corners)},
                       "methods": sel}, f, indent=1)
    print(f"picture: {args.out} ({img.size[0]}x{img.size[1]}): kept {k} of {n} patches per "
          f"method; ToDRE pivot = patch {sel['todre']['selection'][0]}")


if __name__ == "__main__":
    main()
