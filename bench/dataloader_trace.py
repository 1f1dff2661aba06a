"""Trace time of a DataLoader-driven training script against bare FakeTensorMode running the
same steps (issue 20).

    python bench/dataloader_trace.py [--repeat N] [--device h100-80gb]

The script is the corpus' ImageNet-style loop (python/tests/scripts/corpus/imagenet_resnet.py:
our ResNet-18, batch 8 of 64x64 images, a map-style Dataset, `DataLoader(num_workers=2,
pin_memory=True, shuffle=True, drop_last=True)`, SGD with momentum, accuracy with `topk`), two
training iterations. Each mode runs in a fresh process and times from after the imports:

- bare: the same two steps written out by hand — a real DataLoader over the script's Dataset
  outside any fake mode, each batch turned fake with `FakeTensorMode.from_tensor`, the model,
  loss and optimizer step inside `FakeTensorMode` (no accounting);
- memlens: the unmodified script run by `run_script` under `Tracer(device, iterations=2)`, as
  `memlens run` does (the report is not built).

Modes are interleaved and each keeps its best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "python", "tests", "scripts", "corpus", "imagenet_resnet.py")
MODES = ("bare", "memlens")
ITERATIONS = 2


def bare(device: str) -> None:
    import torch
    import torch.nn as nn
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.data import DataLoader

    script = runpy.run_path(SCRIPT, run_name="bench")
    loader = DataLoader(script["SyntheticImages"](32, 64, 1000), batch_size=8, shuffle=True,
                        num_workers=2, pin_memory=True, drop_last=True)
    dev = "cuda" if device != "cpu" else "cpu"
    mode = FakeTensorMode()
    with mode, torch.device(dev):  # built in place: bare fake mode cannot swap in `.to()`
        model = script["build_model"]()
        criterion = nn.CrossEntropyLoss().to(dev)
        optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    for i, (images, target) in enumerate(loader):
        if i == ITERATIONS:
            break
        images, target = mode.from_tensor(images), mode.from_tensor(target)
        with mode:
            images, target = images.to(dev), target.to(dev)
            output = model(images)
            loss = criterion(output, target)
            script["accuracy"](output, target, topk=(1, 5))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def child(mode: str, device: str) -> dict:
    if device != "cpu":
        from memlens.cuda.build import ensure_fake_cuda_support

        ensure_fake_cuda_support()
    import torch  # noqa: F401
    import torch.utils.data  # noqa: F401

    from memlens import Tracer
    from memlens.targets.script import ScriptTarget, run_script

    import memlens.engine.tracer  # noqa: F401  (memlens' lazy imports, outside the clock)
    if device != "cpu":
        import memlens.allocator  # noqa: F401
        import memlens.cuda.simulate  # noqa: F401
        import memlens.kernels.cuda  # noqa: F401

    t0 = time.perf_counter()
    if mode == "bare":
        bare(device)
    else:
        stopped = run_script(ScriptTarget(SCRIPT), Tracer(device, iterations=ITERATIONS))
        assert stopped, "the script ended before two iterations were traced"
    wall = time.perf_counter() - t0
    return {"mode": mode, "wall_s": wall,
            "rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--device", default="h100-80gb")
    p.add_argument("--child", nargs=2, metavar=("MODE", "DEVICE"))
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..", "python")}
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for mode in MODES:
            out = subprocess.run([sys.executable, __file__, "--child", mode, args.device],
                                 capture_output=True, text=True, env=env)
            if out.returncode != 0:
                sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            if mode not in best or r["wall_s"] < best[mode]["wall_s"]:
                best[mode] = r
    base = best["bare"]["wall_s"]
    print(f"ImageNet-style DataLoader script, {ITERATIONS} iterations, target {args.device}")
    for mode in MODES:
        r = best[mode]
        print(f"{mode:<8} {r['wall_s']:7.2f} s {r['wall_s'] / base:6.2f}x bare  "
              f"peak RSS {r['rss_bytes'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
