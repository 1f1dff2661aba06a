"""`accelerate launch` with a configuration file, resolved by accelerate itself.

`accelerate launch --config_file cfg.yaml train.py` (or no `--config_file` and the default
`~/.cache/huggingface/accelerate/default_config.yaml`) takes the process count, the machines,
mixed precision and the FSDP / DeepSpeed / Megatron-LM sections from the file, merges them
with the command line and hands them to the training script as environment variables
(`ACCELERATE_USE_FSDP`, `FSDP_VERSION`, `ACCELERATE_DEEPSPEED_ZERO_STAGE`, ...) that the
script's `Accelerator` reads. Dropping the file would trace a different job (plain DDP instead
of FSDP), so accelerate's own code reads it: `launch_command_parser`,
`_validate_launch_command` (the file merged with the command line, as `accelerate launch`
merges them) and the launcher's `prepare_*_env` (accelerate/utils/launch.py), in a helper
process, because accelerate imports torch and this process must not before the fake CUDA
device is in place (targets/session.prepare_process). The helper prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..errors import MemlensError

# The launcher's variables that describe the job to the script's Accelerator. The others it
# sets (OMP_NUM_THREADS, MASTER_ADDR/PORT, CUDA_VISIBLE_DEVICES, PYTHONPATH, NCCL_*) concern
# the machine it runs on; the simulated rank sets its own.
JOB_PREFIXES = ("ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_")
HELPER_TIMEOUT_S = 120


def default_config_file(env: dict[str, str] | None = None) -> Path:
    """Where `accelerate config` writes and `accelerate launch` looks without --config_file
    (accelerate/commands/config/config_args.py)."""
    env = os.environ if env is None else env
    home = os.path.expanduser(env.get("HF_HOME", os.path.join(
        env.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")))
    return Path(home, "accelerate", "default_config.yaml")


# Options of the FSDP / DeepSpeed / Megatron-LM / parallelism / fp8 sections: launch_argv's own
# reading of the command line knows none of them.
SECTION_OPTIONS = ("fsdp_", "zero_stage", "zero3_", "offload_", "deepspeed_", "megatron_lm_",
                   "gradient_accumulation_steps", "gradient_clipping", "parallelism_config_",
                   "fp8_")


def config_world_size(path: str | os.PathLike) -> int | None:
    """num_processes of an accelerate configuration file, read as text (the language server
    shows it and imports no torch); None if it cannot be read. The trace itself asks
    accelerate (`resolve`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        if str(path).endswith(".json"):
            doc = json.loads(text)
        else:
            import yaml  # accelerate's own dependency, as it reads the file

            doc = yaml.safe_load(text)
    except (OSError, ValueError, ImportError, UnicodeDecodeError):
        return None
    except Exception:  # yaml.YAMLError: a file accelerate would refuse too
        return None
    total = doc.get("num_processes") if isinstance(doc, dict) else None
    return total if isinstance(total, int) and total > 0 else None


def needs_accelerate(options: list[str]) -> bool:
    """accelerate itself must resolve the launch: it reads a configuration file (one given,
    or its default one unless --cpu), or the command line has a section's options (`options`:
    accelerate launch's option names, `-` as `_`)."""
    if "config_file" in options:
        return True
    if any(o.startswith(SECTION_OPTIONS) for o in options):
        return True
    return default_config_file().is_file() and "cpu" not in options


def resolve(args: list[str], cwd: str | None) -> dict:
    """accelerate's view of `accelerate launch ARGS` run in `cwd` (see `_helper`)."""
    package_root = str(Path(__file__).resolve().parents[2])  # memlens importable there
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run([sys.executable, "-c", "from memlens.targets.accelerate_launch "
                               "import _helper; _helper()", *args], cwd=cwd or None, env=env,
                              capture_output=True, text=True, timeout=HELPER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MemlensError(f"reading accelerate launch's configuration took over "
                           f"{HELPER_TIMEOUT_S} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise MemlensError("accelerate launch " + " ".join(args) + " was refused by accelerate",
                           details=tail + "\n")
    out = json.loads(lines[-1])
    if "error" in out:
        raise MemlensError(out["error"])
    return out


def _helper() -> None:
    """In the helper process: parse and validate as `accelerate launch` does, then the
    environment its launcher would give the script."""
    import logging

    logging.disable(logging.WARNING)  # accelerate's "defaults used" warning: not our output
    try:
        import accelerate
    except ImportError as e:
        print(json.dumps({"error": f"accelerate launch needs accelerate, which {sys.executable} "
                                   f"cannot import ({e}): install it where memlens runs"}))
        return
    from accelerate.commands import launch as launch_cmd
    from accelerate.utils import launch as launch_env

    version = accelerate.__version__
    parser = launch_cmd.launch_command_parser()
    args = parser.parse_args(sys.argv[1:])
    try:
        args, defaults, mp_from_config = launch_cmd._validate_launch_command(args)
    except (ValueError, FileNotFoundError) as e:
        print(json.dumps({"error": f"accelerate {version} refuses this launch: {e}"}))
        return
    environment = getattr(defaults, "compute_environment", None)
    if args.tpu or str(environment) == "AMAZON_SAGEMAKER":
        what = "a TPU launch" if args.tpu else "a SageMaker launch"
        print(json.dumps({"error": f"accelerate {version}: the configuration asks for {what}, "
                                   "which memlens does not simulate (it simulates GPUs)"}))
        return
    # launch_command's choice of launcher (accelerate/commands/launch.py)
    if args.use_deepspeed and not args.cpu:
        mode = "deepspeed"
        fields = list(defaults.deepspeed_config.keys()) if defaults else []
        if mp_from_config:
            fields.append("mixed_precision")
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = launch_env.prepare_deepspeed_cmd_env(args)
    elif (args.use_fsdp or args.use_megatron_lm or args.multi_gpu) and not args.cpu:
        mode = "fsdp" if args.use_fsdp else "megatron_lm" if args.use_megatron_lm else "multi_gpu"
        env = launch_env.prepare_multi_gpu_env(args)
    else:
        mode = "simple"
        _, env = launch_env.prepare_simple_launcher_cmd_env(args)
    job_env = {k: v for k, v in env.items() if k.startswith(JOB_PREFIXES)
               and os.environ.get(k) != v}
    print(json.dumps({
        "accelerate": version, "mode": mode, "cpu": bool(args.cpu),
        "num_processes": args.num_processes, "num_machines": args.num_machines,
        "machine_rank": getattr(args, "machine_rank", 0),
        "config_file": args.config_file, "script": args.training_script,
        "module": bool(args.module), "args": list(args.training_script_args), "env": job_env}))
