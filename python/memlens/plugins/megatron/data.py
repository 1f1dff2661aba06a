"""Mock batches for Megatron-LM's training loop: what its GPT datasets yield, of the configured
micro-batch and sequence length, made on the host (Megatron's get_batch moves them to the GPU).
No dataset, tokenizer or index files are read."""

from __future__ import annotations

from types import ModuleType


def mock_iterator(training: ModuleType, args):
    """An endless iterator of batches for `args` (Megatron-LM's arguments), wrapped as
    `training` (megatron.training.training) wraps its loaders' iterators."""
    import torch

    def one_batch(b: int, s: int, vocab: int, causal) -> dict:
        tokens = torch.randint(0, vocab, (b, s + 1), dtype=torch.int64)
        batch = {"tokens": tokens[:, :-1].contiguous(), "labels": tokens[:, 1:].contiguous(),
                 "loss_mask": torch.ones(b, s, dtype=torch.float32),
                 "position_ids": torch.arange(s, dtype=torch.int64).expand(b, s).contiguous()}
        if causal is not None:
            batch["attention_mask"] = causal.expand(b, 1, s, s)
        return batch

    def batches():
        b, s = args.micro_batch_size, args.seq_length
        vocab = int(getattr(args, "padded_vocab_size", None) or 2)
        causal = None
        if getattr(args, "create_attention_mask_in_dataloader", False):
            causal = torch.tril(torch.ones(s, s, dtype=torch.bool)).logical_not()
        while True:
            # Nothing here keeps the batch once it is handed out, as with a DataLoader:
            # Megatron's get_batch puts its GPU copies into the dict it was given, so a
            # reference here held the last micro-batch's tokens, labels, masks and positions
            # on the GPU past the step.
            yield one_batch(b, s, vocab, causal)

    wrap = getattr(training, "RerunDataIterator", None)
    return wrap(batches()) if wrap is not None else batches()
