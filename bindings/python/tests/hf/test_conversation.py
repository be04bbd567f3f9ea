"""Continued conversations: a chat turn that adds a new image and continues from
the returned past_key_values is pruned like a first turn, its tokens get the
positions the plain model gives them, and a later text-only turn continues.

A continued turn passes the whole conversation as input_ids (the returned
sequences, then the new turn) and the pixel inputs of its new images only, as
the plain model needs. References are independent of todre.hf: the plain
model's own continuation, the plain model's one-shot generate() over the whole
conversation, and the plain model given the pruned conversation built here
from the kept indices that stats() reports."""

import copy

import pytest
import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

import todre
import todre.hf
from tiny_models import (LLAVA_IMAGE, QWEN_END, QWEN_IMAGE, QWEN_START, llava_next,
                         qwen2_5_vl)

# generated tokens never imitate an image placeholder (the tiny vocabularies hold them)
KW = dict(do_sample=False, return_dict_in_generate=True, output_scores=True,
          suppress_tokens=[LLAVA_IMAGE, QWEN_IMAGE, QWEN_START, QWEN_END, 152])
NEW = 3


def expected_k(n, ratio):
    return max(1, min(n, int(ratio * n + 0.5)))


class Chat:
    """A three-turn conversation for one model: turn 1 with image A, turn 2 adding
    image B, turn 3 text only."""

    def __init__(self, kind, model, types=True, sizes=None):
        self.kind, self.model, self.types = kind, model, types
        if kind == "llava":
            sizes = sizes or ((40, 60), (64, 30))
            self.images = [self._llava_image(s, 1 + i) for i, s in enumerate(sizes)]
            self.token = LLAVA_IMAGE
        else:
            sizes = sizes or ((1, 8, 12), (1, 4, 8))
            self.images = [self._qwen_image(s, 1 + i) for i, s in enumerate(sizes)]
            self.token = QWEN_IMAGE
        self.n = [img["n"] for img in self.images]

    def _llava_image(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        s = torch.tensor([size])
        n = image_size_to_num_patches(s[0], self.model.config.image_grid_pinpoints, 32)
        pv = torch.randn(1, n, 3, 32, 32, generator=g)
        with torch.no_grad():
            f = self.model.model.get_image_features(pv, s, return_dict=True).pooler_output[0]
        return dict(inputs=dict(pixel_values=pv, image_sizes=s), n=f.shape[0], feats=f)

    def _qwen_image(self, grid, seed):
        g = torch.Generator().manual_seed(seed)
        t = torch.tensor([grid])
        pv = torch.randn(int(t.prod()), 24, generator=g)
        with torch.no_grad():
            f = self.model.model.get_image_features(pv, t, return_dict=True).pooler_output[0]
        return dict(inputs=dict(pixel_values=pv, image_grid_thw=t), n=f.shape[0], feats=f)

    def segment(self, i, text):
        """[text..., <image i>] for one turn."""
        if self.kind == "llava":
            return list(text) + [LLAVA_IMAGE] * self.n[i] + [7]
        return list(text) + [QWEN_START] + [QWEN_IMAGE] * self.n[i] + [QWEN_END, 7]

    def extra(self, ids):
        if self.kind == "qwen" and self.types:
            return dict(mm_token_type_ids=(ids == QWEN_IMAGE).int())
        return {}

    def all_images(self, upto):
        imgs = [img["inputs"] for img in self.images[:upto]]
        if self.kind == "qwen":
            return dict(pixel_values=torch.cat([i["pixel_values"] for i in imgs]),
                        image_grid_thw=torch.cat([i["image_grid_thw"] for i in imgs]))
        P = max(i["pixel_values"].shape[1] for i in imgs)
        pv = torch.cat([torch.nn.functional.pad(i["pixel_values"],
                                                (0, 0, 0, 0, 0, 0, 0, P - i["pixel_values"].shape[1]))
                        for i in imgs])
        return dict(pixel_values=pv, image_sizes=torch.cat([i["image_sizes"] for i in imgs]))

    def run(self, model=None, enable=None):
        """Turns 1-3 on `model` (default: the chat's), enabled with `enable` for all
        three when given. Returns (outputs, stats per turn, input_ids per turn)."""
        model = model or self.model
        if enable is not None:
            todre.hf.enable(model, **enable)
        outs, stats, ids = [], [], []
        try:
            with torch.no_grad():
                t1 = torch.tensor([[1, 5] + self.segment(0, (6,)) + [8, 9]])
                out = model.generate(input_ids=t1, attention_mask=torch.ones_like(t1),
                                     **self.extra(t1), **self.images[0]["inputs"],
                                     max_new_tokens=NEW, **KW)
                outs.append(out), stats.append(todre.hf.stats(model)), ids.append(t1)
                t2 = torch.cat([out.sequences, torch.tensor([self.segment(1, (10, 11)) + [12]])], 1)
                out = model.generate(input_ids=t2, attention_mask=torch.ones_like(t2),
                                     **self.extra(t2), **self.images[1]["inputs"],
                                     past_key_values=out.past_key_values, max_new_tokens=NEW, **KW)
                outs.append(out), stats.append(todre.hf.stats(model)), ids.append(t2)
                t3 = torch.cat([out.sequences, torch.tensor([[20, 21]])], 1)
                out = model.generate(input_ids=t3, attention_mask=torch.ones_like(t3),
                                     **self.extra(t3), past_key_values=out.past_key_values,
                                     max_new_tokens=NEW, **KW)
                outs.append(out), stats.append(todre.hf.stats(model)), ids.append(t3)
        finally:
            if enable is not None:
                todre.hf.disable(model)
        return outs, stats, ids

    def one_shot(self, ids, upto):
        """The plain model's generate() over the whole conversation, no cache."""
        with torch.no_grad():
            return self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                       **self.extra(ids), **self.all_images(upto),
                                       max_new_tokens=NEW, **KW)

    def pruned_one_shot(self, ids, kept):
        """The plain model on the pruned conversation: the caller's columns without
        the dropped placeholders, the kept features, and (Qwen) the positions the
        plain model gives the unpruned conversation, at the kept columns."""
        row = ids[0]
        img_cols = torch.nonzero(row == self.token).flatten()
        keep = torch.ones(row.numel(), dtype=torch.bool)
        start = 0
        for i, k in enumerate(kept):
            own = img_cols[start:start + self.n[i]]
            keep[own] = False
            keep[own[k]] = True
            start += self.n[i]
        feats = [self.images[i]["feats"][k] for i, k in enumerate(kept)]
        pruned = row[keep][None]
        kw = dict(input_ids=pruned, attention_mask=torch.ones_like(pruned),
                  mm_encoder_outputs={"image": BaseModelOutputWithPooling(pooler_output=feats)})
        if self.kind == "qwen":
            if self.types:
                grids = torch.cat([img["inputs"]["image_grid_thw"] for img in self.images[:len(kept)]])
                full, _ = self.model.model.get_rope_index(
                    ids, mm_token_type_ids=(ids == QWEN_IMAGE).int(), image_grid_thw=grids,
                    attention_mask=torch.ones_like(ids))
            else:
                full = torch.arange(ids.shape[1])[None, None].expand(3, 1, -1)
            mrope = full[:, :, keep]
            text = torch.arange(pruned.shape[1])[None, None]
            kw["position_ids"] = torch.cat([text, mrope], dim=0)
            kw.update(self.extra(pruned))
        with torch.no_grad():
            return self.model.generate(**kw, max_new_tokens=NEW, **KW)


