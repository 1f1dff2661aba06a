"""Mock batches for Megatron-LM's training loop: what its GPT, BERT and T5 datasets yield, of the
configured micro-batch and sequence lengths, made on the host (the training scripts' get_batch
moves them to the GPU). No dataset, tokenizer or index files are read."""

from __future__ import annotations

from types import ModuleType


def model_family(model) -> str:
    """"bert", "t5" or "gpt" (every decoder: GPT, MoE, Mamba), from the classes of the model
    chunks Megatron built (wrapped in DDP and Float16Module, each with `.module`)."""
    chunk = model[0] if isinstance(model, (list, tuple)) and model else model
    while hasattr(chunk, "module"):
        chunk = chunk.module
    names = {cls.__name__ for cls in type(chunk).__mro__}
    return "bert" if "BertModel" in names else "t5" if "T5Model" in names else "gpt"


def mock_iterator(training: ModuleType, args, family: str = "gpt"):
    """An endless iterator of batches for `args` (Megatron-LM's arguments) and the model
    `family`, wrapped as `training` (megatron.training.training) wraps its loaders' iterators."""
    import torch

    b, s = args.micro_batch_size, args.seq_length
    vocab = int(getattr(args, "padded_vocab_size", None) or 2)

    def tokens(*shape):
        return torch.randint(0, vocab, shape, dtype=torch.int64)

    def ones(*shape):
        return torch.ones(*shape, dtype=torch.int64)

    causal = None
    if family == "gpt" and getattr(args, "create_attention_mask_in_dataloader", False):
        causal = torch.tril(torch.ones(s, s, dtype=torch.bool)).logical_not()

    def gpt() -> dict:  # GPTDataset, after the default collate
        text = tokens(b, s + 1)
        batch = {"tokens": text[:, :-1].contiguous(), "labels": text[:, 1:].contiguous(),
                 "loss_mask": torch.ones(b, s, dtype=torch.float32),
                 "position_ids": torch.arange(s, dtype=torch.int64).expand(b, s).contiguous()}
        if causal is not None:
            batch["attention_mask"] = causal.expand(b, 1, s, s)
        return batch

    def bert() -> dict:  # BERTMaskedWordPieceDataset: int64 arrays of the sequence length
        return {"text": tokens(b, s), "types": ones(b, s), "labels": tokens(b, s),
                "is_random": ones(b), "padding_mask": ones(b, s), "loss_mask": ones(b, s),
                "truncated": ones(b)}

    def t5() -> dict:  # T5MaskedWordPieceDataset: encoder and decoder lengths
        s_dec = getattr(args, "decoder_seq_length", None) or s
        return {"text_enc": tokens(b, s), "text_dec": tokens(b, s_dec),
                "labels": tokens(b, s_dec), "loss_mask": ones(b, s_dec),
                "truncated": ones(b), "enc_mask": ones(b, s), "dec_mask": ones(b, s_dec)}

    one_batch = {"gpt": gpt, "bert": bert, "t5": t5}[family]

    def batches():
        while True:
            # Nothing here keeps the batch once it is handed out, as with a DataLoader:
            # Megatron's get_batch puts its GPU copies into the dict it was given, so a
            # reference here held the last micro-batch's tokens, labels, masks and positions
            # on the GPU past the step.
            yield one_batch()

    wrap = getattr(training, "RerunDataIterator", None)
    return wrap(batches()) if wrap is not None else batches()
