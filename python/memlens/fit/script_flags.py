"""How one point of the search reaches the job: flags of the script set or removed, environment
variables set, the world size changed.

Megatron-LM scripts get the built-in axes as Megatron's own flags (MEGATRON_FLAGS); any other
script names its flag per axis (`--axis micro-batch=--batch-size`, `--axis seq=env:SEQ_LEN`).
A flag the script's arguments already hold is replaced where it stands, in the form it has
(`--flag V` or `--flag=V`); a new one is appended as `--flag=V`. An on/off axis mapped to a
flag passes the bare flag when on and removes it when off.
"""

from __future__ import annotations

import copy

from ..errors import MemlensError
from .space import SWITCH, Axis, Point, Target

MEGATRON_FLAGS = {
    "micro-batch": "--micro-batch-size",
    "seq": "--seq-length",
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
}
_MEGATRON_RECOMPUTE_FLAGS = ("--recompute-granularity", "--recompute-method",
                             "--recompute-num-layers")
_MEGATRON_SIGNS = ("--tensor-model-parallel-size", "--micro-batch-size", "--num-layers",
                   "--global-batch-size")


def is_megatron(job) -> bool:
    """A Megatron-LM training script: pretrain_*.py, or launched with Megatron's flags."""
    t = job.target
    name = (t.path or t.module or "").replace("\\", "/").rsplit("/", 1)[-1]
    return name.startswith("pretrain_") or any(
        a.split("=", 1)[0] in _MEGATRON_SIGNS for a in t.args)


def megatron_target(axis_name: str) -> Target | None:
    if axis_name in MEGATRON_FLAGS or axis_name in ("recompute", "zero", "fsdp", "fp8"):
        return Target("megatron", axis_name)
    return None


def apply_point(job, axes: list[Axis], point: Point):
    """A copy of the job with the point's values in its arguments, environment, world size."""
    job = copy.deepcopy(job)
    args = job.target.args
    for axis, value in zip(axes, point.values):
        t = axis.target
        if t.kind == "world":
            # One GPU of a job launched as a plain process (`python train.py`, no world size)
            # stays one process: a one-rank torchrun job would set RANK/WORLD_SIZE and send
            # the script down its DDP path, which is not what the user runs on one GPU.
            single = int(value) == 1 and job.world_size is None
            job.world_size = None if single else int(value)
        elif t.kind == "env":
            job.target.env[t.name] = value
        elif t.kind == "flag" and axis.values and set(axis.values) <= set(SWITCH):
            set_switch(args, t.name, value == "on")
        elif t.kind == "flag":
            set_flag(args, t.name, value)
        else:
            _megatron(args, t.name, value)
    return job


def _megatron(args: list[str], name: str, value: str) -> None:
    if name in MEGATRON_FLAGS:
        set_flag(args, MEGATRON_FLAGS[name], value)
    elif name == "recompute":
        remove_flag(args, "--recompute-activations", takes_value=False)
        for flag in _MEGATRON_RECOMPUTE_FLAGS:
            remove_flag(args, flag)
        if value == "selective":
            args += ["--recompute-granularity", "selective"]
        elif value == "full":
            args += ["--recompute-granularity", "full", "--recompute-method", "uniform",
                     "--recompute-num-layers", "1"]
    elif name == "zero":
        if value in ("2", "3"):
            raise MemlensError(f"--zero {value}: Megatron-LM's distributed optimizer shards the "
                               "optimizer state (ZeRO-1, --zero 1); for sharded gradients and "
                               "weights use --fsdp on (--use-torch-fsdp2)")
        set_switch(args, "--use-distributed-optimizer", value == "1")
    elif name == "fsdp":
        set_switch(args, "--use-torch-fsdp2", value == "on")
    elif name == "fp8":
        remove_flag(args, "--fp8-format")
        if value == "on":
            args += ["--fp8-format", "hybrid"]


def _takes_next(args: list[str], i: int) -> bool:
    return i + 1 < len(args) and not args[i + 1].startswith("--")


def set_flag(args: list[str], flag: str, value: str) -> None:
    """`flag` set to `value` in place: the first occurrence replaced in its own form, others
    removed; appended as `flag=value` where it is absent."""
    i, placed = 0, False
    while i < len(args):
        a = args[i]
        if a == flag or a.startswith(flag + "="):
            two_tokens = a == flag and _takes_next(args, i)
            width = 2 if two_tokens else 1
            if placed:
                del args[i:i + width]
                continue
            args[i:i + width] = [flag, value] if two_tokens else [f"{flag}={value}"]
            placed = True
            i += width
            continue
        i += 1
    if not placed:
        args.append(f"{flag}={value}")


def remove_flag(args: list[str], flag: str, takes_value: bool = True) -> None:
    i = 0
    while i < len(args):
        if args[i].startswith(flag + "="):
            del args[i]
        elif args[i] == flag:
            del args[i:i + (2 if takes_value and _takes_next(args, i) else 1)]
        else:
            i += 1


def set_switch(args: list[str], flag: str, on: bool) -> None:
    remove_flag(args, flag, takes_value=False)
    if on:
        args.append(flag)
