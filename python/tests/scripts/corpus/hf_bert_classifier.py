"""A Hugging Face examples-style sequence-classification loop (run_glue_no_trainer without
accelerate): `BertForSequenceClassification` from a `BertConfig`, batches as dicts.

Patterns: a `Dataset` returning dicts of tensors, `DataLoader(shuffle=True)` with the default
collate stacking dicts, `model(**batch)` with `labels`, `outputs.loss` / `outputs.logits`,
AdamW with `eps=1e-8`, `get_linear_schedule_with_warmup`, an evaluation with
`predictions = outputs.logits.argmax(dim=-1)` and an accuracy from `(predictions ==
labels).float().mean().item()`, `clip_grad_norm_`, dropout active in training.
"""
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

SEQ = 64


def build_model():
    config = BertConfig(vocab_size=3000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=512, max_position_embeddings=128, num_labels=3)
    return BertForSequenceClassification(config)


class Pairs(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, 3000, (n, SEQ), generator=g)
        self.labels = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "token_type_ids": (torch.arange(SEQ) >= SEQ // 2).long(), "labels": self.labels[i]}


def main():
    torch.manual_seed(42)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model().to(device)
    train_loader = DataLoader(Pairs(64), batch_size=16, shuffle=True)
    eval_loader = DataLoader(Pairs(32), batch_size=16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, eps=1e-8)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, len(train_loader))
    for epoch in range(1):
        model.train()
        for step, batch in enumerate(train_loader):
            batch = {k: v.to(device) for k, v in batch.items()}
            outputs = model(**batch)
            outputs.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            print("epoch %d step %d loss %.4f" % (epoch, step, outputs.loss.item()))
        model.eval()
        correct = total = 0
        for batch in eval_loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.no_grad():
                predictions = model(**batch).logits.argmax(dim=-1)
            correct += (predictions == batch["labels"]).sum().item()
            total += batch["labels"].numel()
        print(f"epoch {epoch}: accuracy {correct / total:.3f}")


if __name__ == "__main__":
    main()
