"""Experiments behind docs/fake-cuda-notes.md: what fake `cuda` does on this torch build.

Each experiment runs in its own process (a C++ abort must not end the run), under
FakeTensorMode + simulate_cuda, after ensure_fake_cuda_support(). Run with the interpreter
whose torch you want to probe:

    PYTHONPATH=python python bench/fake_cuda_experiments.py            # all, one line each
    PYTHONPATH=python python bench/fake_cuda_experiments.py sdpa_direct  # one, verbose
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback


def _setup():
    from memlens.cuda.build import ensure_fake_cuda_support

    ensure_fake_cuda_support()
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        """Records aten ops with their output shapes/dtypes/devices/bytes."""

        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else [out]
            desc = [(tuple(o.shape), str(o.dtype).replace("torch.", ""), str(o.device),
                     o.untyped_storage().nbytes()) if isinstance(o, torch.Tensor) else o
                    for o in outs]
            self.ops.append((str(func.overloadpacket.__name__), desc))
            return out

        def names(self):
            return [n for n, _ in self.ops]

    return torch, Log


def _sim():
    import contextlib

    from torch._subclasses.fake_tensor import FakeTensorMode

    from memlens.cuda.simulate import simulate_cuda
    from memlens.cuda.spec_types import DeviceSpec

    class Zero:
        def allocated(self, i): return 0
        max_allocated = reserved = max_reserved = allocated
        def reset_peak(self, i): pass

    h100 = DeviceSpec("h100-80gb", "NVIDIA H100 80GB HBM3", 81559 * 2**20, 9, 0, 132)
    stack = contextlib.ExitStack()
    stack.enter_context(FakeTensorMode())
    stack.enter_context(simulate_cuda(h100, Zero()))
    return stack


def exp_move_module():
    torch, _ = _setup()
    nn = torch.nn
    res = {}
    real = nn.Linear(4, 4)  # built for real, outside the fake mode
    with _sim():
        for how in ("cuda()", 'to("cuda")', 'to("cuda:0")'):
            m = nn.Linear(4, 4)  # built on CPU inside the fake mode
            try:
                m = m.cuda() if how == "cuda()" else m.to(how[4:-2])
                res[f"fake-cpu module .{how}"] = str(m.weight.device)
            except Exception as e:
                res[f"fake-cpu module .{how}"] = f"{type(e).__name__}: {e}"
        try:
            real.cuda()
            res["real module .cuda() inside mode"] = str(real.weight.device)
        except Exception as e:
            res["real module .cuda() inside mode"] = f"{type(e).__name__}: {str(e)[:200]}"
    return res


def exp_factories():
    torch, _ = _setup()
    res = {}
    with _sim():
        for name, fn in {
            "empty": lambda: torch.empty(2, 3, device="cuda"),
            "zeros": lambda: torch.zeros(2, device="cuda"),
            "randn": lambda: torch.randn(2, device="cuda"),
            "arange": lambda: torch.arange(5, device="cuda"),
            "full": lambda: torch.full((2,), 1.5, device="cuda"),
            "tensor([..])": lambda: torch.tensor([1.0, 2.0], device="cuda"),
            "empty cuda:1 (1 device)": lambda: torch.empty(1, device="cuda:1"),
        }.items():
            try:
                t = fn()
                res[name] = f"{type(t).__name__} {t.device}"
            except Exception as e:
                res[name] = f"{type(e).__name__}: {str(e)[:160]}"
    return res


def exp_module_init():
    torch, _ = _setup()
    nn = torch.nn
    res = {}
    with _sim():
        for name, fn in {
            "Linear": lambda: nn.Linear(8, 8, device="cuda"),
            "Embedding": lambda: nn.Embedding(10, 8, device="cuda"),
            "LayerNorm": lambda: nn.LayerNorm(8, device="cuda"),
            "Conv2d": lambda: nn.Conv2d(3, 8, 3, device="cuda"),
            "TransformerEncoderLayer": lambda: nn.TransformerEncoderLayer(16, 4, 32, device="cuda"),
            "set_default_device(cuda)+Linear": None,
        }.items():
            try:
                if fn is None:
                    torch.set_default_device("cuda")
                    try:
                        m = nn.Linear(8, 8)
                    finally:
                        torch.set_default_device(None)
                else:
                    m = fn()
                p = next(m.parameters())
                res[name] = f"{type(p).__name__} {p.device}"
            except Exception as e:
                res[name] = f"{type(e).__name__}: {str(e)[:160]}"
    return res


def _train(opt_kwargs):
    torch, Log = _setup()
    nn = torch.nn
    with _sim():
        m = nn.Sequential(nn.Linear(16, 32, device="cuda"), nn.GELU(), nn.Linear(32, 4, device="cuda"))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, **opt_kwargs)
        for _ in range(2):
            m(torch.randn(8, 16, device="cuda")).pow(2).mean().backward()
            log = Log()
            with log:
                opt.step()
            opt.zero_grad()
    step_ops = sorted(set(log.names()))
    return {"grad/state devices": str({str(v.device) for v in opt.state[m[0].weight].values()}),
            "optimizer-step ops": ", ".join(step_ops)}


def exp_train_default():
    return _train({})


def exp_train_foreach():
    return _train({"foreach": True})


def exp_train_fused():
    return _train({"fused": True})


def exp_autocast():
    torch, Log = _setup()
    F = torch.nn.functional
    res = {}
    with _sim():
        x = torch.randn(4, 16, device="cuda")
        w = torch.randn(16, 16, device="cuda", requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs = {
                "linear": F.linear(x, w), "matmul": x @ w, "softmax": torch.softmax(x, -1),
                "layer_norm": F.layer_norm(x, (16,)), "gelu": F.gelu(x), "sum": x.sum(),
                "log_softmax": F.log_softmax(x, -1), "exp": x.exp(),
                "cross_entropy": F.cross_entropy(x, torch.zeros(4, dtype=torch.long, device="cuda")),
                "mm(bf16 input)": torch.mm(x.bfloat16(), w.bfloat16()),
                "add(fp32, bf16)": x + (x @ w),
            }
        res.update({k: str(v.dtype).replace("torch.", "") for k, v in outs.items()})
        with torch.autocast("cpu", dtype=torch.bfloat16):
            res["(cpu autocast on cuda tensor) linear"] = str(F.linear(x, w).dtype)
        with torch.autocast("cuda", dtype=torch.float16):
            res["fp16 linear"] = str(F.linear(x, w).dtype)
        log = Log()
        with log, torch.autocast("cuda", dtype=torch.bfloat16):
            F.linear(x, w)
            F.linear(x, w)  # same leaf weight: real CUDA autocast reuses its cached bf16 copy
        res["_to_copy ops for 2 linears sharing a leaf weight"] = [
            o for n, o in log.ops if n == "_to_copy"]
        res["is_autocast_enabled(cuda) inside"] = "n/a"
        with torch.autocast("cuda", dtype=torch.bfloat16):
            res["is_autocast_enabled(cuda) inside"] = str(torch.is_autocast_enabled("cuda"))
    return res


def _qkv(torch, dtype, requires_grad=False, s=128, d=64):
    shape = (2, 4, s, d)  # b, h, s, d
    return [torch.randn(shape, device="cuda", dtype=dtype, requires_grad=requires_grad) for _ in range(3)]


def _fmt_ops(log, keep=None):
    lines = []
    for name, outs in log.ops:
        if keep and name not in keep:
            continue
        lines.append(f"{name} -> {outs}")
    return lines


def exp_sdpa_functional():
    torch, Log = _setup()
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    res = {}
    with _sim():
        for label, backend in (("default", None), ("FLASH", SDPBackend.FLASH_ATTENTION),
                               ("EFFICIENT", SDPBackend.EFFICIENT_ATTENTION),
                               ("CUDNN", SDPBackend.CUDNN_ATTENTION), ("MATH", SDPBackend.MATH)):
            q, k, v = _qkv(torch, torch.bfloat16, requires_grad=True)
            log = Log()
            try:
                with log:
                    if backend is None:
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    else:
                        with sdpa_kernel(backend):
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    out.sum().backward()
                res[label] = " ".join(n for n in log.names() if "attention" in n or n in ("bmm", "matmul", "_softmax", "baddbmm", "mm"))
            except Exception as e:
                res[label] = f"{type(e).__name__}: {str(e)[:300]}"
    return res


def exp_sdpa_direct():
    torch, Log = _setup()
    aten = torch.ops.aten
    res = {}
    with _sim():
        for dtype in (torch.bfloat16, torch.float32):
            dt = str(dtype).replace("torch.", "")
            q, k, v = _qkv(torch, dtype)
            g = torch.randn_like(q)
            calls = {
                "flash": lambda: aten._scaled_dot_product_flash_attention(q, k, v, 0.1, True, False),
                "efficient": lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.1, True),
                "cudnn": lambda: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.1, True, False),
            }
            for name, call in calls.items():
                log = Log()
                try:
                    with log:
                        outs = call()
                    res[f"{name} fwd {dt}"] = str(log.ops[-1][1])
                except Exception as e:
                    res[f"{name} fwd {dt}"] = f"{type(e).__name__}: {str(e)[:300]}"
                    continue
                log = Log()
                try:
                    with log:
                        if name == "flash":
                            out, lse, cq, ck, mq, mk, seed, off, _ = outs
                            aten._scaled_dot_product_flash_attention_backward(
                                g, q, k, v, out, lse, cq, ck, mq, mk, 0.1, True, seed, off)
                        elif name == "efficient":
                            out, lse, seed, off = outs
                            aten._scaled_dot_product_efficient_attention_backward(
                                g, q, k, v, None, out, lse, seed, off, 0.1, [True, True, True, False], True)
                        else:
                            out, lse, cq, ck, mq, mk, seed, off, _ = outs
                            aten._scaled_dot_product_cudnn_attention_backward(
                                g, q, k, v, out, lse, seed, off, None, cq, ck, mq, mk, 0.1, True)
                    res[f"{name} bwd {dt}"] = str(log.ops[-1][1])
                except Exception as e:
                    res[f"{name} bwd {dt}"] = f"{type(e).__name__}: {str(e)[:300]}"
        q, k, v = _qkv(torch, torch.bfloat16, s=100)
        res["logsumexp shapes at s=100 (flash, efficient, cudnn)"] = [
            tuple(aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)[1].shape),
            tuple(aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, True)[1].shape),
            tuple(aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True, False)[1].shape)]
        # autograd through a direct call
        q, k, v = _qkv(torch, torch.bfloat16, requires_grad=True)
        log = Log()
        try:
            with log:
                out = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)[0]
                out.sum().backward()
            res["flash autograd"] = " ".join(n for n in log.names() if "attention" in n)
        except Exception as e:
            res["flash autograd"] = f"{type(e).__name__}: {str(e)[:300]}"
    return res


def exp_dropout():
    torch, Log = _setup()
    F = torch.nn.functional
    res = {}
    with _sim():
        for dev in ("cuda", "cpu"):
            for rg in (False, True):
                x = torch.randn(64, 64, device=dev, dtype=torch.bfloat16, requires_grad=rg)
                log = Log()
                with log:
                    F.dropout(x, p=0.1, training=True)
                res[f"{dev} requires_grad={rg}"] = "; ".join(f"{n} -> {o}" for n, o in log.ops)
        x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        log = Log()
        with log:
            torch.nn.Dropout(0.1)(x)
        res["nn.Dropout cuda"] = "; ".join(f"{n} -> {o}" for n, o in log.ops)
    return res


def exp_rng():
    torch, _ = _setup()
    res = {}
    with _sim():
        torch.manual_seed(1)
        res["after torch.manual_seed(1): cuda.initial_seed"] = torch.cuda.initial_seed()
        torch.cuda.manual_seed(5)
        st = torch.cuda.get_rng_state()
        res["get_rng_state"] = f"{type(st).__name__} {st.dtype} {tuple(st.shape)} {st.device}"
        torch.cuda.manual_seed_all(9)
        torch.cuda.set_rng_state(st)
        res["set_rng_state round trip"] = torch.cuda.initial_seed()
        with torch.random.fork_rng(devices=[0], device_type="cuda"):
            torch.cuda.manual_seed(77)
        res["fork_rng restores"] = torch.cuda.initial_seed()
        torch.cuda.seed()
        res["seed() random"] = torch.cuda.initial_seed() != 5
        try:
            g = torch.Generator(device="cuda")
            res["torch.Generator(device=cuda)"] = str(g.device)
        except Exception as e:
            res["torch.Generator(device=cuda)"] = f"{type(e).__name__}: {str(e)[:200]}"
        try:
            t = torch.randn(3, device="cuda", generator=torch.Generator(device="cpu"))
            res["randn(cuda, generator=cpu gen)"] = str(t.device)
        except Exception as e:
            res["randn(cuda, generator=cpu gen)"] = f"{type(e).__name__}: {str(e)[:200]}"
    return res


def exp_streams():
    torch, _ = _setup()
    res = {}
    with _sim():
        s = torch.cuda.Stream()
        res["Stream()"] = repr(s)
        with torch.cuda.stream(s):
            res["current in ctx == s"] = torch.cuda.current_stream() == s
            y = torch.randn(4, device="cuda") * 2
        torch.cuda.current_stream().wait_stream(s)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); e1.record(s); e1.wait(); e1.synchronize()
        res["Event query/elapsed"] = (e1.query(), e0.elapsed_time(e1))
        res["torch.accelerator.current_stream()"] = repr(torch.accelerator.current_stream())
        for name, fn in {
            "tensor.record_stream(s)": lambda: y.record_stream(s),
            "torch.Stream(device='cuda')": lambda: torch.Stream(device="cuda"),
            "torch.Event(device='cuda').record()": lambda: torch.Event(device="cuda").record(),
            "with s: (stream as context)": lambda: s.__enter__() or s.__exit__(None, None, None),
        }.items():
            try:
                out = fn()
                res[name] = f"ok {out!r}" if out is not None else "ok"
            except Exception as e:
                res[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        w = torch.randn(4, 4, device="cuda", requires_grad=True)
        with torch.cuda.stream(s):
            loss = (w @ w).sum()
        loss.backward()
        res["backward of graph built on side stream"] = str(w.grad.device)
    return res


def exp_checkpoint():
    torch, Log = _setup()
    from torch.utils.checkpoint import checkpoint

    res = {}
    with _sim():
        lin = torch.nn.Linear(32, 32, device="cuda")
        calls = []
        orig = torch.cuda.get_rng_state

        def spy(*a, **k):
            calls.append(1)
            return orig(*a, **k)

        torch.cuda.get_rng_state = spy  # inside the simulation: restored by the patch undo
        for reentrant in (False, True):
            calls.clear()
            x = torch.randn(8, 32, device="cuda", requires_grad=True)
            try:
                y = checkpoint(lambda t: torch.nn.functional.dropout(lin(t).relu(), 0.1), x,
                               use_reentrant=reentrant)
                y.sum().backward()
                res[f"use_reentrant={reentrant}"] = f"ok grad {x.grad.device}; cuda RNG state saved {len(calls)}x"
            except Exception as e:
                res[f"use_reentrant={reentrant}"] = f"{type(e).__name__}: {str(e)[:300]}"
    return res


def exp_misc():
    torch, Log = _setup()
    res = {}
    with _sim():
        res["torch.version.cuda"] = torch.version.cuda
        res["torch.backends.cuda.is_built()"] = torch.backends.cuda.is_built()
        res["torch.backends.cudnn.is_available()"] = torch.backends.cudnn.is_available()
        res["current_accelerator"] = str(torch.accelerator.current_accelerator())
        for name, fn in {
            "pin_memory() (fake cpu)": lambda: torch.randn(4).pin_memory().is_pinned(),
            "conv2d fwd+bwd": lambda: torch.nn.Conv2d(3, 8, 3, device="cuda")(torch.randn(2, 3, 16, 16, device="cuda")).sum().backward(),
            "GradScaler step": None,
            "torch.cuda.get_arch_list()": lambda: torch.cuda.get_arch_list(),
            "item() of fake cuda": lambda: torch.ones(1, device="cuda").item(),
        }.items():
            try:
                if fn is None:
                    lin = torch.nn.Linear(4, 4, device="cuda")
                    opt = torch.optim.SGD(lin.parameters())
                    sc = torch.amp.GradScaler("cuda")
                    sc.scale(lin(torch.randn(2, 4, device="cuda")).sum()).backward()
                    sc.step(opt)
                    sc.update()
                    out = "ok"
                else:
                    out = fn()
                res[name] = f"ok {out!r}" if out is not None else "ok"
            except Exception as e:
                res[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return res


def main(argv: list[str]) -> int:
    names = [n[4:] for n in globals() if n.startswith("exp_")]
    if argv:
        name = argv[0]
        try:
            out = globals()["exp_" + name]()
        except Exception:
            traceback.print_exc()
            return 1
        for k, v in out.items():
            print(f"{k}: {v}")
        return 0
    import torch  # only for the header line; each experiment runs in a fresh process

    print(f"# torch {torch.__version__} ({'CUDA build' if torch.cuda._is_compiled() else 'CPU build'})")
    for name in names:
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True,
                           env=os.environ, timeout=600)
        print(f"\n## {name} (exit {r.returncode})")
        print(r.stdout.rstrip())
        if r.returncode:
            print("stderr tail:", "\n".join(r.stderr.splitlines()[-8:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
