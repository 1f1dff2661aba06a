"""A snapshot's allocation stream as allocator.replay takes it (tests of the allocator model
against a trace: CUDA graphs' and MemPools' pools)."""


def replay_events(snap: dict, kinds, device: str = "cuda:0", before: int | None = None) -> list:
    """`device`'s allocation events in order, with the stream events of `kinds` at their places
    (each after allocation event `seq`); `before`: only the events before that one."""
    a = snap["allocations"]
    index = a["devices"].index(device)
    order = []
    for i in range(len(a["bytes"])):
        if a["device"][i] != index or before is not None and a["alloc_seq"][i] >= before:
            continue
        order.append((a["alloc_seq"][i], ("alloc", i, a["requested_bytes"][i], a["stream"][i])))
        if a["free_seq"][i] >= 0 and (before is None or a["free_seq"][i] < before):
            order.append((a["free_seq"][i], ("free", i, 0, a["stream"][i])))
    for e in a["stream_events"]:
        if e["kind"] in kinds and (before is None or e["seq"] < before):
            order.append((e["seq"] + 0.5, (e["kind"], e["pool"], 0, e["stream"])))
    return [e for _, e in sorted(order, key=lambda pair: pair[0])]
