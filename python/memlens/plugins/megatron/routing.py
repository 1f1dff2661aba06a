"""How many tokens each MoE expert receives in a trace, which has no router values to route by.

The router runs as configured (its softmax, top-k, auxiliary losses, Sinkhorn: their memory is
real), but the counts the dispatchers read back from its routing map are fixed by a policy,
`MEMLENS_MOE_ROUTING`:

- `balanced` (the default): a rank's T tokens make T x top-k assignments, spread evenly over
  the E experts (T x k / E each; the remainder to the first experts);
- `worst`: every token of every rank picks the top-k experts of the traced rank (its local
  experts first, then the next ones): those experts process every token, the others none.

The user's capacity settings still apply: with a capacity factor each expert keeps at most
`ceil(T x k / E x factor)` of a rank's tokens, and with padding exactly that many.
"""

from __future__ import annotations

import math
import os

POLICIES = ("balanced", "worst")
VARIABLE = "MEMLENS_MOE_ROUTING"


def policy() -> str:
    value = os.environ.get(VARIABLE, "balanced") or "balanced"
    if value not in POLICIES:
        raise ValueError(f"{VARIABLE}={value!r}: the MoE routing policy is one of "
                         f"{', '.join(POLICIES)}")
    return value


def tokens_per_expert(tokens: int, topk: int, experts: int, local: range, config=None,
                      which: str | None = None) -> list[int]:
    """The tokens one rank's `tokens` send to each of the `experts` (`local`: the traced
    rank's experts), under the policy and the config's capacity."""
    which = which or policy()
    if which == "balanced":
        base, extra = divmod(tokens * topk, experts)
        counts = [base + (e < extra) for e in range(experts)]
    else:
        chosen = [(local.start + i) % experts for i in range(min(topk, experts))]
        counts = [tokens if e in chosen else 0 for e in range(experts)]
    factor = getattr(config, "moe_expert_capacity_factor", None)
    if factor is not None:
        capacity = math.ceil(tokens * topk / experts * factor)
        if getattr(config, "moe_pad_expert_input_to_capacity", False):
            return [capacity] * experts
        counts = [min(c, capacity) for c in counts]
    return counts


def note(which: str | None = None) -> str:
    which = which or policy()
    how = ("tokens spread evenly over the experts (T x top-k / E each)" if which == "balanced"
           else "every token to the top-k experts of the traced rank (the worst case)")
    return (f"MoE routing {which} ({VARIABLE}): {how}; the router runs as configured but a "
            "trace has no router values, so the tokens per expert are fixed this way")
