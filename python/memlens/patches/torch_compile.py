"""`torch.compile` and `nn.Module.compile` compile with memlens' backend (engine/compiled.py).

What the compiled program needs to run on fake tensors, patched for the trace only:
- Inductor's kernels are no-ops: they only write into buffers the wrapper code allocated, so
  their machine code (a C++ compiler, seconds per kernel) is never built;
- the wrapper's buffers (`empty_strided_cpu`) are fake tensors the accountant books, and its
  views (`reinterpret_tensor`) go through the dispatcher;
- no compile caches: a cached artifact would carry real kernels;
- the min-cut partitioner is observed, so the report can say what it saved;
- AOTAutograd's tracer (make_fx) computes no constant onto the device (there is none), as
  FakeTensorMode does not when it avoids device init;
- a random op recomputed in backward (a checkpointed region's attention) replays the RNG state
  the forward saved (a host tensor), not CUDA graph-safe generators: those are CUDA
  `torch.Generator`s, which a CPU build cannot make; no device memory differs. The compiled
  program's calls of those RNG operators (`run_and_save_rng_state`, `run_with_rng_state`) run
  their ops inside the accountant;
- FlexAttention outside Inductor (`flex_attention(...)` called eagerly, which runs it through
  Dynamo's eager backend, or a compiled region that falls back) runs torch's own eager
  implementation inside the accountant, as a GPU runs it: the full scores matrix is made, and
  in backward recomputed;
- a FlexAttention mask or score function traced for Inductor indexes with Python integers as a
  view (`indices[0]`), not through a 0-dim index tensor made on the device: that tensor would
  be a constant computed onto the device, which the tracer does not compute (above), and
  Inductor's flex template refuses the copy left in its place (torchtitan's context-parallel
  mask ran eagerly, its whole scores matrix made). The mask's values do not change memory.

A compiled module is returned as is, with its call compiled (as `Module.compile()` does): its
names stay those of the model, without `_orig_mod.`. A backend other than Inductor is not
modelled: that region runs eagerly, and the report says where (the file:line of the call).
"""

from __future__ import annotations

import functools
import sys

import torch

from .patcher import Patcher, check_tested


def note_text(place: str, call: str, why: str) -> str:
    return (f"{place}: {call} was traced eagerly ({why}); compiled memory is usually lower, as "
            "fused kernels keep fewer intermediate tensors")


def _call(name: str, target: str | None, kwargs: dict) -> str:
    """How the call reads: torch.compile(GPT, mode='max-autotune')."""
    args = [target] if target else []
    args += [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(args)})"


