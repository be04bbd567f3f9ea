"""Stage-1 prompt bookkeeping, shared by the adapters.

A pruned prompt is described by a PromptMap: for every column of the pruned
batch, the caller's column it comes from (or -1 for a padding column that had
to be added so rows of different pruned lengths stack). Every per-column
tensor of the call (ids, mask, embeddings, token types, position ids) is
gathered through the same map, so they stay consistent. Only dropped image
placeholders leave; every other column, padding and masked ones included,
stays in its row in order. Rows are right-aligned: each row keeps exactly
the trailing padding the caller gave it, and a row whose pruned prompt is
shorter than the longest gets masked padding in front, so a row that ends
in a real token in the caller's batch ends in it here too (with left
padding, this is the caller's own layout; with right padding, no row
becomes padded at its end by pruning).

The map travels with the KV cache the call fills, so a later generate() that
continues from that cache with the caller's own sequences is translated the
same way; a continued turn that adds images extends it (PromptMap.extend).
"""

import re

import torch

import todre


def invalid(message):
    return todre.TodreError(todre.Status.INVALID_ARGUMENT, message)


def unsupported(message):
    return todre.TodreError(todre.Status.UNSUPPORTED, message)


# -- the call --------------------------------------------------------------------
_POSITIONAL = ("inputs", "generation_config", "logits_processor", "stopping_criteria",
               "prefix_allowed_tokens_fn", "synced_gpus", "assistant_model", "streamer",
               "negative_prompt_ids", "negative_prompt_attention_mask", "custom_generate")


def keyword_call(args, kwargs):
    """generate()'s arguments as keywords only; `inputs` becomes input_ids (the
    models' main input name), as generate() itself does."""
    if len(args) > len(_POSITIONAL):
        raise TypeError(f"generate() takes at most {len(_POSITIONAL)} positional arguments")
    kw = dict(kwargs)
    for name, value in zip(_POSITIONAL, args):
        if name in kw:
            raise TypeError(f"generate() got multiple values for argument {name!r}")
        kw[name] = value
    inputs = kw.pop("inputs", None)
    if inputs is not None:
        if kw.get("input_ids") is not None:
            raise ValueError("generate(): `inputs` and `input_ids` were both passed")
        kw["input_ids"] = inputs
    return kw


def cache_length(cache):
    if cache is None:
        return 0
    try:
        return int(cache.get_seq_length())
    except (AttributeError, TypeError):
        return 0


def effective_mask(model, ids, embeds, kw):
    """The attention mask generate() would use: the caller's, else the one it
    infers (ids != pad where the pad token occurs and is not an eos token)."""
    mask = kw.get("attention_mask")
    if mask is not None:
        return mask, True
    ref = ids if ids is not None else embeds[..., 0]
    ones = torch.ones(ref.shape[:2], dtype=torch.long, device=ref.device)
    if ids is None:
        return ones, False
    gc = kw.get("generation_config") or model.generation_config
    pad = kw.get("pad_token_id", getattr(gc, "pad_token_id", None))
    eos = kw.get("eos_token_id", getattr(gc, "eos_token_id", None))
    if pad is None and gc is not model.generation_config:
        pad = model.generation_config.pad_token_id
    if isinstance(pad, (list, tuple)):
        pad = pad[0] if pad else None
    if pad is None or not bool((ids == int(pad)).any()):
        return ones, False
    eos = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(e) for e in eos])
    if int(pad) in eos:
        return ones, False
    return ids.ne(int(pad)).long(), False


def pad_token(model, ids, mask):
    """The id written into added padding columns."""
    for cfg in (getattr(model, "generation_config", None), model.config,
                getattr(model.config, "text_config", None)):
        value = getattr(cfg, "pad_token_id", None) if cfg is not None else None
        if isinstance(value, int):
            return value
    if ids is not None and mask is not None and bool((mask == 0).any()):
        return int(ids[mask == 0][0])
    return 0


