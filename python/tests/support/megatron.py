"""Megatron's own numbers, and the same numbers read out of a snapshot.

Formulas:
- model states (Megatron's `theoretical_memory_usage.py`): 18 bytes per parameter (bf16
  parameter 2, fp32 gradient 4, fp32 main parameter + Adam's two moments 12), or
  6 + 12 / DP with the distributed optimizer, for the parameters this rank holds;
- activations per transformer layer and micro-batch: Korthikanti et al. 2022, Table 2.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

from support.paths import TESTS
from support.runs import run_memlens
from memlens.cuda.build import find_torch

# What the Megatron tests need. `make test` installs both (python/requirements-dev.txt,
# scripts/setup-system.sh) and sets MEMLENS_STRICT_TESTS: there a missing one fails the tests
# instead of skipping them.
_STRICT = bool(os.environ.get("MEMLENS_STRICT_TESTS"))
NEEDS = pytest.mark.skipif(
    not _STRICT and (find_spec("megatron") is None or find_spec("megatron.core") is None
                     or (not find_torch().cuda_build and not shutil.which("g++"))),
    reason="needs megatron-core, and a C++ compiler for fake CUDA on a CPU-only torch")

SCRIPT = TESTS / "scripts" / "megatron" / "gpt_core_train.py"
CATEGORIES = ("parameter", "buffer", "gradient", "optimizer_state", "activation", "temporary",
              "input", "other")


@dataclass(frozen=True)
class Gpt:
    """The test model (gpt_core_train.py's defaults): GPT with learned positions, LayerNorm
    with biases, a GeLU MLP of 4h with biases, untied input and output embeddings."""

    layers: int = 4
    hidden: int = 256
    heads: int = 8
    seq: int = 128
    micro_batch: int = 2
    vocab: int = 1024

    def layer_params(self, tp: int) -> int:
        h = self.hidden
        norms = 2 * 2 * h  # two LayerNorms, weight and bias
        qkv = 3 * h * h // tp + 3 * h // tp
        proj = h * h // tp + h  # row-parallel: the bias is whole
        fc1 = 4 * h * h // tp + 4 * h // tp
        fc2 = 4 * h * h // tp + h
        return norms + qkv + proj + fc1 + fc2

    def stage_params(self, tp: int, pp: int, stage: int) -> int:
        """Parameters held by a rank of pipeline stage `stage` (of `pp`), TP `tp`."""
        n = self.layers // pp * self.layer_params(tp)
        if stage == 0:
            n += self.vocab // tp * self.hidden + self.seq * self.hidden  # word, position
        if stage == pp - 1:
            n += 2 * self.hidden + self.vocab // tp * self.hidden  # final norm, output layer
        return n

    def te_dummy_wgrad_bytes(self, tp: int, output_layer: bool) -> int:
        """Transformer Engine's dummy weight gradients under gradient-accumulation fusion: one
        bf16 tensor per distinct weight shape (QKV, projection, FC1, FC2 and, on the last
        stage, the output layer's vocabulary shard), shared by every layer of that shape."""
        h = self.hidden
        shapes = {(3 * h // tp, h), (h, h // tp), (4 * h // tp, h), (h, 4 * h // tp)}
        if output_layer:
            shapes.add((self.vocab // tp, h))
        return sum(2 * rows * cols for rows, cols in shapes)

    def activation_bytes(self, tp: int, sp: bool, recompute: str, flash: bool = False,
                         groups: int | None = None) -> float:
        """Korthikanti et al.'s bytes per layer and micro-batch. With fused (flash) attention
        the s x s terms (5as^2b) are never stored; the kernel keeps its fp32 log-sum-exp per
        head and query (4 a s b / t) next to q, k, v and its output (counted already: the
        output is the projection's input). With `groups` query groups (grouped-query
        attention) K and V have groups/a of the heads: each of their 2sbh/t is that fraction."""
        s, b, h, a, t = self.seq, self.micro_batch, self.hidden, self.heads, tp
        sbh = s * b * h
        if recompute == "full":
            return 2 * sbh
        scores = 0 if recompute == "selective" or flash else 5 * a * s / h
        lse = 4 * a * s * b / t if flash and recompute != "selective" else 0
        fewer_kv = 2 * 2 * (1 - (groups or a) / a)  # K and V: 2 each, of which this is gone
        if sp:
            return sbh / t * (34 - fewer_kv + scores) + lse
        return sbh * (10 + (24 - fewer_kv) / t + scores / t) + lse


def megatron_model_state_bytes(params: int, dp: int, distributed_optimizer: bool) -> int:
    """Megatron's accounting: 18 B/param, or 6 + 12/DP with the distributed optimizer."""
    if distributed_optimizer:
        assert 12 * params % dp == 0
        return 6 * params + 12 * params // dp
    return 18 * params


def trace(tmp: Path, world: int, rank: int, *args: str, script: Path = SCRIPT,
          env: dict | None = None) -> dict:
    key = (args, tuple(sorted((env or {}).items())))
    snap = tmp / f"rank{rank}-{abs(hash(key)) % 10**8}.json"
    out = run_memlens("run", "--world-size", str(world), "--rank", str(rank), "--progress",
                      "none", "--snapshot", str(snap), "--", str(script), *args, cwd=tmp,
                      env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(snap.read_text())


# -- reading a snapshot ------------------------------------------------------------------------
def _rows(snap: dict):
    a = snap["allocations"]
    device = a["devices"].index(snap["meta"]["device_key"])
    for i in range(len(a["bytes"])):
        if a["device"][i] == device:
            yield {k: a[k][i] for k in ("requested_bytes", "category", "module", "op", "stack",
                                         "alloc_seq", "free_seq", "backward")}


def workspaces(snap: dict) -> list[tuple[str, int, bool]]:
    """(op, bytes, taken in backward) of the traced device's GEMM workspaces, sorted."""
    a = snap["allocations"]
    device = a["devices"].index(snap["meta"]["device_key"])
    return sorted((snap["ops"][op], a["bytes"][i], bool(a["backward"][i]))
                  for i, op in enumerate(a["op"])
                  if a["device"][i] == device and snap["ops"][op].endswith("workspace"))


# PyTorch's two cuBLAS workspaces (forward, autograd's thread) and TE's one, on an H100.
TORCH_AND_TE_WORKSPACES = [("cublas_workspace", 32 * 2**20, False),
                           ("cublas_workspace", 32 * 2**20, True),
                           ("te_cublas_workspace", 32 * 2**20 + 1024, False)]


def _phase(snap: dict, name: str) -> dict:
    key = snap["meta"]["device_key"]
    return next(p for p in snap["phases"] if p["name"] == name and p["device"] == key)


def kept_into_backward(snap: dict, prefix: str) -> list[int]:
    """The device allocations of `prefix`'s modules in the second step's forward that are still
    alive when its backward starts (one micro-batch: every layer's forward comes first)."""
    a, fqns = snap["allocations"], [m["fqn"] for m in snap["modules"]]
    device = a["devices"].index(snap["meta"]["device_key"])
    phase = next(p for p in snap["phases"] if p["name"] == "forward_backward_iter_1"
                 and p["device"] == snap["meta"]["device_key"])
    step = range(phase["start_seq"], phase["end_seq"])
    mine = [i for i in range(len(a["bytes"])) if a["device"][i] == device
            and a["alloc_seq"][i] in step]
    backward = min(a["alloc_seq"][i] for i in mine if a["backward"][i])
    return [a["requested_bytes"][i] for i in mine
            if not a["backward"][i] and a["module"][i] >= 0
            and fqns[a["module"][i]].startswith(prefix)
            and not 0 <= a["free_seq"][i] < backward]


def model_state_bytes(snap: dict) -> dict[str, int]:
    """Requested bytes of parameters, gradients and optimizer states alive when the trace
    ended (after the last optimizer step)."""
    out = {"parameter": 0, "gradient": 0, "optimizer_state": 0}
    for r in _rows(snap):
        name = CATEGORIES[r["category"]]
        if name in out and r["free_seq"] < 0:
            out[name] += r["requested_bytes"]
    return out


def layer_activation_bytes(snap: dict, layer_fqn: str, iteration: int = 1) -> int:
    """Requested bytes of the activations a layer made in forward that are alive when the
    iteration's activations peak (every micro-batch in flight saved, none released yet)."""
    phase = _phase(snap, f"forward_backward_iter_{iteration}")
    rows = [r for r in _rows(snap) if CATEGORIES[r["category"]] == "activation"
            and phase["start_seq"] <= r["alloc_seq"] < phase["end_seq"]]
    peak_seq = _peak_seq(rows)
    fqns = [m["fqn"] for m in snap["modules"]]
    total = 0
    for r in rows:
        alive = r["alloc_seq"] <= peak_seq and (r["free_seq"] < 0 or r["free_seq"] > peak_seq)
        inside = r["module"] >= 0 and (fqns[r["module"]] + ".").startswith(layer_fqn + ".")
        if alive and inside and not r["backward"]:
            total += r["requested_bytes"]
    return total


def _peak_seq(rows: list[dict]) -> int:
    events = sorted([(r["alloc_seq"], r["requested_bytes"]) for r in rows] +
                    [(r["free_seq"], -r["requested_bytes"]) for r in rows if r["free_seq"] >= 0])
    best = current = 0
    best_seq = -1
    for seq, delta in events:
        current += delta
        if current > best:
            best, best_seq = current, seq
    return best_seq


def in_flight_microbatches(pp: int, stage: int, microbatches: int) -> int:
    """Micro-batches whose activations a stage holds at once in Megatron's 1F1B schedule:
    its warm-up forwards (pp - stage - 1) plus the one in the steady state."""
    return min(microbatches, pp - stage)
