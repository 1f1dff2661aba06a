"""Two traces of one script, with layer replay and without (engine/layer_replay.py), and where
their snapshots differ.

Both traces of a pair run with PYTHONHASHSEED fixed: tensors dropped together (a dict of them
let go) are freed in the order of Python's hashes, which differs from process to process.
"""

from __future__ import annotations

import json

from support.runs import run_memlens

# What differs between two runs of one trace: when and how long, the command line, and the
# replay's own record (compared on its own by the tests).
PER_RUN = {"created", "duration_s", "command", "layer_replay"}


def trace(folder, name: str, script, *args: str, replay: bool = True,
          flags: tuple[str, ...] = ("--device", "h100-80gb")) -> dict:
    """`flags`: memlens' own, before the script (a device, a world size and rank)."""
    snap = folder / f"{name}-{'replay' if replay else 'full'}.json"
    off = [] if replay else ["--no-layer-replay"]
    out = run_memlens("run", *flags, "--progress", "none", *off, "--snapshot", str(snap), "--",
                      str(script), *args, cwd=folder, env={"PYTHONHASHSEED": "0"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(snap.read_text())


def pair(folder, name: str, script, *args: str, **kwargs) -> tuple[dict, dict]:
    """(the trace with layer replay, the trace without)."""
    return (trace(folder, name, script, *args, **kwargs),
            trace(folder, name, script, *args, replay=False, **kwargs))


def differences(a, b, path: str = "") -> list[str]:
    """The paths where two snapshots differ (the per-run meta fields aside)."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            if path == ".meta" and key in PER_RUN:
                continue
            if key not in a or key not in b:
                found.append(f"{path}.{key}")
            else:
                found += differences(a[key], b[key], f"{path}.{key}")
        return found
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.80} against {b!r:.80}"]