def _place(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _module_call(module: torch.nn.Module):
    """What Dynamo compiles for `torch.compile(module)`: the module's call. A module whose
    forward is PyTorch's own (`nn.Sequential`, `nn.Linear`) is in a file Dynamo skips when it
    is the frame compiled, so it is called through an inlined wrapper, as OptimizedModule
    does (without it `torch.compile(nn.Sequential(...))` compiled nothing)."""
    import types

    from torch._dynamo import external_utils, trace_rules

    if isinstance(module.forward, types.MethodType) and trace_rules.check(module.forward):
        return external_utils.wrap_inline(module._call_impl)
    return module._call_impl


def _no_kernel(*args, **kwargs) -> None:
    return None


# The modes that run Inductor's graphs through its CUDA graph trees (list_mode_options).
_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def _dynamo_kwargs(kwargs: dict) -> dict:
    """What Dynamo needs from the user's arguments: graph capture follows `fullgraph` and
    `dynamic`. `mode` and `options` tune Inductor by benchmarking real kernels: not modelled,
    but for the CUDA graphs they ask for (CompiledPrograms.ask_for_cuda_graphs)."""
    return {k: kwargs[k] for k in ("fullgraph", "dynamic") if k in kwargs}


def _moves_to_device(func, args, kwargs) -> bool:
    """`_to_copy(device=cuda)` or `prims.device_put(t, cuda)`: FakeTensorMode's test of an op
    that would initialise the device (fake_tensor.py, `avoiding_device_init`), less moves to the
    host."""
    if func is torch.ops.aten._to_copy.default:
        device = kwargs.get("device")
    elif func is torch.ops.prims.device_put.default:
        device = args[1] if len(args) > 1 else kwargs.get("device")
    else:
        return False
    return device is not None and torch.device(device).type != "cpu"


def _no_constant_on_device(patcher: Patcher) -> None:
    """make_fx propagates small constants (a `torch.tensor([])` in the graph, up to one element)
    by computing them for real, to answer a later `.item()`. Moved onto the device, that makes a
    real CUDA tensor, and the simulated GPU holds only fake ones (Hugging Face's DynamicLayer
    starts its cache as `torch.tensor([], device=cuda)`). FakeTensorMode skips this propagation
    when no device is available; make_fx is made to skip it too, for that op only: its result
    is traced, not a constant."""
    import torch.fx.experimental.proxy_tensor as proxy_tensor

    proxy_call = proxy_tensor.proxy_call
    fetch = proxy_tensor._fetch_proxies_and_all_constant_flag
    moving: list[bool] = [False]  # the op of the innermost proxy_call moves onto the device

    @functools.wraps(proxy_call)
    def traced_call(proxy_mode, func, pre_dispatch, args, kwargs):
        moving.append(_moves_to_device(func, args, kwargs))
        try:
            return proxy_call(proxy_mode, func, pre_dispatch, args, kwargs)
        finally:
            moving.pop()

    @functools.wraps(fetch)
    def fetch_proxies(flat_args_kwargs, tracer: proxy_tensor.PythonKeyTracer):
        proxies, flat_proxies, all_constant = fetch(flat_args_kwargs, tracer)
        return proxies, flat_proxies, all_constant and not moving[-1]

    patcher.setattr(proxy_tensor, "proxy_call", traced_call)
    patcher.setattr(proxy_tensor, "_fetch_proxies_and_all_constant_flag", fetch_proxies)


def _inside_accountant(patcher: Patcher, hop, accountant: type, key) -> None:
    """The higher-order operator `hop`, reached with the accountant's mode on top, runs its
    kernel for dispatch key `key` inside the accountant (which books that kernel's ops)."""
    kernel = hop.py_kernels[key]

    def in_accountant(mode, *args, **kwargs):
        with mode:
            return kernel(*args, **kwargs)

    patcher.hop_rule(hop, accountant, in_accountant)


def _rng_operators_in(patcher: Patcher, accountant: type) -> None:
    """The higher-order operators that save and replay the RNG state around a random op are
    called by the compiled program (Inductor's fallback kernels) with the accountant's mode
    active: each runs torch's own per-device implementation (`BackendSelect`: the RNG state
    get and set, the op) inside the accountant, which books the op's outputs."""
    from torch._C import DispatchKey
    from torch._prims import rng_prims

    for hop in (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state):
        _inside_accountant(patcher, hop, accountant, DispatchKey.BackendSelect)


def _flex_attention_in(patcher: Patcher, accountant: type) -> None:
    """`flex_attention` and its backward, reached eagerly: their `CompositeExplicitAutograd`
    kernels (`sdpa_dense`, `sdpa_dense_backward`: the math implementation, which materializes
    the [B, H, L, S] scores) run inside the accountant, which books their ops. Without a rule
    for the accountant's mode the operators refuse to run at all."""
    import importlib

    from torch._C import DispatchKey

    # the module: `torch._higher_order_ops.flex_attention` is also the operator's name there
    flex = importlib.import_module("torch._higher_order_ops.flex_attention")
    for hop in (flex.flex_attention, flex.flex_attention_backward):
        _inside_accountant(patcher, hop, accountant, DispatchKey.CompositeExplicitAutograd)


def _integer_indices_in_flex_subgraphs(patcher: Patcher) -> None:
    """`TransformGetItemToIndex` (FlexAttention's score and mask functions) turns `t[0]` into an
    index by `torch.tensor(0, device=t.device)`; while make_fx traces (a proxy mode is active)
    an all-integer index stays a plain `select` instead."""
    from torch._dynamo import _trace_wrapped_higher_order_op as wrapped
    from torch.fx.experimental.proxy_tensor import get_proxy_mode
    from torch.utils import _pytree as pytree

    mode = wrapped.TransformGetItemToIndex
    original = mode.__torch_function__

    @functools.wraps(original)
    def torch_function(self, func, types, args=(), kwargs=None):
        # (Dynamo inlines this function while it compiles the mask: there, as torch's)
        if not torch.compiler.is_dynamo_compiling() and func is torch.Tensor.__getitem__ and \
                get_proxy_mode() is not None and \
                all(type(x) is int for x in pytree.tree_leaves(args[1])):
            return func(*args, **(kwargs or {}))
        return original(self, func, types, args, kwargs)

    patcher.setattr(mode, "__torch_function__", torch_function)


def _patch_internals(patcher: Patcher, programs, made_fake, traced, accountant: type) -> None:
    """Dynamo's and Inductor's side of a compiled region (see apply)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config
    from torch._inductor.async_compile import AsyncCompile

    patcher.set_config(inductor_config, "fx_graph_cache", False)
    patcher.set_config(inductor_config, "fx_graph_remote_cache", False)
    patcher.set_config(functorch_config, "enable_autograd_cache", False)
    patcher.set_config(functorch_config, "graphsafe_rng_functionalization", False)
    patcher.setattr(AsyncCompile, "cpp_pybinding", lambda self, argtypes, source: _no_kernel)
    patcher.setattr(AsyncCompile, "cpp", lambda self, source: _no_kernel)

    def empty_strided_cpu(size, stride, dtype):
        with made_fake():
            return torch.empty_strided(size, stride, dtype=dtype, device="cpu")

    def reinterpret_tensor(t, size, stride, offset_increment):
        return torch.as_strided(t, size, stride, t.storage_offset() + offset_increment)

    guards = torch._C._dynamo.guards
    patcher.setattr(guards, "_empty_strided_cpu", empty_strided_cpu)
    patcher.setattr(guards, "_reinterpret_tensor", reinterpret_tensor)

    min_cut = compile_fx.min_cut_rematerialization_partition

    @functools.wraps(min_cut)
    def observed_min_cut(joint, joint_inputs, *args, **kwargs):
        fw, bw = min_cut(joint, joint_inputs, *args, **kwargs)
        programs.partitioned(joint, joint_inputs, fw, bw, kwargs.get("num_fwd_outputs", 0))
        return fw, bw

    patcher.setattr(compile_fx, "min_cut_rematerialization_partition", observed_min_cut)
    _no_constant_on_device(patcher)
    _rng_operators_in(patcher, accountant)
    _integer_indices_in_flex_subgraphs(patcher)

    # Dynamo runs an optimizer's `_init_group` for real while it compiles a step (to avoid
    # tracing it): the state it makes (Adam's moments) is the script's, made in the trace.
    from torch._dynamo.variables.optimizer import OptimizerVariable

    optimizer_call = OptimizerVariable.call_method

    @functools.wraps(optimizer_call)
    def call_method(self, tx, name, *args, **kwargs):
        if name != "_init_group":
            return optimizer_call(self, tx, name, *args, **kwargs)
        with traced():
            return optimizer_call(self, tx, name, *args, **kwargs)

    patcher.setattr(OptimizerVariable, "call_method", call_method)


def _compile_internals_first(patcher: Patcher, internals) -> None:
    """Dynamo's own entry point (`torch._dynamo.optimize`, which libraries call without
    `torch.compile`) applies the compile-time patches before it compiles."""
    import torch._dynamo

    optimize = torch._dynamo.optimize

    @functools.wraps(optimize)
    def optimize_after_patches(*args, **kwargs):
        internals()
        return optimize(*args, **kwargs)

    patcher.setattr(torch._dynamo, "optimize", optimize_after_patches)


def _compiled_before_the_trace(patcher: Patcher, programs, internals) -> None:
    """A function `torch.compile`d before the trace began keeps torch's own Inductor backend
    (a library decorates its fused functions when it is imported: Megatron's `jit_fuser`,
    imported before the tracer starts by its `--memory-tracing` patch). Dynamo compiles it at
    its first call, inside the trace: that backend compiles with memlens' backend then, after
    the compile-time patches, as the functions compiled during the trace do (it compiled
    Inductor's GPU code for a real GPU, and failed)."""
    wrapper = torch._TorchCompileInductorWrapper

    def compile_in_trace(self, model_, inputs_):
        internals()
        return programs.backend(model_, inputs_)

    patcher.setattr(wrapper, "__call__", compile_in_trace)


def apply(patcher: Patcher, programs, add_note, made_fake, module_called, traced,
          accountant: type, also_when_compiling=None) -> None:
    """`programs`: engine.compiled.CompiledPrograms. `made_fake`: a context in which the
    accountant makes every new tensor fake. `module_called(module, call)`: runs `call()` as a
    call of `module` for the tracker of modules (a compiled call runs no hooks of its own).
    `traced`: a context that puts the tracer's modes back while Dynamo compiles. `accountant`:
    the type of the accountant's dispatch mode. `also_when_compiling`: more patches for the
    first compile (Inductor's GPU code)."""
    check_tested("torch_compile", torch.__version__)
    _flex_attention_in(patcher, accountant)  # eager FlexAttention compiles nothing
    original_compile = torch.compile
    ready: list[bool] = []

    def internals() -> None:
        """Dynamo's and Inductor's side, patched when the trace first compiles: importing
        Inductor's compiler costs seconds per process, which a trace that never compiles
        should not pay (FakeTensorMode imports Dynamo itself, Inductor's compiler it does not). Imported with the trace's modes put aside: what their modules make at
        import time is real, as it is outside a trace."""
        if ready:
            return
        ready.append(True)
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            _patch_internals(patcher, programs, made_fake, traced, accountant)
            if also_when_compiling is not None:
                also_when_compiling()

    def eager(target, place: str, call: str, why: str):
        region = programs.region(place, call)
        region.how, region.eager_because = "eager", why
        if isinstance(target, torch.nn.Module):
            add_note(note_text(place, call, why))
            return target
        noted = False

        @functools.wraps(target)
        def compiled(*args, **kwargs):
            nonlocal noted
            if not noted:  # libraries compile helpers at import that a script may never call
                noted = True
                add_note(note_text(place, call, why))
            return target(*args, **kwargs)

        return compiled

    def compiled(target, place: str, call: str, kwargs: dict):
        internals()
        backend = kwargs.get("backend", "inductor")
        if backend != "inductor":
            name = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
            return eager(target, place, call, f"memlens models the inductor backend, not {name!r}")
        region = programs.region(place, call)
        options = dict(kwargs.get("options") or {})
        mode = kwargs.get("mode") or "default"
        # the option overrides the mode (mode="max-autotune" with triton.cudagraphs=False)
        if options.pop("triton.cudagraphs", mode in _CUDA_GRAPH_MODES):
            programs.ask_for_cuda_graphs(region)
        if mode not in ("default", "reduce-overhead") or options:
            add_note(f"{place}: {call}: compiled with Inductor's default kernel choices (its mode "
                     "and options choose kernels by benchmarking them, which a trace cannot)")
        dynamo = original_compile(_module_call(target) if isinstance(target, torch.nn.Module)
                                  else target, backend=programs.backend,
                                  **_dynamo_kwargs(kwargs))

        if isinstance(target, torch.nn.Module):
            module = target

            def call_module(*args, **kw):
                if torch.compiler.is_compiling():  # inside another region: inlined there
                    return module._call_impl(*args, **kw)
                with programs.calling(region):
                    return module_called(module, args, lambda: dynamo(*args, **kw))

            module._compiled_call_impl = call_module
            return module

        @functools.wraps(target)
        def call_function(*args, **kw):
            if torch.compiler.is_compiling():  # inside another region: inlined there
                return target(*args, **kw)
            with programs.calling(region):
                return dynamo(*args, **kw)

        return call_function

    def compile(model=None, **kwargs):
        if kwargs.get("disable"):  # torch.compile(disable=True) is eager already
            return model if model is not None else (lambda fn: fn)
        place = _place(1)

        def wrap(target):
            name = type(target).__name__ if isinstance(target, torch.nn.Module) \
                else getattr(target, "__name__", "fn")
            return compiled(target, place, _call("torch.compile", name, kwargs), kwargs)

        if model is None:  # @torch.compile(mode=...) on a function or a module
            return wrap
        return wrap(model)

    def module_compile(self, *args, **kwargs):
        compiled(self, _place(1), _call(f"{type(self).__name__}.compile", None, kwargs), kwargs)

    patcher.setattr(torch, "compile", compile)
    patcher.setattr(torch.nn.Module, "compile", module_compile)
    _compile_internals_first(patcher, internals)
    _compiled_before_the_trace(patcher, programs, internals)

    def forget_compiled() -> None:
        """What was compiled in the trace has no-op kernels: after it (the Python API runs in
        the user's process), Dynamo's code caches and Inductor's loaded modules must go, so
        that a compiled call recompiles for real."""
        if programs.regions:
            from torch._inductor.codecache import PyCodeCache

            torch._dynamo.reset()
            PyCodeCache.cache_clear()

    patcher.defer(forget_compiled)
