"""ToDRE stage 1 for vLLM's Qwen2_5_VLForConditionalGeneration.

Placeholders: the processor replaces each image's <|image_pad|> by k tokens,
k the library's count (todre.group_counts) for the n merged visual tokens of
its grid, so the
scheduler, the KV cache and the encoder cache all see k from the start.

Encoding: the vision tower and merger run as in vLLM; each image's n merged
tokens (raster (t, h, w) order) go through one todre.select_batch call and the
k kept rows are returned. Each kept row carries its (h, w) cell in the grid
as TAG_COLS trailing columns (flag, h // 128, h % 128, w // 128, w % 128:
integers below 128 are exact in bf16 / fp16). The tags travel with the
embedding through vLLM's encoder cache, so a cached image (prefix caching,
chunked prefill: a chunk gets any slice of it) still knows its positions.

Positions: get_mrope_input_positions gives every text token exactly the
position of the unpruned request (the text after an image continues at
start + max(t, h, w) of the full grid) and every image placeholder the
image's start position on all three axes. embed_input_ids strips the tags and
keeps, for the placeholders of the batch, the (h, w) offsets; forward() adds
them to the h and w rows, so each kept token has the (t, h, w) it has in the
unpruned request. Decoding continues from the unpruned request's next
position (mrope_position_delta). Videos are passed through unpruned.

This is the job vLLM's own SupportsMultiModalPruning.recompute_mrope_positions
does for Efficient Video Sampling, done inside the model instead: in vLLM
0.32 the model runner calls that hook only when video pruning is configured
(`video_pruning_rate > 0`, which also turns EVS on for videos), and the CPU
model runner never calls it (its load_model does not set the flag).
"""

import torch
from vllm.model_executor.models.qwen2_5_vl import (Qwen2_5_VLDummyInputsBuilder,
                                                   Qwen2_5_VLForConditionalGeneration,
                                                   Qwen2_5_VLMultiModalProcessor,
                                                   Qwen2_5_VLProcessingInfo)
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.processing import PromptReplacement

import todre

from ._common import SettingsInfo, attach, host_list, select_each

TAG_COLS = 5
_BASE = 128


class TodreQwen2_5_VLProcessingInfo(SettingsInfo, Qwen2_5_VLProcessingInfo):
    def get_num_image_tokens(self, **kwargs):
        n = super().get_num_image_tokens(**kwargs)
        return self.todre_settings.counts([0, n])[1]


class TodreQwen2_5_VLMultiModalProcessor(Qwen2_5_VLMultiModalProcessor):
    def _get_prompt_updates(self, mm_items, hf_processor_mm_kwargs, out_mm_kwargs):
        updates = super()._get_prompt_updates(mm_items, hf_processor_mm_kwargs, out_mm_kwargs)
        settings = self.info.todre_settings
        if not settings.enabled:
            return updates
        hf_processor = self.info.get_hf_processor(**hf_processor_mm_kwargs)
        merge = self.info.get_image_processor(**hf_processor_mm_kwargs).merge_size ** 2
        token = self.info.get_tokenizer().get_vocab()[hf_processor.image_token]

        def image_tokens(item_idx):
            grid = out_mm_kwargs["image"][item_idx]["image_grid_thw"].data
            return [token] * settings.counts([0, int(grid.prod()) // merge])[1]

        return [PromptReplacement(modality="image", target=[token], replacement=image_tokens)
                if u.modality == "image" else u for u in updates]


def _grid_ids(t, h, w):
    """[t * h * w, 3] (t, h, w) offsets of a grid's merged tokens, raster order."""
    g = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w),
                                   indexing="ij"))
    return g.reshape(3, -1).T.contiguous()


