"""flash-attn's padding helpers (flash_attn/bert_padding.py), with the same tensors made:
transformers' FlashAttention-2 path unpads a padded batch into one packed sequence for
`flash_attn_varlen_func` and pads the output back with these.

`index_first_axis` gathers rows with `torch.gather` and the row indices expanded to every column
(a view, as einops' `repeat` makes it in flash-attn); its backward scatters into zeros. `index_put_first_axis` writes rows into zeros; its backward indexes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class IndexFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, indices):
        ctx.save_for_backward(indices)
        ctx.rows, rest = x.shape[0], x.shape[1:]
        flat = x.reshape(x.shape[0], -1)
        index = indices[:, None].expand(-1, flat.shape[1])
        return torch.gather(flat, 0, index).reshape(-1, *rest)

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        rest = grad.shape[1:]
        grad = grad.reshape(grad.shape[0], -1)
        out = torch.zeros(ctx.rows, grad.shape[1], device=grad.device, dtype=grad.dtype)
        out.scatter_(0, indices[:, None].expand(-1, grad.shape[1]), grad)
        return out.reshape(ctx.rows, *rest), None


class IndexPutFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, indices, rows):
        ctx.save_for_backward(indices)
        out = torch.zeros(rows, *values.shape[1:], device=values.device, dtype=values.dtype)
        out[indices] = values
        return out

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        return grad[indices], None, None


index_first_axis = IndexFirstAxis.apply
index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(batch, seqlen, ...) and a (batch, seqlen) mask -> the kept tokens (total, ...), their
    flat indices, cu_seqlens (batch + 1, int32), the longest sequence, the used lengths."""
    masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    lengths = masks.sum(dim=-1, dtype=torch.int32)
    used = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
    longest = lengths.max().item()
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return index_first_axis(flat, indices), indices, cu_seqlens, longest, used


def pad_input(hidden_states, indices, batch, seqlen):
    """(total, ...) -> (batch, seqlen, ...), zeros where no token was kept."""
    out = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return out.reshape(batch, seqlen, *out.shape[1:])