def placeholder_mask(model, ids, embeds, token_id):
    """Where the image placeholders are, exactly as the model finds them."""
    if ids is not None:
        return ids == token_id
    emb = model.get_input_embeddings()(torch.tensor(token_id, device=embeds.device))
    return (embeds == emb.to(embeds.dtype)).all(-1)


def dropped_placeholders(is_img, lengths, kept_per_image):
    """[B, L] bool: the placeholder columns stage 1 removes.

    Placeholders are consumed in row-major order over the whole batch, as the
    model's masked_scatter fills them (regardless of the attention mask): image
    j owns the next lengths[j] of them; those at its kept indices stay."""
    cols = torch.nonzero(is_img)                       # [P, 2] (row, column), row-major
    total = int(sum(int(n) for n in lengths))
    if cols.shape[0] != total:
        raise invalid(f"input_ids: {cols.shape[0]} image placeholders for {total} image "
                      f"features ({len(lengths)} images)")
    drop = torch.zeros_like(is_img, dtype=torch.bool)
    start = 0
    for n, kept in zip(lengths, kept_per_image):
        n = int(n)
        own = cols[start:start + n]
        gone = torch.ones(n, dtype=torch.bool)
        gone[kept.long()] = False
        own = own[gone.to(own.device)]
        drop[own[:, 0], own[:, 1]] = True
        start += n
    return drop


def _leading(flags):
    """Per row, how many leading columns are True."""
    return torch.cumprod(flags.long(), dim=1).sum(1)


def _right_aligned(rows, device):
    """[len(rows), max length]: each row's columns at the end, -1 in front."""
    width = max(int(r.numel()) for r in rows)
    index = torch.full((len(rows), width), -1, dtype=torch.long, device=device)
    for b, r in enumerate(rows):
        index[b, width - r.numel():] = r
    return index