def _tags(kept, grid, n_rows, flag, like):
    """[k, TAG_COLS] tag columns: the (h, w) offsets of the kept tokens of a
    (t, h, w) grid, as todre.positions gives them (policy 'keep': each kept
    token keeps its id)."""
    if kept is None:
        t = torch.zeros(n_rows, TAG_COLS, dtype=like.dtype, device=like.device)
        return t
    ids, _, _ = todre.positions(_grid_ids(*grid), kept.cpu(), "keep")
    h, w = torch.from_numpy(ids[:, 1]), torch.from_numpy(ids[:, 2])
    cols = torch.stack([torch.full_like(h, flag), h // _BASE, h % _BASE,
                        w // _BASE, w % _BASE], dim=1)
    return cols.to(device=like.device, dtype=like.dtype)


@MULTIMODAL_REGISTRY.register_processor(TodreQwen2_5_VLMultiModalProcessor,
                                        info=TodreQwen2_5_VLProcessingInfo,
                                        dummy_inputs=Qwen2_5_VLDummyInputsBuilder)
class TodreQwen2_5_VLForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    """Qwen2.5-VL with ToDRE stage 1 on every image (settings: todre.vllm)."""

    def __init__(self, *, vllm_config, prefix=""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        attach(self, vllm_config, "qwen2_5_vl")
        if self.todre.enabled and self.is_multimodal_pruning_enabled:
            raise todre.TodreError(
                todre.Status.UNSUPPORTED,
                "todre vLLM plugin: Qwen2.5-VL: video_pruning_rate (EVS) together with "
                "ToDRE image pruning is not supported; unset one of them")
        self._todre_pending = None

    # -- encoding -----------------------------------------------------------
    def embed_multimodal(self, **kwargs):
        if not self.todre.enabled:
            return super().embed_multimodal(**kwargs)
        by_modality = self._parse_and_validate_multimodal_inputs(**kwargs)
        out = ()
        for modality, inputs in by_modality.items():
            if modality == "image":
                out += self._todre_images(self._process_image_input(inputs),
                                          inputs["image_grid_thw"])
            elif modality == "video":
                out += tuple(torch.cat([e, _tags(None, None, e.shape[0], 0, e)], dim=1)
                             for e in self._process_video_input(inputs))
        return out

    def _todre_images(self, embeds, grid_thw):
        merge = self.visual.spatial_merge_size
        grids = [(int(t), int(h) // merge, int(w) // merge) for t, h, w in grid_thw.tolist()]
        ns = [e.shape[0] for e in embeds]
        kept, keeps = select_each(embeds, None, None, self.todre)
        out = []
        for e, idx, grid in zip(embeds, kept, grids):
            out.append(torch.cat([e.index_select(0, idx), _tags(idx, grid, idx.numel(), 1, e)],
                                 dim=1))
        if self._todre_trace:
            self._todre_trace.write("select", grids=grids, n=ns, k=keeps,
                                    kept=[host_list(k) for k in kept])
        return tuple(out)

    # -- positions ------------------------------------------------------------
    def get_mrope_input_positions(self, input_tokens, mm_features):
        if not self.todre.enabled:
            return super().get_mrope_input_positions(input_tokens, mm_features)
        pieces, st, nxt = [], 0, 0       # nxt: the next position the unpruned request uses
        lengths = {f.mm_position.offset: f.mm_position.length for f in mm_features}
        images = {f.mm_position.offset for f in mm_features if f.modality == "image"}
        for offset, t, h, w, t_factor in self.iter_mm_grid_thw(mm_features):
            text = offset - st
            pieces.append(torch.arange(text).expand(3, text) + nxt)
            nxt += text
            if offset in images:
                # every kept token starts at the image's start; forward() adds
                # its (h, w) offsets once the selection is known. The text
                # after the image continues where it continues after the
                # unpruned image (todre.positions, policy 'keep': which tokens
                # are kept does not change it)
                pieces.append(torch.full((3, lengths[offset]), nxt, dtype=torch.long))
                nxt += todre.positions(_grid_ids(t, h, w), [0], "keep")[1]
            else:                        # video: unpruned, as vLLM places it
                grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h),
                                                  torch.arange(w), indexing="ij")).reshape(3, -1)
                if t_factor != 1.0:
                    grid[0] = (grid[0] * t_factor).long()
                pieces.append(grid + nxt)
                nxt = int(pieces[-1].max()) + 1
            st = offset + lengths[offset]
        if st < len(input_tokens):
            text = len(input_tokens) - st
            pieces.append(torch.arange(text).expand(3, text) + nxt)
            nxt += text
        positions = torch.cat(pieces, dim=1) if pieces else torch.zeros(3, 0, dtype=torch.long)
        return positions.long(), nxt - len(input_tokens)

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, *, is_multimodal=None,
                        **kwargs):
        self._todre_pending = None
        if multimodal_embeddings is None or is_multimodal is None \
                or len(multimodal_embeddings) == 0:
            return super().embed_input_ids(input_ids, multimodal_embeddings,
                                           is_multimodal=is_multimodal, **kwargs)
        where = is_multimodal.nonzero().flatten()
        if self.todre.enabled:
            from vllm.multimodal.utils import copy_mm_embedding_modality
            tags = torch.cat([e[:, -TAG_COLS:] for e in multimodal_embeddings]).float()
            tags = tags.round().long()
            multimodal_embeddings = [copy_mm_embedding_modality(e, e[:, :-TAG_COLS])
                                     for e in multimodal_embeddings]
            image = tags[:, 0] == 1
            dh = tags[:, 1] * _BASE + tags[:, 2]
            dw = tags[:, 3] * _BASE + tags[:, 4]
            dev = where.device
            self._todre_pending = (where[image.to(dev)], dh[image].to(dev), dw[image].to(dev),
                                   where)
        elif self._todre_trace:
            self._todre_pending = (None, None, None, where)
        return super().embed_input_ids(input_ids, multimodal_embeddings,
                                       is_multimodal=is_multimodal, **kwargs)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None,
                **kwargs):
        pending, self._todre_pending = self._todre_pending, None
        if pending is None and self._todre_trace and positions.dim() == 2:
            self._todre_trace.write("forward", mm_tokens=0, mm_index=[],
                                    positions=host_list(positions.T))
        if pending is not None and positions.dim() == 2:
            idx, dh, dw, where = pending
            if idx is not None and idx.numel():
                idx = idx.to(positions.device)
                positions = positions.clone()
                positions[1, idx] += dh.to(positions.device, positions.dtype)
                positions[2, idx] += dw.to(positions.device, positions.dtype)
            if self._todre_trace:
                w = where.to(positions.device)
                self._todre_trace.write("forward", mm_tokens=int(where.numel()),
                                        mm_index=host_list(w),
                                        positions=host_list(positions.T))
        return super().forward(input_ids, positions, intermediate_tensors, inputs_embeds,
                               **kwargs)
