"""The store and group API distributed libraries use, on one simulated rank of 8 (run with
`--world-size 8 --rank R`): the default store's whole API, a store-based barrier, a TCPStore
built by the script, `split_group` with the default group bound to a device, DeviceMesh on it,
`new_subgroups`, `monitored_barrier` on a Gloo group (Lightning's infinite barrier), and the
rank queries. Prints one `ANSWER name value` line each."""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.utils.store import barrier as elastic_barrier


def answer(name: str, value) -> None:
    print(f"ANSWER {name} {value!r}", flush=True)


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    # Bound to a device: subgroups are then split from the default group's communicator.
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()

    store = dist.distributed_c10d._get_default_store()
    answer("add", [store.add("counter", 5), store.add("counter", 2)])
    store.set("name", "memlens")
    answer("get", store.get("name"))
    answer("compare_set", [store.compare_set("name", "memlens", "lens"),
                           store.compare_set("name", "nope", "x")])
    answer("check", [store.check(["name"]), store.check(["missing"])])
    store.wait(["name"])
    store.wait([f"other_rank_{(rank + 1) % world}"])  # set by another rank: does not block
    answer("delete_key", [store.delete_key("name"), store.check(["name"])])
    answer("num_keys_positive", store.num_keys() > 0)
    try:
        store.get("never_set")
    except dist.DistStoreError as e:
        answer("get_missing", "memlens" in str(e) and "never_set" in str(e))
    elastic_barrier(store, world, key_prefix="memlens_barrier")  # adds, then waits for the last
    answer("elastic_barrier", "passed")

    tcp = dist.TCPStore("127.0.0.1", 29511, world, rank == 0, timeout=timedelta(seconds=5))
    tcp.set("k", "v")
    answer("tcp", [tcp.get("k"), tcp.add("n", 3), tcp.port])

    pairs = dist.split_group(split_ranks=[[0, 1, 2, 3], [4, 5, 6, 7]])
    answer("split", dist.get_process_group_ranks(pairs))
    answer("split_rank", dist.get_rank(pairs))
    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))
    answer("mesh_tp", dist.get_process_group_ranks(mesh.get_group("tp")))
    answer("mesh_dp", dist.get_process_group_ranks(mesh.get_group("dp")))
    sub, all_subs = dist.new_subgroups(group_size=2)
    answer("subgroup", [dist.get_process_group_ranks(sub), len(all_subs)])
    answer("global_rank", dist.get_global_rank(sub, 0))
    answer("group_rank", dist.get_group_rank(sub, rank))

    gloo = dist.new_group(backend="gloo", timeout=timedelta(days=10000))
    answer("gloo_backend", str(dist.get_backend(gloo)))
    gloo.monitored_barrier()
    dist.monitored_barrier(gloo)
    try:
        dist.monitored_barrier()  # the default group is NCCL's: torch refuses, as on a GPU
    except ValueError as e:
        answer("monitored_nccl", str(e))

    x = torch.ones(1024, device="cuda")
    dist.all_reduce(x, group=pairs)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
