import torch


def get_batch_on_this_tp_rank(data_iterator):
    data = next(data_iterator)
    return {k: v.cuda(non_blocking=True) for k, v in data.items()}


def logical_and_across_model_parallel_group(value: bool) -> bool:
    t = torch.tensor([int(value)], dtype=torch.int, device="cuda")
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
    return bool(t.item())


def reduce_max_stat_across_model_parallel_group(stat):
    t = torch.tensor([stat], dtype=torch.float32, device="cuda")
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t.item()


def calc_params_l2_norm(model):
    """As Megatron-LM's: Megatron-FSDP's chunks stop communicating first (`stop_communication`
    releases the parameters its optimizer step all-gathered), then the parameters' fp32 norm."""
    for chunk in model:
        if hasattr(chunk, "stop_communication"):
            chunk.stop_communication()
    norms = [p.detach().float().norm() for chunk in model for p in chunk.parameters()]
    return torch.stack(norms).norm()
