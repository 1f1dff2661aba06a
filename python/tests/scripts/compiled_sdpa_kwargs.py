"""An attention block compiled with fullgraph=True whose SDPA call passes its optional arguments
through from the forward's (`scale=None`), inside `sdpa_kernel(..., set_priority=True)`, as
torchtitan's attention does."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


class Attention(nn.Module):
    def __init__(self, dim=256, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]

    def forward(self, x, scale=None):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(self.backends, set_priority=True):
            y = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True,
                                               enable_gqa=False)
        return y.transpose(1, 2).reshape(b, s, d)


if __name__ == "__main__":
    model = torch.compile(Attention().cuda().bfloat16(), fullgraph=True)
    opt = torch.optim.AdamW(model.parameters())
    for step in range(3):
        x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
