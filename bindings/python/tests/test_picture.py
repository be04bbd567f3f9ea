"""examples/python/picture.py (the demo's picture): the PNG it writes, and the
kept patches it draws are libtodre's selections on the features it reports.

The default run (hand-made features of scikit-image's astronaut photograph)
is checked against todre.select, the float64 reference and the drawn pixels;
the --model path runs on tiny random-weight LLaVA-NeXT and Qwen2.5-VL
checkpoints built from configs (tests/hf/tiny_models.py, nothing downloaded)
and is checked against the model's own features and [CLS] attention.
"""

import importlib.util
import json
import os
import sys

import numpy as np
import pytest
from PIL import Image

import todre
import todre_ref as ref

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "examples", "python", "picture.py")
GRID, PATCH, PANEL, RATIO = 12, 14, 168, 0.1     # small: 144 patches, k = 14


def _load_script():
    spec = importlib.util.spec_from_file_location("todre_picture", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


picture = _load_script()


def _run(tmp_path, *extra):
    out, js, npz = tmp_path / "p.png", tmp_path / "p.json", tmp_path / "p.npz"
    picture.main(["--out", str(out), "--json", str(js), "--features", str(npz),
                  "--ratio", str(RATIO), "--panel", str(PANEL), *extra])
    with open(js) as f:
        report = json.load(f)
    feats = np.load(npz)
    return out, report, feats["emb"], feats["cls"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("picture"), "--grid", str(GRID), "--patch", str(PATCH))


def _check_selections(report, emb, cls):
    """Every panel is todre.select's answer on the reported features, k = the budget."""
    n = emb.shape[0]
    k = ref.keep_count(n, ratio=RATIO)
    assert report["n"] == n and report["k"] == k
    for key, _, kw in picture.METHODS:
        got = report["methods"][key]
        sel, pos = todre.select(emb, keep=k, cls=cls, order="both", **kw)
        assert got["selection"] == sel.tolist(), key
        assert got["kept"] == pos.tolist() == sorted(got["selection"]), key
        assert len(got["kept"]) == len(set(got["kept"])) == k, key
        # and the float64 reference (docs/semantics.md) agrees
        assert got["selection"] == ref.select(emb, k, cls=cls, **kw), key
    assert report["methods"]["todre"]["selection"][0] == int(np.argmax(cls))  # pivot 'cls'


def test_png_and_selections(default_run):
    out, report, emb, cls = default_run
    img = Image.open(out)
    side = GRID * round(PANEL / GRID)
    assert img.format == "PNG"
    assert img.size == tuple(report["size"])
    assert img.size[0] == 3 * side + 4 * 16 and side < img.size[1] < side + 400
    assert (report["grid"], report["cell"]) == (GRID, side // GRID)
    # the documented features: 24 colour + 9 orientation + 2 position values per
    # patch, mean-centred; the "CLS" map is a non-negative edge energy
    assert emb.shape == (GRID * GRID, 35) and emb.dtype == np.float32
    assert np.abs(emb.mean(axis=0)).max() < 1e-5
    assert cls.shape == (GRID * GRID,) and cls.min() >= 0 and cls.max() > 0
    _check_selections(report, emb, cls)


def test_panels_show_the_kept_patches(default_run):
    """Kept cells are drawn at the photograph's brightness, dropped ones dimmed
    (cells near ToDRE's pivot ring and its tag are left out)."""
    out, report, _, _ = default_run
    img = np.asarray(Image.open(out).convert("RGB"), np.float64)
    c = report["cell"]
    crop = picture.load_crop(picture.photo_path("astronaut"), GRID * c).astype(np.float64)
    pivot = report["methods"]["todre"]["selection"][0]
    for key, (x0, y0) in report["panels"].items():
        kept = set(report["methods"][key]["kept"])
        for i in range(GRID * GRID):
            r, q = divmod(i, GRID)
            if key == "todre" and max(abs(r - pivot // GRID), abs(q - pivot % GRID)) <= 3:
                continue
            inner = (slice(r * c + 2, (r + 1) * c - 2), slice(q * c + 2, (q + 1) * c - 2))
            shown = img[y0:y0 + GRID * c, x0:x0 + GRID * c][inner].mean()
            photo = crop[inner].mean()
            if i in kept:
                assert abs(shown - photo) < 6 + 0.05 * photo, (key, i)
            else:
                assert shown < 0.45 * photo + 4, (key, i)


def _tiny(kind, tmp_path):
    sys.path.insert(0, os.path.join(HERE, "hf"))
    try:
        import tiny_models
    finally:
        sys.path.remove(os.path.join(HERE, "hf"))
    model = getattr(tiny_models, kind)(num_layers=1)
    path = tmp_path / kind
    model.save_pretrained(path)
    return model, str(path)


def test_model_llava_next(tmp_path):
    """--model with LLaVA-NeXT: the tower's projected tokens and the [CLS] row,
    equal to what todre.hf captures from the same model."""
    import torch
    from todre.hf import _llava_next as hf_llava
    model, path = _tiny("llava_next", tmp_path)
    out, report, emb, cls = _run(tmp_path, "--model", path)
    vc = model.config.vision_config
    grid = vc.image_size // vc.patch_size
    assert report["grid"] == grid and emb.shape[0] == grid * grid
    crop = picture.load_crop(picture.photo_path("astronaut"), vc.image_size)
    pv = torch.from_numpy(picture._pixels(crop, picture.CLIP_MEAN, picture.CLIP_STD))
    tower = model.model.vision_tower
    layer = model.config.vision_feature_layer
    handles = hf_llava.install(model)
    capture = hf_llava._ClsRequest(hf_llava._body(tower).encoder.layers[
        hf_llava._feature_layer_index(tower, layer)].self_attn)
    token = hf_llava._REQUEST.set(capture)
    try:
        with torch.no_grad():
            hidden = tower(pv.permute(2, 0, 1)[None], output_hidden_states=True).hidden_states
            want = model.model.multi_modal_projector(hidden[layer][0, 1:]).numpy()
    finally:
        hf_llava._REQUEST.reset(token)
        for h in handles:
            h.remove()
    np.testing.assert_allclose(emb, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cls, capture.maps[0, 1:].numpy(), rtol=1e-4, atol=1e-6)
    assert Image.open(out).size == tuple(report["size"])
    _check_selections(report, emb, cls)


def test_model_qwen2_5_vl(tmp_path, monkeypatch):
    """--model with Qwen2.5-VL: the merged tokens equal the model's own on the
    pixels its own (PIL) image processor makes; the attention-received map
    equals the one taken from the probabilities the model's eager attention
    returns in its last full-attention block, put in raster order by matching
    the merger's rows to the model's output (the blocks run in window order)."""
    import torch
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as mq
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import \
        Qwen2VLImageProcessorPil
    model, path = _tiny("qwen2_5_vl", tmp_path)
    out, report, emb, cls = _run(tmp_path, "--model", path, "--grid", "8")
    vc = model.config.vision_config
    m2 = vc.spatial_merge_size ** 2
    side = 8 * vc.spatial_merge_size * vc.patch_size
    crop = picture.load_crop(picture.photo_path("astronaut"), side)
    proc = Qwen2VLImageProcessorPil(patch_size=vc.patch_size, merge_size=vc.spatial_merge_size,
                                    temporal_patch_size=vc.temporal_patch_size, do_resize=False)
    px = proc(images=[crop], return_tensors="pt", do_resize=False)
    n_patches = px["pixel_values"].shape[0]
    probs, merger_in = [], []
    eager = mq.eager_attention_forward

    def spy(*args, **kwargs):
        o, w = eager(*args, **kwargs)
        if w.shape[-1] == n_patches:           # a full-attention block (one window)
            probs.append(w)
        return o, w
    monkeypatch.setattr(mq, "eager_attention_forward", spy)
    model.model.visual.config._attn_implementation = "eager"
    hook = model.model.visual.merger.register_forward_pre_hook(
        lambda mod, args: merger_in.append(args[0]))
    with torch.no_grad():
        want = model.model.get_image_features(px["pixel_values"], px["image_grid_thw"],
                                              return_dict=True).pooler_output[0]
        merged = model.model.visual.merger(merger_in[0])
    hook.remove()
    assert report["grid"] == 8 and emb.shape[0] == 64
    np.testing.assert_allclose(emb, want.numpy(), rtol=1e-4, atol=1e-5)
    # window-order row i of the merger is raster token perm[i] of the output
    perm = torch.cdist(merged, want).argmin(dim=1)
    assert sorted(perm.tolist()) == list(range(64)) and perm.tolist() != list(range(64))
    received = probs[-1][0].mean(dim=(0, 1)).reshape(-1, m2).sum(dim=1)
    expect = torch.empty_like(received)
    expect[perm] = received
    np.testing.assert_allclose(cls, expect.numpy(), rtol=1e-4, atol=1e-7)
    assert abs(cls.sum() - 1) < 1e-5
    assert Image.open(out).size == tuple(report["size"])
    _check_selections(report, emb, cls)
