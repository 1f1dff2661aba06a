"""Host memory of a 7B-shaped model built on the CPU and moved with `.to("cuda")`, traced by
`memlens run` (issue 20: a model built that way must allocate nothing real; target < 1 GiB).

    python bench/host_rss_7b.py            # prints the numbers, exit 1 when the target is missed

The traced script (this file with `--train`) is written the way fine-tuning scripts are: the
model is made on the CPU in fp32 (Hugging Face `LlamaForCausalLM` with Llama-2-7B shapes: 32
layers, hidden 4096, MLP 11008, 32 heads, vocabulary 32,000; 6.74 B parameters, 27 GB real),
then `model.to("cuda", dtype=torch.bfloat16)`, AdamW, one training step of 1 x 512 tokens.
The child's peak RSS comes from `getrusage(RUSAGE_CHILDREN)` after it exits (the `memlens run`
process and anything it started). A baseline in the same run: a process that only imports
torch and transformers, the floor any trace of this script stands on.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

TARGET_BYTES = 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))


def train() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                         max_position_embeddings=4096)
    model = LlamaForCausalLM(config)  # on the CPU, fp32
    print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device, dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for _ in range(2):
        ids = torch.randint(0, config.vocab_size, (1, 512)).to(device)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def child_rss(cmd: list[str], env: dict) -> tuple[int, float, subprocess.CompletedProcess]:
    """Peak RSS of `cmd` and its descendants (run in a fresh helper, so RUSAGE_CHILDREN holds
    only them), and its wall time."""
    helper = ("import json, resource, subprocess, sys, time\n"
              "t = time.perf_counter()\n"
              "out = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
              "t = time.perf_counter() - t\n"
              "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
              "print(json.dumps({'rss': rss, 'wall': t, 'rc': out.returncode,"
              " 'stdout': out.stdout, 'stderr': out.stderr[-3000:]}))\n")
    out = subprocess.run([sys.executable, "-c", helper, *cmd], capture_output=True, text=True,
                         env=env, check=True)
    r = json.loads(out.stdout)
    return r["rss"], r["wall"], r


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--train", action="store_true", help="the traced script itself")
    p.add_argument("--device", default="h100-80gb")
    args = p.parse_args()
    if args.train:
        train()
        return
    env = {**os.environ, "PYTHONPATH": os.path.join(HERE, "..", "python")}
    base_rss, _, _ = child_rss([sys.executable, "-c", "import torch, transformers"], env)
    rss, wall, r = child_rss([sys.executable, "-m", "memlens", "run", "--json", "--no-snapshot",
                              "--device", args.device, "--", __file__, "--train"], env)
    if r["rc"] != 0:
        print(r["stderr"], file=sys.stderr)
        sys.exit(f"the traced script failed (exit {r['rc']})")
    peak = json.loads(r["stdout"])["peak_bytes"]
    print(f"7B built on the CPU, moved to {args.device}: traced peak {peak / 2**30:.1f} GiB, "
          f"trace {wall:.1f} s")
    print(f"host peak RSS: memlens run {rss / 2**30:.2f} GiB; import torch+transformers "
          f"{base_rss / 2**30:.2f} GiB; target < {TARGET_BYTES / 2**30:.0f} GiB")
    sys.exit(0 if rss < TARGET_BYTES else 1)


if __name__ == "__main__":
    main()
