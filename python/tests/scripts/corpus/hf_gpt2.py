"""A Hugging Face examples-style "no Trainer" causal-LM loop (run_clm_no_trainer without
accelerate): `GPT2LMHeadModel` built from a `GPT2Config` in code, `labels=input_ids`.

Patterns: `outputs.loss`, weight-decay parameter groups by name (`"bias"`, `"ln_"`),
`get_linear_schedule_with_warmup`, `torch.nn.utils.clip_grad_norm_` whose returned norm is
printed, `model.train()`/`model.eval()` with a perplexity `math.exp(torch.mean(losses))`,
`losses.append(loss.repeat(bs))` then `torch.cat(losses)`, `model.save_pretrained`-free
`torch.save(model.state_dict())`, `set_seed`-like seeding of `random`/`numpy`/`torch`.
"""
import math
import os
import random
import tempfile

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


def build_model():
    config = GPT2Config(vocab_size=1024, n_positions=128, n_embd=128, n_layer=2, n_head=4,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    return GPT2LMHeadModel(config)


def main():
    seed = 0
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model().to(device)
    blocks = torch.randint(0, 1024, (64, 128))
    train_loader = DataLoader(TensorDataset(blocks[:48]), batch_size=8, shuffle=True)
    eval_loader = DataLoader(TensorDataset(blocks[48:]), batch_size=8)
    no_decay = ["bias", "ln_"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=5e-4)
    epochs = 1
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2,
                                                num_training_steps=epochs * len(train_loader))
    for epoch in range(epochs):
        model.train()
        for step, (input_ids,) in enumerate(train_loader):
            input_ids = input_ids.to(device)
            outputs = model(input_ids=input_ids, labels=input_ids)
            loss = outputs.loss
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f} grad_norm {norm.item():.3f} "
                  f"lr {scheduler.get_last_lr()[0]:.2e}")
        model.eval()
        losses = []
        for (input_ids,) in eval_loader:
            with torch.no_grad():
                outputs = model(input_ids=input_ids.to(device), labels=input_ids.to(device))
            losses.append(outputs.loss.repeat(input_ids.size(0)))
        eval_loss = torch.mean(torch.cat(losses))
        try:
            perplexity = math.exp(eval_loss)
        except OverflowError:
            perplexity = float("inf")
        print(f"epoch {epoch}: perplexity: {perplexity} eval_loss: {eval_loss}")
    torch.save(model.state_dict(), os.path.join(tempfile.mkdtemp(prefix="gpt2_"), "pytorch_model.bin"))


if __name__ == "__main__":
    main()
