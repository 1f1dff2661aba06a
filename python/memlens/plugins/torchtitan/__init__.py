"""torchtitan: expert parallelism's token exchange, routed evenly.

torchtitan's all-to-all token dispatcher (0.3.0, `torchtitan/models/common/token_dispatcher.py`,
`AllToAllTokenDispatcher`) sizes its two all-to-alls from routing counts it reads back to the
host (`_sync_token_count_exchange`: `.tolist()` of how many of this rank's routed tokens go to
each rank, and how many each rank sends here). A trace has no routing values: it answered
zeros, and the first split stopped ("split_with_sizes expects split_sizes to sum exactly to
49152"). As for Megatron's dispatchers (plugins/megatron/routing.py), the trace routes evenly:
each rank sends an equal share of its routed tokens (its tokens x top-k) to every rank of the
expert-parallel group, and receives the same. A note in the report says so. Written for 0.3.0's
method names; where a newer torchtitan lacks them, the plugin says so and does nothing.
"""

from __future__ import annotations

import functools
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin

NOTE = ("torchtitan's expert-parallel token exchange is routed evenly: every rank sends an "
        "equal share of its routed tokens to each rank (a trace has no routing values)")


def even_splits(routed: int, ranks: int) -> list[int]:
    """`routed` tokens in `ranks` shares, the remainder on the last."""
    splits = [routed // ranks] * ranks
    splits[-1] += routed - sum(splits)
    return splits


class Plugin(LibraryPlugin):
    watches = {"torchtitan.models.common.token_dispatcher": "token_dispatcher"}

    def token_dispatcher(self, mod: ModuleType) -> None:
        import torchtitan

        check_tested("torchtitan", getattr(torchtitan, "__version__", "0.0.0"))
        cls = getattr(mod, "AllToAllTokenDispatcher", None)
        if cls is None or not all(hasattr(cls, name) for name in
                                  ("dispatch", "_sync_token_count_exchange")):
            self.tracer.add_note(
                f"torchtitan {getattr(torchtitan, '__version__', '?')}: its all-to-all token "
                "dispatcher is not the one memlens routes evenly (AllToAllTokenDispatcher."
                "_sync_token_count_exchange): expert-parallel splits are the trace's zeros")
            return
        dispatch, sync = cls.dispatch, cls._sync_token_count_exchange
        routed: list[int] = []  # tokens x top-k of the dispatch under way (innermost last)
        add_note = self.tracer.add_note

        @functools.wraps(dispatch)
        def even_dispatch(self, x, scores, expert_ids, *args, **kwargs):
            routed.append(expert_ids.numel())
            try:
                return dispatch(self, x, scores, expert_ids, *args, **kwargs)
            finally:
                routed.pop()

        @functools.wraps(sync)
        def even_sync(self, local_counts, global_counts, ep_size, *args, **kwargs):
            counts, sent, received = sync(self, local_counts, global_counts, ep_size, *args,
                                          **kwargs)
            if not routed:  # called outside a dispatch: its own answer
                return counts, sent, received
            add_note(NOTE)
            splits = even_splits(routed[-1], ep_size)
            return counts, splits, list(splits)

        self.patcher.setattr(cls, "dispatch", even_dispatch)
        self.patcher.setattr(cls, "_sync_token_count_exchange", even_sync)
