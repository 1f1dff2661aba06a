"""What the engine's fast paths save: ops answered without FakeTensorMode (engine/inplace_ops.py,
in-place ops that cannot fail; engine/like_ops.py, new tensors like their input), on the
Llama-7B step of engine_overhead.py with layer replay, in one process.

Traces alternate between the fast paths on and off (the accountant's hooks replaced by "not
answered"), after one warm-up trace each, so that machine noise and first-use costs hit both
alike; each phase keeps its best of `--rounds`. The peak must be the same bytes both ways.

    python bench/fast_paths.py [--rounds 5] [--device h100-80gb]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("build", "forward+backward", "optimizer step", "whole trace")


def one_trace(device: str) -> tuple[list[float], int]:
    import torch

    import engine_overhead
    from memlens import Tracer

    start = time.perf_counter()
    with Tracer(device, iterations=1, layer_replay=True) as tracer:
        model, batch, _ = engine_overhead.build("llama-7b", "cuda" if device != "cpu" else "cpu")
        built = time.perf_counter()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model(input_ids=batch, labels=batch).loss.backward()
        backward = time.perf_counter()
        opt.step()
        stepped = time.perf_counter()
        opt.zero_grad(set_to_none=True)
    end = time.perf_counter()
    peak = tracer.snapshot()["summary"]["peak_bytes"]
    return [built - start, backward - built, stepped - backward, end - start], peak


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="h100-80gb")
    args = p.parse_args()
    if args.device != "cpu":
        from memlens.cuda.build import ensure_fake_cuda_support

        ensure_fake_cuda_support()
    import transformers

    transformers.LlamaForCausalLM  # noqa: B018  (its module imported before any trace)
    import memlens.engine.accountant as accountant

    fast = {"answered": accountant.answered, "answered_like": accountant.answered_like,
            "answered_factory": accountant.answered_factory,
            "answered_alias": accountant.answered_alias}
    slow = {name: (lambda *a: (False, None)) for name in fast}
    best: dict[str, list[float]] = {}
    peaks: dict[str, int] = {}
    for i in range(2 * (args.rounds + 1)):
        mode = "on" if i % 2 == 0 else "off"
        for name, hook in (fast if mode == "on" else slow).items():
            setattr(accountant, name, hook)
        times, peaks[mode] = one_trace(args.device)
        if i >= 2:  # the first trace of each mode warms up
            best[mode] = [min(a, b) for a, b in zip(best.get(mode, times), times)]
    for name, hook in fast.items():
        setattr(accountant, name, hook)
    assert peaks["on"] == peaks["off"], peaks
    print(f"Llama-7B step with layer replay on {args.device}, best of {args.rounds}; "
          f"peak {peaks['on']:,} B both ways")
    print(f"{'phase':<18} {'fast paths off':>15} {'on':>8} {'on / off':>9}")
    for k, phase in enumerate(PHASES):
        off, on = best["off"][k], best["on"][k]
        print(f"{phase:<18} {off:>13.3f} s {on:>6.3f} s {on / off:>9.2f}")


if __name__ == "__main__":
    main()
