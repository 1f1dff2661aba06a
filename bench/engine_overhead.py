"""How much the memlens tracer costs over bare FakeTensorMode, next to PyTorch's MemTracker.

Each measurement runs in a fresh process: build the model and run training iterations
(forward, backward, AdamW step; one unless `--steps`) under (a) bare FakeTensorMode, (b)
PyTorch's MemTracker inside
FakeTensorMode, (c) the memlens tracer with every block traced, (d) the memlens tracer with
layer replay (engine/layer_replay.py; the peak must be (c)'s). Reports wall time, the ratio to
bare, and peak RSS. The models are built with `use_cache=False`, as many training scripts do
(layer replay replays the default cache's per-layer entries too: engine/layer_cache.py).

    python bench/engine_overhead.py [--shape gpt2-124m|llama-7b|all] [--repeat N] [--device D]
                                    [--steps K]

With `--steps K` (K > 1) it also prints each step's time and its ratio to bare's same step:
layer replay records in a trace's first step, checks its recordings in the second and replays
every block from the third (engine/layer_replay.py), so its steps get cheaper; bare
FakeTensorMode's do not. MemTracker is left out then (each of its steps takes ~20 s here).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

SHAPES = ("gpt2-124m", "llama-7b")
MODES = ("bare", "memtracker", "memlens", "memlens-replay")


def build(shape: str, device: str):
    import torch
    import transformers as T

    if shape == "gpt2-124m":
        cfg = T.GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, use_cache=False)
        with torch.device(device):
            model = T.GPT2LMHeadModel(cfg)
        batch = torch.randint(0, cfg.vocab_size, (8, 1024), device=device)
        return model, batch, None
    cfg = T.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=32,
                        max_position_embeddings=2048, torch_dtype="bfloat16", use_cache=False)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = T.LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    batch = torch.randint(0, cfg.vocab_size, (1, 2048), device=device)
    return model, batch, None


def iterations(model, batch, steps: int) -> list[float]:
    """`steps` training steps; the wall time of each."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = model(input_ids=batch, labels=batch)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times


def child(shape: str, mode: str, device: str, steps: int = 1) -> dict:
    """`device`: "cpu", or a GPU name (the fake-CUDA shim is loaded for every mode alike)."""
    on_gpu = device != "cpu"
    if on_gpu:
        from memlens.cuda.build import ensure_fake_cuda_support

        ensure_fake_cuda_support()
    import torch
    import transformers  # noqa: F401  (imported before timing: the same cost in every mode)
    # transformers imports a model's module on first use of its name (about 1.7 s with
    # torchao's quantizers): that too before the clock
    transformers.GPT2LMHeadModel, transformers.LlamaForCausalLM  # noqa: B018
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    from memlens import Tracer

    # memlens' own lazy imports, outside the timing like transformers'
    import memlens.engine.tracer  # noqa: F401
    import memlens.kernels.cpu.rules  # noqa: F401

    if on_gpu:
        import memlens.allocator  # noqa: F401
        import memlens.cuda.simulate  # noqa: F401
        import memlens.patches.torch_cuda_semantics  # noqa: F401
        import memlens.kernels.cuda  # noqa: F401

    t0 = time.perf_counter()
    replayed = None
    if mode.startswith("memlens"):
        with Tracer(device, iterations=steps, layer_replay=mode == "memlens-replay") as tracer:
            model, batch, _ = build(shape, "cuda" if on_gpu else "cpu")
            step_s = iterations(model, batch, steps)
        t_trace = time.perf_counter() - t0
        if tracer.layer_replay is not None:
            tracer.check_layer_replay()  # raises where a replay was wrong
            replayed = tracer.layer_replay.replayed
        snap = tracer.snapshot()
        peak = snap["summary"]["peak_bytes"]
        t_total = time.perf_counter() - t0
    elif mode == "memtracker":
        with FakeTensorMode():
            model, batch, _ = build(shape, "cuda" if on_gpu else "cpu")
            mt = MemTracker()
            mt.track_external(model)
            with mt:
                step_s = iterations(model, batch, steps)
            peak = mt.get_tracker_snapshot("peak")[batch.device]["Total"]
        t_trace = t_total = time.perf_counter() - t0
    else:
        with FakeTensorMode():
            model, batch, _ = build(shape, "cuda" if on_gpu else "cpu")
            step_s = iterations(model, batch, steps)
        peak = None
        t_trace = t_total = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"shape": shape, "mode": mode, "trace_s": t_trace, "total_s": t_total,
            "rss_bytes": rss, "peak_bytes": peak, "replayed": replayed, "step_s": step_s}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="all", choices=[*SHAPES, "all"])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, or a GPU target such as h100-80gb")
    p.add_argument("--steps", type=int, default=1, help="training steps per trace")
    p.add_argument("--child", nargs=3, metavar=("SHAPE", "MODE", "DEVICE"))
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, steps=args.steps)))
        return
    modes = MODES if args.steps == 1 else tuple(m for m in MODES if m != "memtracker")
    shapes = SHAPES if args.shape == "all" else (args.shape,)
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "python")}
    print(f"target {args.device}")
    print(f"{'shape':<10} {'mode':<15} {'trace s':>8} {'x bare':>7} {'+report s':>10} "
          f"{'peak RSS':>10}  peak bytes (blocks replayed)")
    for shape in shapes:
        best: dict[str, dict] = {}
        for _ in range(args.repeat):
            for mode in modes:  # interleaved, so machine noise hits all modes alike
                out = subprocess.run([sys.executable, __file__, "--child", shape, mode,
                                      args.device, "--steps", str(args.steps)],
                                     capture_output=True, text=True, env=env, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if mode not in best or r["trace_s"] < best[mode]["trace_s"]:
                    best[mode] = r
        bare = best["bare"]["trace_s"]
        for mode in modes:
            r = best[mode]
            extra = "" if r["peak_bytes"] is None else f"  {r['peak_bytes']:,}"
            if r["replayed"] is not None:
                extra += f" ({r['replayed']})"
            print(f"{shape:<10} {mode:<15} {r['trace_s']:8.2f} {r['trace_s'] / bare:7.2f} "
                  f"{r['total_s']:10.2f} {r['rss_bytes'] / 2**30:6.2f} GiB{extra}")
        if args.steps > 1:  # each step of the best trace, against bare's same step
            for mode in modes:
                steps = best[mode]["step_s"]
                print(f"{shape:<10} {mode:<15} steps " + "  ".join(
                    f"{t:.2f} s ({t / b:.2f})" for t, b in zip(steps, best["bare"]["step_s"])))


if __name__ == "__main__":
    main()