def close(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=1e-4, rtol=1e-4)


def same(a, b):
    assert torch.equal(a.sequences, b.sequences)
    assert all(torch.equal(x, y) for x, y in zip(a.scores, b.scores))


CASES = [("llava", True), ("qwen", True), ("qwen", False)]
IDS = ["llava", "qwen", "qwen-no-token-types"]


@pytest.fixture(scope="module")
def models():
    return {"llava": llava_next(num_layers=3), "qwen": qwen2_5_vl(num_layers=3)}


@pytest.mark.parametrize("kind,types", CASES, ids=IDS)
@pytest.mark.parametrize("cfg", (dict(ratio=1.0, stage2=False), dict(ratio=1.0, tau=0.0)),
                         ids=("stage1", "both"))
def test_identity_settings_continue_as_the_plain_model(models, kind, types, cfg):
    chat = Chat(kind, models[kind], types)
    outs, stats, ids = chat.run(enable=cfg)
    assert stats[1]["image_tokens"] == [chat.n[1]] == stats[1]["kept_tokens"]
    assert stats[1]["llm_image_tokens"] == [chat.n[1]]
    assert "image_tokens" not in stats[2]                   # the text-only turn
    if kind == "qwen" and types:
        # transformers' own continuation cannot place a new image in 3-D (its
        # get_rope_index needs every image's grid); the plain model's one-shot
        # generate() over the whole conversation is the reference
        for turn, upto in ((1, 2), (2, 2)):
            ref = chat.one_shot(ids[turn], upto)
            assert torch.equal(outs[turn].sequences, ref.sequences)
            close(outs[turn].scores, ref.scores)
    else:
        plain, _, _ = chat.run()
        for got, want in zip(outs, plain):
            same(got, want)
        assert torch.equal(outs[2].sequences, chat.one_shot(ids[2], 2).sequences)


