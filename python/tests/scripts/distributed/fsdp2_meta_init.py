"""A torchtitan-style FSDP2 training script: the model is built on the meta device, sharded with
`fully_shard` per block and on the root, materialised with `to_empty(device="cuda")` and only
then initialised (`init_weights`, on the DTensor shards, with DTensor's random ops). Launched as
`torchrun --nproc_per_node N fsdp2_meta_init.py`; run as one process (WORLD_SIZE unset or 1),
the same model is built on meta, materialised and initialised without FSDP.

The model, a small Llama: vocabulary 1,003, width 64, 4 heads of 16 (2 key/value heads), a
SwiGLU feed-forward of 176, RMSNorm, 2 blocks, rotary tables as a non-persistent buffer.
Parameters: embedding and output 2 x 64,192; per block 2 x 64 (norms) + 4,096 (wq) + 2 x 2,048
(wk, wv) + 4,096 (wo) + 3 x 11,264 (w1, w2, w3) = 46,208; final norm 64.
Total 128,384 + 92,416 + 64 = 220,864.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ, BATCH = 1003, 64, 4, 2, 176, 2, 32, 4
HEAD_DIM = DIM // HEADS


def rotary_table(seq: int, head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64 (seq, head_dim / 2)


def rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(pairs * table[: x.shape[1]].view(1, x.shape[1], 1, -1))
    return out.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)

    def init_weights(self, std: float):
        for linear in (self.wq, self.wk):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.uniform_(self.wv.weight, -0.02, 0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=std)

    def forward(self, x, table):
        b, s, _ = x.shape
        q = rotate(self.wq(x).view(b, s, HEADS, HEAD_DIM), table)
        k = rotate(self.wk(x).view(b, s, KV_HEADS, HEAD_DIM), table)
        v = self.wv(x).view(b, s, KV_HEADS, HEAD_DIM)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=2)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def init_weights(self):
        nn.init.xavier_uniform_(self.w1.weight)
        nn.init.xavier_normal_(self.w3.weight)
        nn.init.zeros_(self.w2.weight)  # the residual branch starts as the identity

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, layer_id: int):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.feed_forward = FeedForward()
        self.init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5  # depth-scaled, as torchtitan does

    def init_weights(self):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.init_std)
        self.feed_forward.init_weights()

    def forward(self, x, table):
        x = x + self.attention(self.attention_norm(x), table)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleDict({str(i): Block(i) for i in range(LAYERS)})
        self.norm = nn.RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("freqs_cis", rotary_table(SEQ, HEAD_DIM), persistent=False)

    def init_weights(self, buffer_device=None):
        with torch.device(buffer_device or self.freqs_cis.device):
            self.freqs_cis = rotary_table(SEQ, HEAD_DIM)
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.init_weights()
        nn.init.ones_(self.norm.weight)
        std = DIM ** -0.5
        nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


def main():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from torch.distributed.tensor import _random as dtensor_random

        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("dp_shard",))
        dtensor_random.manual_seed(0, mesh)  # one RNG stream over the mesh's shards
    else:
        torch.manual_seed(0)

    with torch.device("meta"):
        model = Transformer()
    if world > 1:
        for block in model.layers.values():
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    model.to_empty(device="cuda")
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    model.train()

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for step in range(1, 6):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if world == 1 or dist.get_rank() == 0:  # with FSDP the norm is a DTensor
            print(f"step {step} loss {loss.item():.4f} grad norm {grad_norm.item():.3f}")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
