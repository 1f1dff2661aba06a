"""A plain loop over a Hugging Face `MistralForCausalLM` from a `MistralConfig` (sliding-window
attention, grouped-query heads), with gradient accumulation and fp32 master weights under bf16
autocast.

Patterns: `loss = outputs.loss / accumulation_steps`, `optimizer.step()` every
`accumulation_steps` micro-batches, `(step + 1) % accumulation_steps == 0`, an `itertools.cycle`
over a `DataLoader`, `torch.randint` batches built in a `Dataset.__getitem__`, a total-norm print
after `clip_grad_norm_`, `if torch.isnan(loss): break`.
"""
import itertools

import torch
from torch.utils.data import DataLoader, Dataset
from transformers import MistralConfig, MistralForCausalLM, get_linear_schedule_with_warmup

SEQ = 128


def build_model():
    config = MistralConfig(vocab_size=2048, hidden_size=256, intermediate_size=512,
                           num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                           max_position_embeddings=512, sliding_window=64)
    return MistralForCausalLM(config)


class RandomTokens(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 2048, (SEQ,), generator=g)


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model().to(device)
    accumulation_steps = 2
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
    scheduler = get_linear_schedule_with_warmup(optimizer, 1, 4)
    batches = itertools.cycle(DataLoader(RandomTokens(), batch_size=4, shuffle=True))
    model.train()
    for step in range(4 * accumulation_steps):
        ids = next(batches).to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            outputs = model(input_ids=ids, labels=ids)
        loss = outputs.loss / accumulation_steps
        if torch.isnan(loss):
            break
        loss.backward()
        if (step + 1) % accumulation_steps == 0:
            total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            print(f"update {(step + 1) // accumulation_steps} loss {loss.item() * accumulation_steps:.4f} "
                  f"norm {total_norm:.2f}")


if __name__ == "__main__":
    main()
