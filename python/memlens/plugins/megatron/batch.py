"""The user's batch, as Megatron-LM's schedule gets it, for a trace (after Megatron validated it).

The global batch and the micro-batch size are the user's. Two things a trace may change, each
with a note:

- batch-size ramp-up (with sample-based training; Megatron rejects it with --train-iters): the
  trace runs the full global batch, the largest of the ramp-up, from the first iteration;
  so with megatron-core 0.18's --step-batch-size-schedule (which replaces the ramp-up, then
  only warned of and ignored by Megatron's calculator): its largest batch;
- micro-batches per iteration: fewer are traced only when every pipeline stage then holds the
  same micro-batches in flight as with the user's count (schedule.fewest_alike), and nothing
  else grows with the count (the deferred output-layer gradients of
  --defer-embedding-wgrad-compute do); the global batch is lowered to match and the note
  names both counts.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from .schedule import Pipeline, fewest_alike


def check(args: Any) -> None:
    """Megatron's own checks of the batch (ramp-up steps, divisibility by micro-batch x DP),
    which it runs after validate_args, run now on the user's values: a trace changes them."""
    from megatron.core import num_microbatches_calculator as calc

    init = calc.init_num_microbatches_calculator
    since_0_18 = {name: getattr(args, name, None) for name in ("step_batch_size_schedule",
                                                                "seq_length")
                  if name in inspect.signature(init).parameters}
    init(getattr(args, "rank", 0), args.rampup_batch_size, args.global_batch_size,
         args.micro_batch_size, args.data_parallel_size,
         getattr(args, "decrease_batch_size_if_needed", False), **since_0_18)
    calc.destroy_num_microbatches_calculator()


def set_up(args: Any) -> list[str]:
    notes = []
    ramp = getattr(args, "rampup_batch_size", None)
    if ramp:
        start, step, samples = (int(v) for v in ramp)
        args.rampup_batch_size = None
        notes.append(f"batch-size ramp-up from {start} by {step} over {samples} samples: traced "
                     f"at the full global batch {args.global_batch_size}, the largest (the "
                     f"ramp-up's smaller batches hold no more)")
    schedule = getattr(args, "step_batch_size_schedule", None)
    if schedule:
        largest = max(int(size) for size in re.findall(r":(\d+)", schedule))
        args.step_batch_size_schedule, args.global_batch_size = None, largest
        notes.append(f"step batch-size schedule {schedule!r}: traced at its largest global "
                     f"batch {largest} (a smaller batch holds no more)")
    per_step = args.micro_batch_size * args.data_parallel_size
    if args.global_batch_size % per_step:
        return notes  # Megatron's own error (decrease_batch_size_if_needed aside) says so
    n = args.global_batch_size // per_step
    if getattr(args, "num_microbatches_with_partial_activation_checkpoints", None) is not None:
        return notes  # which micro-batches recompute depends on their count
    if getattr(args, "defer_embedding_wgrad_compute", False):
        # The last stage keeps the output layer's input and gradient of up to
        # --wgrad-deferral-limit micro-batches (0: all) until the pipeline flush, so what it
        # holds grows with the count.
        return notes
    pipeline = pipeline_of(args)
    traced = fewest_alike(pipeline, n)
    if traced < n:
        args.global_batch_size = traced * per_step
        notes.append(
            f"global batch {n * per_step} = {n} micro-batches of {args.micro_batch_size} x DP "
            f"{args.data_parallel_size} per iteration; traced {traced} per iteration: every "
            f"pipeline stage holds as many micro-batches at once as with {n} ("
            f"{_schedule(pipeline)}), so memory is the same")
    return notes


def pipeline_of(args: Any) -> Pipeline:
    """The schedule Megatron runs for validated arguments."""
    stages = int(getattr(args, "pipeline_model_parallel_size", 1) or 1)
    chunks = int(getattr(args, "virtual_pipeline_model_parallel_size", None) or 1)
    return Pipeline(stages, chunks, getattr(args, "microbatch_group_size_per_vp_stage", None),
                    int(bool(getattr(args, "overlap_moe_expert_parallel_comm", False))))


def _schedule(p: Pipeline) -> str:
    if p.stages == 1:
        return "no pipelining: one at a time"
    if not p.interleaved:
        return f"1F1B: min(PP - stage, N) on each stage, PP {p.stages}"
    return (f"interleaved, {p.chunks} chunks per stage, groups of {p.group_size}: the same "
            f"in-flight micro-batches of each chunk on every stage")
