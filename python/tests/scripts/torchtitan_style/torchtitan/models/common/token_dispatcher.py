"""Expert parallelism's token exchange, in the shape torchtitan 0.3.0 gives it: routing counts
exchanged, read back to the host with `.tolist()` to size the all-to-all of the tokens."""

import torch
import torch.distributed as dist


class AllToAllTokenDispatcher:
    def __init__(self, num_experts: int):
        self.num_experts = num_experts

    def _sync_token_count_exchange(self, local_counts, global_counts, ep_size):
        input_splits = local_counts.view(ep_size, -1).sum(dim=1).to("cpu").tolist()
        output_splits = global_counts.view(ep_size, -1).sum(dim=1).to("cpu").tolist()
        return global_counts.reshape(-1), input_splits, output_splits

    def dispatch(self, x, scores, expert_ids, local_counts):
        ep_size = dist.get_world_size()
        order = expert_ids.flatten().argsort()
        routed = x.repeat_interleave(expert_ids.shape[1], dim=0)[order]
        global_counts = torch.empty_like(local_counts)
        dist.all_to_all_single(global_counts, local_counts)
        counts, input_splits, output_splits = self._sync_token_count_exchange(
            local_counts, global_counts, ep_size)
        received = routed.new_empty(sum(output_splits), routed.shape[1])
        dist.all_to_all_single(received, routed, output_splits, input_splits)
        return received, counts, (input_splits, output_splits)
