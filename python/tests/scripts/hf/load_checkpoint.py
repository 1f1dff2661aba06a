"""Load a local checkpoint by path and move it to the GPU, as a fine-tuning script begins:
`load_checkpoint.py DIR [--dtype float32] [--resave OUT]`. Prints the parameter count and this
process's peak resident memory (MiB) once the model is on the GPU; with --resave, saves the
model to OUT (as the Trainer checkpoints it) and prints the parameter count of the model loaded
back from there."""

import argparse
import resource

import torch
from transformers import AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("checkpoint")
p.add_argument("--dtype", default="float32")
p.add_argument("--resave")
args = p.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=getattr(torch, args.dtype))
model.to("cuda")
print("parameters", sum(p.numel() for p in model.parameters()))
print("max_rss_mib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
if args.resave:
    model.save_pretrained(args.resave)
    again = AutoModelForCausalLM.from_pretrained(args.resave)
    print("reloaded", sum(p.numel() for p in again.parameters()))
