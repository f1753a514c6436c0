"""padding.py: the padding conventions' helpers (common.py's docstring states them: prompts
left-padded, responses right-padded): rows padded to one width, the columns some row uses, and
outputs padded back to the responses' full width. A learner may skip this module."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def pad_cat(tensors: list[torch.Tensor], value, left: bool) -> torch.Tensor:
    """Rows [1 or n, L_i] padded with `value` to one width (on the left or the right), stacked."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat([F.pad(t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]),
                            value=value) for t in tensors])


def padded_outputs(result: dict, response_mask, full_width: int) -> dict:
    """The outputs padded with 0 to full_width columns; logprobs and entropy 0 on padding."""
    pad = (0, full_width - response_mask.shape[1])
    return {k: None if v is None else F.pad(v, (0, 0, *pad)) if k == "hidden" else
            F.pad(v * response_mask, pad) for k, v in result.items()}


def first_used_column(mask: torch.Tensor) -> int:
    """The first column any row of mask [B, L] uses (0 if none): the left padding all rows have."""
    return int(mask.any(0).float().argmax())


def used_width(mask: torch.Tensor) -> int:
    """1 + the last column any row of mask [B, L] uses (at least 1): cuts the right padding."""
    used = mask.any(0).nonzero()
    return int(used.max()) + 1 if len(used) else 1
