"""A recorded launch command (its launcher and arguments, after the shell's expansion) as a job:
the training script and its arguments, the processes per node and the nodes, and the
environment the launcher adds (accelerate's ACCELERATE_MIXED_PRECISION)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .accelerate_launch import needs_accelerate, resolve as resolve_accelerate
from .launch import accelerate_options, parse_torchrun_args

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
    note: str | None = None  # printed before the trace (what of the launch memlens changes)

    @property
    def world_size(self) -> int | None:
        if self.nproc_per_node is None:
            return None
        return self.nproc_per_node * (self.nnodes or 1)


def launched_script(launcher: str, args: list[str], cwd: str | None = None) -> LaunchedScript:
    """`cwd`: where the launcher runs (accelerate's --config_file is relative to it)."""
    if launcher == "python":
        return LaunchedScript(args[0], None, args[1:], None, None, distributed=False)
    if launcher == "accelerate":
        options, rest = accelerate_options(args)
        if needs_accelerate(list(options)):
            return _accelerate_configured(resolve_accelerate(args, cwd))
        return _accelerate(options, rest)
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


def _accelerate(options: dict[str, str], rest: list[str]) -> LaunchedScript:
    module = "module" in options or "m" in options
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


def _accelerate_configured(resolved: dict) -> LaunchedScript:
    """The job accelerate resolved from its configuration file and command line
    (accelerate_launch.py): its launcher's environment goes to the script unchanged."""
    script, module = resolved["script"], resolved["module"]
    total, machines = resolved["num_processes"], resolved["num_machines"] or 1
    notes = []
    if resolved["mode"] == "simple":  # accelerate's simple launcher: one process
        nproc = nnodes = None
    elif not isinstance(total, int) or total % machines:
        return LaunchedScript(None if module else script, script if module else None,
                              resolved["args"], None, None,
                              f"accelerate's num_processes {total!r} does not split over "
                              f"{machines} machines", resolved["env"])
    else:
        nproc, nnodes = total // machines, machines
        if int(resolved["machine_rank"] or 0) != 0:
            notes.append(f"the accelerate configuration's machine_rank "
                         f"{resolved['machine_rank']} is not used: memlens traces the rank "
                         "--rank names (rank 0 without it), on whichever machine it is")
        if resolved["mode"] == "deepspeed":
            notes.append("accelerate's DeepSpeed settings reach the script as accelerate passes "
                         "them (ACCELERATE_DEEPSPEED_*, ACCELERATE_USE_DEEPSPEED)")
    return LaunchedScript(None if module else script, script if module else None,
                          resolved["args"], nproc, nnodes, None, resolved["env"],
                          distributed=resolved["mode"] != "simple",
                          note="; ".join(notes) or None)