@pytest.mark.parametrize("kind,types", CASES, ids=IDS)
def test_a_new_image_is_pruned_like_a_first_turn(models, kind, types):
    """ratio 0.5, stage 2 off: the new image keeps k of its tokens, they reach the
    LLM as exactly the kept features at the positions the plain model gives them,
    and every turn equals the plain model on the pruned conversation."""
    chat = Chat(kind, models[kind], types)
    seen = []
    lm = chat.model.model.language_model
    handle = lm.register_forward_pre_hook(
        lambda m, a, k: seen.append((k["inputs_embeds"], k.get("position_ids"))), with_kwargs=True)
    try:
        outs, stats, ids = chat.run(enable=dict(ratio=0.5, stage2=False))
    finally:
        handle.remove()
    kA, kB = expected_k(chat.n[0], 0.5), expected_k(chat.n[1], 0.5)
    assert stats[0]["kept_tokens"] == [kA] and stats[1]["kept_tokens"] == [kB]
    assert stats[1]["image_tokens"] == [chat.n[1]] and stats[1]["llm_image_tokens"] == [kB]
    kept = [stats[0]["kept_indices"][0], stats[1]["kept_indices"][0]]

    # turn 2's prefill (the NEW-th forward) holds the uncached columns only
    embeds, positions = seen[NEW]
    uncached = ids[1].shape[1] - (ids[0].shape[1] + NEW - 1)
    removed = chat.n[1] - kB
    assert embeds.shape[1] == uncached - removed
    cols = torch.nonzero(ids[1][0, -uncached:] == chat.token).flatten()
    keep = torch.ones(uncached, dtype=torch.bool)
    keep[cols] = False
    keep[cols[kept[1]]] = True
    img_rows = torch.nonzero((ids[1][0, -uncached:] == chat.token)[keep]).flatten()
    assert torch.equal(embeds[0, img_rows], chat.images[1]["feats"][kept[1]])
    if kind == "qwen" and types:
        grids = torch.cat([img["inputs"]["image_grid_thw"] for img in chat.images])
        full, _ = chat.model.model.get_rope_index(
            ids[1], mm_token_type_ids=(ids[1] == QWEN_IMAGE).int(), image_grid_thw=grids,
            attention_mask=torch.ones_like(ids[1]))
        assert torch.equal(positions[1:, 0], full[:, 0, -uncached:][:, keep])

    for turn in (0, 1, 2):
        ref = chat.pruned_one_shot(ids[turn], kept[:turn + 1] if turn < 2 else kept)
        assert torch.equal(outs[turn].sequences[:, -NEW:], ref.sequences[:, -NEW:]), turn
        close(outs[turn].scores, ref.scores)


@pytest.mark.parametrize("kind", ("llava", "qwen"))
def test_a_new_image_after_a_drop(models, kind):
    """Turn 1 drops its visual tokens after layer 1; turn 2's new image is pruned by
    stage 1 and stays in every layer (stage 2 decides in a conversation's first
    prefill); the layers after the drop keep their shorter cache throughout."""
    chat = Chat(kind, models[kind])
    outs, stats, ids = chat.run(enable=dict(ratio=0.5, tau=1.0, probe_layers=[1]))
    assert stats[0]["drop_layer"] == [1]
    kA, kB = expected_k(chat.n[0], 0.5), expected_k(chat.n[1], 0.5)
    assert stats[1]["kept_tokens"] == [kB]
    total = ids[2].shape[1] + NEW - 1 - (chat.n[0] - kA) - (chat.n[1] - kB)
    lengths = [layer.keys.shape[-2] for layer in outs[2].past_key_values.layers]
    assert lengths == [total, total, total - kA]
    assert outs[2].sequences.shape == (1, ids[2].shape[1] + NEW)
    assert torch.equal(outs[2].sequences[:, :ids[2].shape[1]], ids[2])


@pytest.mark.parametrize("cfg", (dict(ratio=0.5, stage2=False),
                                 dict(ratio=0.5, tau=1.0, probe_layers=[1])),
                         ids=("stage1", "both"))
