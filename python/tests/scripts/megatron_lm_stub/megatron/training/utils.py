import torch


def get_batch_on_this_tp_rank(data_iterator):
    data = next(data_iterator)
    return {k: v.cuda(non_blocking=True) for k, v in data.items()}


def logical_and_across_model_parallel_group(value: bool) -> bool:
    t = torch.tensor([int(value)], dtype=torch.int, device="cuda")
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MIN)
    return bool(t.item())
