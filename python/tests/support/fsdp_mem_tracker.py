"""PyTorch's own FSDPMemTracker on the same FSDP2 step that memlens traces: the peer estimate
of test 1 (tests/distributed/test_distributed_fsdp.py).

    python fsdp_mem_tracker.py WORLD_SIZE RANK DEVICE SCRIPT [SCRIPT ARGS...]  -> JSON on stdout

SCRIPT must define `parse(argv)`, `build(args, device, mesh)`, `batch(device)` and
`step(model, optimizer, x, y)` (tests/scripts/dist/fsdp2_train.py). Everything runs under
FakeTensorMode with a fake process group, as torch's own tests of the tracker do: the model and
optimizer are built before the tracker starts (it then takes stock of their parameters and
states), two iterations run inside it, and its module statistics are reset after the first,
as it requires.
"""

from __future__ import annotations

import importlib.util
import json
import sys


def main() -> None:
    world, rank, device, script, *script_args = sys.argv[1:]
    if device.startswith("cuda"):
        from memlens.cuda.build import ensure_fake_cuda_support  # before torch

        ensure_fake_cuda_support(device_count=1)
        from memlens.cuda.simulate import simulate_cuda
        from memlens.devices import get_device

        # torch.cuda answering as an H100 (streams, events, capability) for FSDP's own calls
        with simulate_cuda(get_device("h100-80gb"), _NoMemory(), device_count=1):
            run(world, rank, device, script, script_args)
    else:
        run(world, rank, device, script, script_args)


class _NoMemory:
    """simulate_cuda's memory questions: the tracker does not ask them."""

    def allocated(self, i):
        return 0

    max_allocated = reserved = max_reserved = allocated

    def reset_peak(self, i):
        pass


def run(world, rank, device, script, script_args) -> None:
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    spec = importlib.util.spec_from_file_location("train_script", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = mod.parse(script_args)
    dist.init_process_group("fake", store=FakeStore(), rank=int(rank), world_size=int(world))
    dev = torch.device(device)
    mesh = init_device_mesh(dev.type, (int(world),), mesh_dim_names=("dp",))  # real, as
    with FakeTensorMode():  # the tracker's own tests make it
        model, optimizer = mod.build(args, dev, mesh)
        tracker = FSDPMemTracker(model, optimizer)
        x, y = mod.batch(dev, args.vocab)
        tracker.track_inputs((x, y))
        with tracker:
            for i in range(2):
                if i:
                    x, y = mod.batch(dev, args.vocab)
                mod.step(model, optimizer, x, y)
                if i == 0:
                    tracker.reset_mod_stats()
        peak = tracker.get_tracker_snapshot("peak")
    dev_key = next(k for k in peak if torch.device(k).type == dev.type)
    # The root module's forward and backward peaks of the second iteration (the statistics
    # were reset after the first): the training step without the optimizer.
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPModState

    stats = tracker.memory_tracking[model].snapshots
    fwbw = max(snaps[-1][dev_key]["Total"] for state, snaps in stats.items()
               if state in (_FSDPModState.PEAK_FW, _FSDPModState.PEAK_BW) and snaps)
    print(json.dumps({"peak_bytes": peak[dev_key]["Total"], "forward_backward_peak_bytes": fwbw,
                      "at_peak": {str(k): v for k, v in peak[dev_key].items() if k != "Total"}}))
    dist.destroy_process_group()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
