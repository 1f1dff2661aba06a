"""A small MLP trained with DeepSpeed, in DeepSpeed's documented style:
`deepspeed --num_gpus 4 zero_mlp.py --stage 2 [--offload-optimizer] [--fp16]`.

The model: 4 blocks Linear(512, 512) + GELU and a head Linear(512, 10) (see build_model).
"""

import argparse

import deepspeed
import torch
import torch.nn.functional as F
from torch import nn

WIDTH, BLOCKS, CLASSES, MICRO_BATCH = 512, 4, 10, 8
BUCKET = 131_072  # elements: ZeRO's reduce / all-gather / prefetch buckets (defaults are 5e8)


def build_model() -> nn.Module:
    layers = []
    for _ in range(BLOCKS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES))


def ds_config(args) -> dict:
    zero = {"stage": args.stage, "reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET,
            "overlap_comm": args.overlap_comm}
    if args.stage == 3:
        # Every parameter partitioned (none kept whole for being small), prefetch in buckets.
        zero.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=BUCKET,
                    stage3_max_live_parameters=args.max_live_parameters)
    if args.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if args.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": args.optimizer, "params": {"lr": 1e-3, "weight_decay": 0.01}},
        "bf16": {"enabled": not args.fp16},
        "fp16": {"enabled": args.fp16, "initial_scale_power": 16},
        "zero_optimization": zero,
        "steps_per_print": 1000,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    p.add_argument("--stage", type=int, default=2)
    p.add_argument("--optimizer", default="AdamW")
    p.add_argument("--fp16", action="store_true")
    p.add_argument("--offload-optimizer", action="store_true")
    p.add_argument("--offload-param", action="store_true")
    p.add_argument("--overlap-comm", action="store_true")
    p.add_argument("--max-live-parameters", type=int, default=1_000_000_000)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    deepspeed.init_distributed()
    torch.manual_seed(1234)
    model = build_model()
    model_engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config(args))

    for step in range(args.steps):
        x = torch.randn(MICRO_BATCH, WIDTH, device=model_engine.device,
                        dtype=torch.float16 if args.fp16 else torch.bfloat16)
        y = torch.randint(0, CLASSES, (MICRO_BATCH,), device=model_engine.device)
        loss = F.cross_entropy(model_engine(x).float(), y)
        model_engine.backward(loss)
        model_engine.step()
        if model_engine.global_rank == 0:
            print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