def test_rows_adding_images_of_different_sizes(models, cfg):
    """Two rows continue with new images of different sizes, so they keep different
    numbers of tokens: the shorter row gets masked padding in front of its new
    turn, and each row equals the same conversation alone."""
    model = models["llava"]
    sizes = [((40, 60), (64, 30)), ((64, 30), (32, 32))]
    chats = [Chat("llava", model, sizes=s) for s in sizes]
    alone = [c.run(enable=cfg)[0] for c in chats]

    todre.hf.enable(model, **cfg)
    try:
        with torch.no_grad():
            rows = [[1, 5] + c.segment(0, (6,)) + [8, 9] for c in chats]
            L = max(len(r) for r in rows)
            t1 = torch.tensor([[0] * (L - len(r)) + r for r in rows])
            m1 = torch.tensor([[0] * (L - len(r)) + [1] * len(r) for r in rows])
            imgs = [c.images[0]["inputs"] for c in chats]
            P = max(i["pixel_values"].shape[1] for i in imgs)
            pv = torch.cat([torch.nn.functional.pad(i["pixel_values"], (0, 0, 0, 0, 0, 0, 0,
                                                    P - i["pixel_values"].shape[1])) for i in imgs])
            out = model.generate(input_ids=t1, attention_mask=m1, pixel_values=pv,
                                 image_sizes=torch.cat([i["image_sizes"] for i in imgs]),
                                 max_new_tokens=NEW, **KW)
            news = [c.segment(1, (10, 11)) + [12] for c in chats]
            W = max(len(s) for s in news)
            t2 = torch.cat([out.sequences, torch.tensor([[0] * (W - len(s)) + s for s in news])], 1)
            m2 = torch.cat([m1, torch.ones(2, NEW), torch.tensor([[0] * (W - len(s)) + [1] * len(s)
                                                                  for s in news])], 1).long()
            imgs = [c.images[1]["inputs"] for c in chats]
            P = max(i["pixel_values"].shape[1] for i in imgs)
            pv = torch.cat([torch.nn.functional.pad(i["pixel_values"], (0, 0, 0, 0, 0, 0, 0,
                                                    P - i["pixel_values"].shape[1])) for i in imgs])
            out2 = model.generate(input_ids=t2, attention_mask=m2, pixel_values=pv,
                                  image_sizes=torch.cat([i["image_sizes"] for i in imgs]),
                                  past_key_values=out.past_key_values, max_new_tokens=NEW, **KW)
            st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    ks = [expected_k(c.n[1], 0.5) for c in chats]
    assert ks[0] != ks[1] and st["kept_tokens"] == ks and st["llm_image_tokens"] == ks
    for b in range(2):
        assert torch.equal(out2.sequences[b, -NEW:], alone[b][1].sequences[0, -NEW:])
        close([s[b] for s in out2.scores], [s[0] for s in alone[b][1].scores])


def test_a_cache_of_the_plain_model_continued_with_a_new_image(models):
    """Turn 1 by the plain model, turn 2 by the enabled one: the new image is pruned
    (LLaVA-NeXT; Qwen2.5-VL after a text-only turn 1); Qwen2.5-VL refuses when the
    plain turn held an image whose 3-D positions it cannot know."""
    for kind in ("llava", "qwen"):
        model = models[kind]
        chat = Chat(kind, model)
        with torch.no_grad():
            text_only = kind == "qwen"
            t1 = torch.tensor([[1, 5, 6, 8, 9]]) if text_only else \
                torch.tensor([[1, 5] + chat.segment(0, (6,)) + [8, 9]])
            out = model.generate(input_ids=t1, attention_mask=torch.ones_like(t1),
                                 **({} if text_only else chat.images[0]["inputs"]),
                                 max_new_tokens=NEW, **KW)
            t2 = torch.cat([out.sequences, torch.tensor([chat.segment(1, (10, 11)) + [12]])], 1)
            todre.hf.enable(model, ratio=0.5, stage2=False)
            try:
                got = model.generate(input_ids=t2, attention_mask=torch.ones_like(t2),
                                     **chat.extra(t2), **chat.images[1]["inputs"],
                                     past_key_values=copy.deepcopy(out.past_key_values),
                                     max_new_tokens=NEW, **KW)
                st = todre.hf.stats(model)
            finally:
                todre.hf.disable(model)
        kB = expected_k(chat.n[1], 0.5)
        assert st["kept_tokens"] == [kB] and st["llm_image_tokens"] == [kB]
        assert got.sequences.shape == (1, t2.shape[1] + NEW)

    chat = Chat("qwen", models["qwen"])
    model = chat.model
    with torch.no_grad():
        t1 = torch.tensor([[1, 5] + chat.segment(0, (6,)) + [8, 9]])
        out = model.generate(input_ids=t1, attention_mask=torch.ones_like(t1), **chat.extra(t1),
                             **chat.images[0]["inputs"], max_new_tokens=NEW, **KW)
    t2 = torch.cat([out.sequences, torch.tensor([chat.segment(1, (10, 11)) + [12]])], 1)
    todre.hf.enable(model, ratio=0.5, stage2=False)
    try:
        with pytest.raises(todre.TodreError) as err:
            model.generate(input_ids=t2, attention_mask=torch.ones_like(t2), **chat.extra(t2),
                           **chat.images[1]["inputs"], past_key_values=out.past_key_values,
                           max_new_tokens=NEW, **KW)
    finally:
        todre.hf.disable(model)
    assert err.value.status == todre.Status.UNSUPPORTED
