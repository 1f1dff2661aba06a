"""One training script, many models: the cases the exactness tests run twice (for real on the
CPU, measured by torch.profiler; and under `memlens run --device cpu`).

    python train_case.py --model gpt2 --dtype bf16 --optimizer adamw [--iterations 2]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
p.add_argument("--iterations", type=int, default=2)
p.add_argument("--batch", type=int, default=4)
args = p.parse_args()
torch.manual_seed(0)
dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
VOCAB, SEQ = 512, 64


class MLP(nn.Module):
    def __init__(self, d=256, hidden=1024, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d if i == 0 else hidden, hidden) for i in range(layers))
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        for layer in self.layers:
            x = F.gelu(layer(x))
        return self.head(x)


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.drop = heads, nn.Dropout(dropout)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        att = self.drop(att.masked_fill(~mask, float("-inf")).softmax(-1))
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self, d=128, heads=4, layers=3, dropout=0.1, checkpointed=False):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(SEQ, d)
        self.blocks = nn.ModuleList(Block(d, heads, dropout) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB, bias=False)
        self.checkpointed = checkpointed

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(self.ln(x))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Linear(128, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def hf_model(name):
    import transformers as T

    small = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4)
    if name == "gpt2":
        cfg = T.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=128, n_layer=2, n_head=4)
        return T.GPT2LMHeadModel(cfg)
    if name == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(**small, num_key_value_heads=2,
                                                max_position_embeddings=SEQ))
    if name == "mixtral":
        cfg = T.MixtralConfig(**small, num_key_value_heads=2, num_local_experts=4,
                              num_experts_per_tok=2, max_position_embeddings=SEQ)
        cfg._experts_implementation = "batched_mm"
        return T.MixtralForCausalLM(cfg)
    if name == "bert":
        return T.BertForMaskedLM(T.BertConfig(**small, max_position_embeddings=SEQ))
    raise SystemExit(f"unknown model {name}")


def build(name):
    if name == "mlp":
        return MLP(), lambda: (torch.randn(args.batch, 256, dtype=dtype),)
    if name in ("gpt", "gpt-checkpoint"):
        return GPT(checkpointed=name == "gpt-checkpoint"), lambda: (torch.randint(0, VOCAB, (args.batch, SEQ)),)
    if name == "convnet":
        return ConvNet(), lambda: (torch.randn(args.batch, 3, 32, 32, dtype=dtype),)
    return hf_model(name), lambda: (torch.randint(0, VOCAB, (args.batch, SEQ)),)


model, make_inputs = build(args.model)
model = model.to(dtype)
if args.optimizer == "adamw":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
else:
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

for step in range(args.iterations):
    inputs = make_inputs()
    out = model(*inputs)
    logits = out.logits if hasattr(out, "logits") else out
    loss = logits.float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
