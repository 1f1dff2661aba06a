"""Causal-LM training with the Hugging Face Trainer on DeepSpeed ZeRO:
`deepspeed --num_gpus 4 trainer_llama_zero.py OUTPUT_DIR [--stage 3] [--pretrained DIR]
[--trainer-optimizer]`.

A Llama built from a config (no weights are downloaded): 2 layers of width 128, 4 heads and 2
key/value heads, a vocabulary of 1,000 tokens, untied embeddings; with --pretrained, the same
model loaded from a local checkpoint with `from_pretrained(DIR)`. `TrainingArguments(deepspeed=
...)` takes the DeepSpeed config as a dict with the Trainer's "auto" values, as HF documents;
with --trainer-optimizer the config has no "optimizer" section and the Trainer builds its own
torch AdamW before DeepSpeed wraps it (as run_clm.py's users' configs often do).
"""

import argparse

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class RandomTokens(Dataset):
    def __init__(self, samples: int, length: int, vocab: int, seed: int):
        self.ids = torch.randint(0, vocab, (samples, length),
                                 generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


p = argparse.ArgumentParser()
p.add_argument("output_dir")
p.add_argument("--stage", type=int, default=2)
p.add_argument("--pretrained")
p.add_argument("--trainer-optimizer", action="store_true")
p.add_argument("--local_rank", type=int, default=-1)
args = p.parse_args()

ds_config = {
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto", "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": args.stage, "reduce_bucket_size": 65_536,
                          "allgather_bucket_size": 65_536,
                          "stage3_param_persistence_threshold": 0,
                          "stage3_prefetch_bucket_size": 65_536},
}
if args.trainer_optimizer:
    del ds_config["optimizer"]
config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                     tie_word_embeddings=False)
training_args = TrainingArguments(
    output_dir=args.output_dir, per_device_train_batch_size=2, max_steps=4, learning_rate=3e-4,
    bf16=True, logging_steps=1, save_strategy="no", report_to="none", deepspeed=ds_config)
# after TrainingArguments, as HF documents (ZeRO-3 loads a checkpoint partitioned then)
model = (LlamaForCausalLM.from_pretrained(args.pretrained) if args.pretrained
         else LlamaForCausalLM(config))
trainer = Trainer(model=model, args=training_args,
                  train_dataset=RandomTokens(64, 64, config.vocab_size, seed=0))
trainer.train()
