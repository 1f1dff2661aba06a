"""Sequence classification with the Hugging Face Trainer:
`python trainer_bert_classification.py OUTPUT_DIR`.

A BERT built from a config (no weights are downloaded): 2 layers of width 128, 4 heads, a
vocabulary of 1,000 tokens, 3 labels. bf16 autocast, fused AdamW, gradient accumulation over 4
micro-batches, evaluation with an accuracy metric computed on the gathered predictions, and
the default save strategy (every `save_steps`).
"""

import argparse

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RandomSentences(Dataset):
    """Token ids, attention masks and labels drawn once, with a fixed seed."""

    def __init__(self, samples: int, length: int, vocab: int, labels: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (samples, length), generator=g)
        self.labels = torch.randint(0, labels, (samples,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]),
                "labels": self.labels[i]}


def accuracy(prediction):
    logits, labels = prediction
    return {"accuracy": float(np.mean(np.argmax(logits, axis=-1) == labels))}


p = argparse.ArgumentParser()
p.add_argument("output_dir")
p.add_argument("--save-steps", type=int, default=500)
args = p.parse_args()

config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=512, max_position_embeddings=64, num_labels=3)
model = BertForSequenceClassification(config)
training_args = TrainingArguments(
    output_dir=args.output_dir, per_device_train_batch_size=4, per_device_eval_batch_size=8,
    gradient_accumulation_steps=4, num_train_epochs=2, learning_rate=5e-5, bf16=True,
    optim="adamw_torch_fused", logging_steps=2, eval_strategy="steps", eval_steps=2,
    save_steps=args.save_steps, report_to="none")
trainer = Trainer(model=model, args=training_args,
                  train_dataset=RandomSentences(128, 32, config.vocab_size, 3, seed=0),
                  eval_dataset=RandomSentences(16, 32, config.vocab_size, 3, seed=1),
                  compute_metrics=accuracy)
metrics = trainer.train().metrics
print({k: round(v, 3) for k, v in metrics.items()})
