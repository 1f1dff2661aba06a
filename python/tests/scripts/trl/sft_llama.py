"""Supervised fine-tuning with TRL's SFTTrainer, as its docs write it: a tiny Llama built from
its config (no download) or with `--model DIR` loaded from a local checkpoint of that config
onto the process's GPU (`device_map={"": PartialState().process_index}`, as TRL's docs write
it for a multi-GPU QLoRA job; `--load-in-4bit`: QLoRA's BitsAndBytesConfig, NF4 with double
quantization), a word-level tokenizer built here, and an in-memory `datasets.Dataset` of short
texts. `--peft` adds a LoRA adapter (peft_config); `--optim` picks the Trainer's optimizer."""

import argparse

from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", default="sft-out")
parser.add_argument("--peft", action="store_true")
parser.add_argument("--model", default=None)
parser.add_argument("--load-in-4bit", action="store_true")
parser.add_argument("--optim", default="adamw_torch_fused")
args = parser.parse_args()

words = [f"w{i}" for i in range(200)]
vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, **{w: i + 4 for i, w in enumerate(words)}}
core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
core.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>",
                                    eos_token="</s>", unk_token="<unk>")
texts = [" ".join(words[(7 * i + j) % 200] for j in range(24)) for i in range(64)]
dataset = Dataset.from_dict({"text": texts})

CONFIG = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
if args.model is None:
    model = LlamaForCausalLM(LlamaConfig(**CONFIG))
else:
    import torch
    from accelerate import PartialState
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16) if args.load_in_4bit else None
    model = LlamaForCausalLM.from_pretrained(args.model, device_map={"": PartialState().process_index}, dtype=torch.bfloat16,
                                             quantization_config=quantization)
peft_config = None
if args.peft:
    from peft import LoraConfig

    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
training_args = SFTConfig(output_dir=args.output_dir, per_device_train_batch_size=4,
                          max_length=32, max_steps=4, logging_steps=1, report_to="none",
                          save_strategy="no", bf16=True, optim=args.optim)
trainer = SFTTrainer(model=model, args=training_args, train_dataset=dataset,
                     processing_class=tokenizer, peft_config=peft_config)
trainer.train()