class PromptMap:
    """Columns of a pruned batch: index [B, L'] (the caller's column, -1 = added
    padding) over a caller batch of B rows and L columns."""

    def __init__(self, index, length, orig_ids):
        self.index = index
        self.length = length          # the caller's prompt length L
        self.orig_ids = orig_ids      # the caller's prompt ids [B, L] (None: embeddings only)
        self.extra = {}               # adapter state (Qwen: the caller's positions)

    @property
    def batch(self):
        return self.index.shape[0]

    @property
    def new_length(self):
        return self.index.shape[1]

    @classmethod
    def build(cls, keep, is_pad, orig_ids):
        """keep [B, L]: the columns that stay; is_pad [B, L]: padding columns (mask 0,
        not a placeholder). Rows are right-aligned (see the module docstring);
        leading padding columns that every row then has beyond those the caller
        had are trimmed."""
        B, L = keep.shape
        rows = [torch.nonzero(keep[b]).flatten() for b in range(B)]
        index = _right_aligned(rows, keep.device)
        pad_new = (index < 0) | is_pad.gather(1, index.clamp_min(0))
        trim = int(_leading(pad_new).min()) - int(_leading(is_pad).min())
        return cls(index[:, max(trim, 0):], L, orig_ids)

    @classmethod
    def identity(cls, rows, length, orig_ids, device):
        """The map of `length` columns that no call pruned (a cache filled by the
        plain model or by a call without images)."""
        index = torch.arange(length, device=device).expand(rows, -1).clone()
        return cls(index, length, orig_ids)

    def extend(self, rows, total, covered, keep_new, orig_ids):
        """The map of a continued turn over the caller's `total` columns: this
        map's columns for the first `length` of them (map rows `rows`), the
        columns up to `covered` (the cache holds them) one to one, then the
        uncached columns that stay (keep_new [n, total - covered]) right-aligned:
        a row that keeps fewer of them than another gets masked padding in front
        of its new columns."""
        head = self.index[rows]
        device = head.device
        n = head.shape[0]
        mid = torch.arange(self.length, covered, device=device).expand(n, -1)
        new = [torch.nonzero(keep_new[b]).flatten().to(device) + covered for b in range(n)]
        index = torch.cat([head, mid, _right_aligned(new, device)], dim=1)
        return PromptMap(index, total, orig_ids)

    def rows_for(self, n):
        """Map n rows (the caller's rows, possibly expanded by generate()) to map rows."""
        if n % self.batch:
            raise invalid(f"past_key_values: {n} rows continue a prompt batch of {self.batch}")
        return torch.arange(n, device=self.index.device) // (n // self.batch)

    def gather(self, x, fill, dim=1, rows=None):
        """x [..., rows, L(+more), ...] with the batch at dim-1 and columns at dim:
        the pruned prompt's columns (fill in added ones), followed by any columns
        beyond the caller's prompt, unchanged."""
        batch_dim = dim - 1
        n = x.shape[batch_dim]
        rows = self.rows_for(n) if rows is None else rows
        idx = self.index[rows].to(x.device)                  # [n, L']
        moved = x.movedim(batch_dim, 0).movedim(dim, 1)      # [n, T, ...]
        prefix = moved[:, :self.length]
        view = list(idx.shape) + [1] * (prefix.dim() - 2)
        got = prefix.gather(1, idx.clamp_min(0).view(view).expand(
            idx.shape[0], idx.shape[1], *prefix.shape[2:]))
        added = (idx < 0).view(view)
        if isinstance(fill, torch.Tensor):
            got = torch.where(added, fill.to(got.device, got.dtype), got)
        else:
            got = got.masked_fill(added, fill)
        out = torch.cat([got, moved[:, self.length:]], dim=1)
        return out.movedim(1, dim).movedim(0, batch_dim)

    def restore(self, output, caller_prefix):
        """generate()'s output with the caller's prompt in front of the generated
        tokens (the pruned prompt replaced), so that slicing by the caller's
        prompt length keeps working; rows expanded by generate() get their own
        prompt's row."""
        if caller_prefix is None:
            return output
        seqs = output.sequences if hasattr(output, "sequences") else output
        if seqs.shape[0] % caller_prefix.shape[0]:
            raise invalid("generate(): output rows do not match the prompt rows")
        prefix = caller_prefix.to(seqs.device).repeat_interleave(
            seqs.shape[0] // caller_prefix.shape[0], dim=0)
        fixed = torch.cat([prefix, seqs[:, self.new_length:]], dim=1)
        if hasattr(output, "sequences"):
            output.sequences = fixed
            return output
        return fixed


def translate_lengths(model, kw, shrink):
    """An absolute max_length / min_length counts the caller's prompt: shorten
    them by what stage 1 removed, so the caller gets the same number of new
    tokens (max_new_tokens and the default length are relative already)."""
    if shrink == 0:
        return
    gc = kw.get("generation_config")

    def explicit(name):         # generate()'s precedence: keyword, config passed, model's
        if kw.get(name) is not None:
            return kw[name]
        for cfg in (gc, model.generation_config):
            if cfg is not None and getattr(cfg, name, None) is not None:
                return getattr(cfg, name)
        return None

    if explicit("max_new_tokens") is None:
        max_length = explicit("max_length")
        if max_length is not None:
            kw["max_length"] = max_length - shrink
    if explicit("min_new_tokens") is None:
        min_length = explicit("min_length")
        if min_length:
            kw["min_length"] = max(min_length - shrink, 0)


_LENGTH_ERROR = re.compile(r"^Input length of (\w+) is (-?\d+), but `max_length` is set to (-?\d+)\.")


def in_callers_terms(exc, shrink):
    """generate()'s ValueError about the input length against max_length, with the
    caller's lengths instead of the pruned prompt's (the same message the plain
    model gives for the same call), or None for any other error."""
    if shrink == 0 or not isinstance(exc, ValueError):
        return None
    text = str(exc)
    m = _LENGTH_ERROR.match(text)
    if m is None:
        return None
    head = (f"Input length of {m.group(1)} is {int(m.group(2)) + shrink}, but `max_length` "
            f"is set to {int(m.group(3)) + shrink}.")
    return ValueError(head + text[m.end():])
