"""A recorded launch command (its launcher and arguments, after the shell's expansion) as a job:
the training script and its arguments, the processes per node and the nodes, and the
environment the launcher adds (accelerate's ACCELERATE_MIXED_PRECISION)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .launch import parse_torchrun_args

# accelerate launch's options that take no value (accelerate/commands/launch.py).
_ACCELERATE_FLAGS = {
    "quiet", "q", "cpu", "multi_gpu", "tpu", "enable_cpu_affinity", "dynamo_use_fullgraph",
    "dynamo_use_dynamic", "dynamo_use_regional_compilation", "use_deepspeed", "use_fsdp",
    "use_parallelism_config", "use_megatron_lm", "same_network", "module", "m", "no_python",
    "tpu_cluster", "no_tpu_cluster", "tpu_use_sudo", "debug", "downcast_bf16",
}


@dataclass
class LaunchedScript:
    script: str | None
    module: str | None
    args: list[str]
    nproc_per_node: int | None
    nnodes: int | None
    problem: str | None = None  # why the processes per node are unknown
    env: dict[str, str] = field(default_factory=dict)
    local_rank_arg: str = ""  # the option the launcher passes the local rank in, if any
    distributed: bool = True  # False: `python train.py`, one process and no torchrun variables

    @property
    def world_size(self) -> int | None:
        if self.nproc_per_node is None:
            return None
        return self.nproc_per_node * (self.nnodes or 1)


def launched_script(launcher: str, args: list[str]) -> LaunchedScript:
    if launcher == "python":
        return LaunchedScript(args[0], None, args[1:], None, None, distributed=False)
    if launcher == "accelerate":
        return _accelerate(args)
    if launcher == "deepspeed":
        return _deepspeed(args)
    parsed = parse_torchrun_args(args)
    nproc, problem = parsed["nproc"], None
    if parsed["nproc_text"] is None:
        nproc = 1  # torchrun's default --nproc-per-node
    elif nproc is None:
        problem = _nproc_problem(parsed["nproc_text"])
    use_env = any(a.split("=")[0] in ("--use-env", "--use_env") for a in args)
    return LaunchedScript(parsed["script"], parsed["module"], parsed["args"], nproc,
                          parsed["nnodes"], problem,
                          local_rank_arg="--local-rank" if launcher == "torch.distributed.launch"
                          and not use_env else "")


# The deepspeed launcher's options that take no value (deepspeed/launcher/runner.py).
_DEEPSPEED_FLAGS = {"module", "no_python", "no_local_rank", "no_ssh", "no_ssh_check",
                    "force_multi", "save_pid", "bind_cores_to_rank", "quiet", "q"}


def _deepspeed(args: list[str]) -> LaunchedScript:
    """`deepspeed [--num_gpus N] [--num_nodes M] train.py ...`: it starts N processes per node
    with torchrun's variables and passes `--local_rank=R` unless --no_local_rank."""
    options: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].lstrip("-").partition("=")
        if name not in _DEEPSPEED_FLAGS and not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        options[name] = value
        i += 1
    rest = args[i:]
    script = rest[0] if rest else None
    gpus = options.get("num_gpus", options.get("num_accelerators"))
    nodes = options.get("num_nodes", "1")
    nproc = nnodes = None
    problem = None
    if gpus is None:
        problem = ("deepspeed without --num_gpus starts one process per GPU of the machine "
                   "(or of its --hostfile / --include)")
    elif not gpus.isdigit() or not nodes.isdigit():
        problem = f"--num_gpus {gpus!r} --num_nodes {nodes!r} are not numbers"
    else:
        nproc, nnodes = int(gpus), int(nodes)
    module = "module" in options
    return LaunchedScript(None if module else script, script if module else None, rest[1:],
                          nproc, nnodes, problem,
                          local_rank_arg="" if "no_local_rank" in options else "--local_rank")


def _nproc_problem(text: str) -> str:
    if text in ("gpu", "auto", "cpu", "xpu"):
        return f"--nproc_per_node {text} depends on the machine it runs on"
    if text == "":
        return "--nproc_per_node is empty when the script runs"
    return f"--nproc_per_node {text!r} is not a number"


def _accelerate(args: list[str]) -> LaunchedScript:
    options: dict[str, str] = {}
    module, i = False, 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].lstrip("-").replace("-", "_").partition("=")
        if name in ("module", "m"):
            module = True
        elif name not in _ACCELERATE_FLAGS and not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
            i += 1
        options[name] = value
        i += 1
    rest = args[i:]
    script = rest[0] if rest else None
    precision = options.get("mixed_precision", "no").lower()
    env = {"ACCELERATE_MIXED_PRECISION": precision,
           "ACCELERATE_USE_CPU": str("cpu" in options)}
    for flag, variable in (("use_fsdp", "ACCELERATE_USE_FSDP"),
                           ("use_deepspeed", "ACCELERATE_USE_DEEPSPEED")):
        if flag in options:
            env[variable] = "true"
    if "dynamo_backend" in options:
        env["ACCELERATE_DYNAMO_BACKEND"] = options["dynamo_backend"].upper()
    total, machines = options.get("num_processes"), options.get("num_machines", "1")
    nproc = nnodes = None
    problem = None
    if total is None:
        problem = ("accelerate launch has no --num_processes (the count comes from the "
                   "accelerate config or the machine's GPUs)")
    elif not total.isdigit() or not machines.isdigit() or int(machines) < 1:
        problem = f"--num_processes {total!r} --num_machines {machines!r} are not numbers"
    elif int(total) % int(machines):
        problem = f"--num_processes {total} does not split over {machines} machines"
    else:  # accelerate counts processes over all machines
        nnodes = int(machines)
        nproc = int(total) // nnodes
    # One process without --multi_gpu: accelerate runs the script plainly, without torchrun.
    plain = nproc == 1 and nnodes == 1 and "multi_gpu" not in options
    return LaunchedScript(None if module else script, script if module else None, rest[1:],
                          None if plain else nproc, None if plain else nnodes, problem, env,
                          distributed=not plain)
