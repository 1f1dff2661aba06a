"""Causal-LM training with the Hugging Face Trainer: `python trainer_llama.py OUTPUT_DIR [--save]`.

A Llama built from a config (no weights are downloaded): 2 layers of width 128, grouped-query
attention (4 heads, 2 key/value heads), a vocabulary of 1,000 tokens, untied embeddings. bf16
autocast, gradient accumulation over 2 micro-batches, activation checkpointing, fused AdamW,
evaluation and logging at every step, a callback, and checkpoints at every step with `--save`
(the Trainer's default "steps" strategy) or none without.
"""

import argparse

import torch
from torch.utils.data import Dataset
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)


class RandomTokens(Dataset):
    """Token ids drawn once, with a fixed seed: a stand-in for a tokenized corpus."""

    def __init__(self, samples: int, length: int, vocab: int, seed: int):
        self.ids = torch.randint(0, vocab, (samples, length),
                                 generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class PrintLoss(TrainerCallback):
    """What a user's callback does: read the logged metrics."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            print(f"step {state.global_step}: " +
                  ", ".join(f"{k}={v}" for k, v in sorted(logs.items())))


p = argparse.ArgumentParser()
p.add_argument("output_dir")
p.add_argument("--save", action="store_true", help="the default save strategy, every step")
p.add_argument("--max-steps", type=int, default=6)
p.add_argument("--push-to-hub", action="store_true", help="to a Hub repository of its own")
args = p.parse_args()

config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     tie_word_embeddings=False)
model = LlamaForCausalLM(config)
save = {"save_steps": 1} if args.save else {"save_strategy": "no"}
training_args = TrainingArguments(
    output_dir=args.output_dir, per_device_train_batch_size=2, per_device_eval_batch_size=4,
    gradient_accumulation_steps=2, max_steps=args.max_steps, learning_rate=3e-4,
    warmup_steps=1, bf16=True, gradient_checkpointing=True, optim="adamw_torch_fused",
    logging_steps=1, eval_strategy="steps", eval_steps=1, report_to="none",
    push_to_hub=args.push_to_hub, hub_model_id="memlens-tests/llama-never-created", **save)
trainer = Trainer(model=model, args=training_args,
                  train_dataset=RandomTokens(256, 64, config.vocab_size, seed=0),
                  eval_dataset=RandomTokens(8, 64, config.vocab_size, seed=1),
                  callbacks=[PrintLoss()])
result = trainer.train()
print(f"trained {result.global_step} steps, loss {result.training_loss:.3f}")
print(trainer.evaluate())
if args.push_to_hub:
    trainer.push_to_hub()
