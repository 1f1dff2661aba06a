"""A stand-in for Transformer Engine 2.10's `make_graphed_callables`
(transformer_engine/pytorch/graph.py at v2.10), where TE is not installed: Megatron's
TECudaGraphHelper calls it once its warm-up steps are done, on every layer of the stage and
every micro-batch of the step (te_graphs.py puts it there).

It runs on memlens' simulated CUDA graphs (cuda/graphs.py): a capture books what its code
allocates in the graph's private pool, a replay books nothing. What TE does, and so the stand-in:

- warm-up, on a side stream of its own: each (layer, micro-batch) in the schedule's forward order
  runs forward, then `autograd.grad` of its outputs (new output gradients) to its inputs and the
  parameters; parameters that get no gradient leave the graph's inputs (a layer whose MoE
  experts are outside the captured scope). TE repeats this `num_warmup_iters` times; the
  repetitions allocate and free the same tensors on the same stream, so one is run;
- capture, in the pipeline schedule's order (`_order`: +c the forward of chunk c's layers for
  its next micro-batch, -c the backward of its oldest, layers in reverse), every pass in one
  shared pool: a forward keeps its outputs (the static outputs); a backward makes the output
  gradients it reads (with buffer reuse: one set per shape signature, shared), captures
  `autograd.grad` and keeps the input and parameter gradients. With buffer reuse a micro-batch
  reuses the sample inputs of one whose backward was captured (same signature), and what later
  passes no longer read is dropped from the pool while the graphs keep pointing at it (TE's
  weak references): a pass's static outputs after its backward, a layer's input gradients once
  the next layer's backward was captured, a chunk's last ones after the next chunk's;
- replay: the graphed layer copies its inputs into the static inputs, replays, and returns the
  static outputs (detached); its backward copies the gradients into the static output
  gradients, replays, and returns the static input and parameter gradients.

With FP8 each layer is warmed up and captured under the FP8 context TE's `enabled` gives it
(Megatron's first and last layers may stay in bf16), with the FP8 stand-ins (fp8_linear.py).
"""

from __future__ import annotations

import contextlib
import functools

from ...errors import MemlensError

NOTE = ("Transformer Engine is not installed here: --cuda-graph-impl transformer_engine runs "
        "memlens' stand-in for TE 2.10's make_graphed_callables on simulated CUDA graphs: the "
        "warm-up on a side stream, each layer and micro-batch captured in the schedule's order "
        "into one private pool, its static inputs, outputs and gradients kept as TE keeps them "
        "(plugins/megatron/graphed_callables.py)")


def make_graphed_callables_stand_in(plugin):
    """TE 2.10's `make_graphed_callables`, its signature (the deprecated fp8_* names too)."""

    def make_graphed_callables(modules, sample_args, num_warmup_iters=3, allow_unused_input=False,
                               sample_kwargs=None, fp8_enabled=None, fp8_calibrating=None,
                               fp8_recipe=None, fp8_group=None, fp8_weight_caching=None,
                               enabled=None, calibrating=None, recipe=None,
                               amax_reduction_group=None, cache_quantized_params=None,
                               _order=None, _num_layers_per_chunk=None, pool=None,
                               retain_graph_in_backward=False,
                               _reuse_graph_input_output_buffers=False, **newer):
        if newer:  # a newer TE's (the warm-up hooks of activation offloading, ...)
            raise MemlensError(
                f"Megatron called Transformer Engine's make_graphed_callables with "
                f"{', '.join(sorted(newer))}, which TE 2.10, the version memlens' stand-in "
                "holds the memory of, does not take (plugins/megatron/graphed_callables.py)")
        plugin.note(NOTE)
        single = not isinstance(modules, tuple)
        if single:
            modules, sample_args = (modules,), (sample_args,)
            sample_kwargs = None if sample_kwargs is None else (sample_kwargs,)
        enabled = fp8_enabled if fp8_enabled is not None else enabled
        if not isinstance(enabled, tuple):
            enabled = (bool(enabled),) * len(modules)
        graphed = _Graphing(plugin, modules, list(sample_args), sample_kwargs, enabled, _order,
                            _num_layers_per_chunk, pool, allow_unused_input,
                            retain_graph_in_backward, _reuse_graph_input_output_buffers)
        graphed.warm_up(num_warmup_iters)
        graphed.capture()
        callables = graphed.callables()
        return callables[0] if single else tuple(callables)

    return make_graphed_callables


class _Graphing:
    """One call of make_graphed_callables: its passes, their static tensors and graphs."""

    def __init__(self, plugin, modules, sample_args, sample_kwargs, enabled, order,
                 layers_per_chunk, pool, allow_unused, retain_graph, reuse) -> None:
        import torch

        self.plugin, self.modules, self.enabled = plugin, modules, enabled
        self.allow_unused, self.retain_graph, self.reuse = allow_unused, retain_graph, reuse
        self.training = all(m.training for m in modules)
        if not self.training and any(m.training for m in modules):
            raise AssertionError("make_graphed_callables only supports when modules are all in "
                                 "training or all in inference mode.")
        self.steps, self.callable_of = _schedule(len(modules), len(sample_args), order,
                                                 layers_per_chunk)
        self.args = sample_args
        self.kwargs = list(sample_kwargs) if sample_kwargs is not None else \
            [{} for _ in sample_args]
        if reuse:
            if order is None:
                raise AssertionError("`_order` must be provided when "
                                     "`_reuse_graph_input_output_buffers` is True.")
            self._share_inputs()
        n = len(self.args)
        self.kwarg_keys = [list(k) for k in self.kwargs]
        self.user_inputs = [self._flat_inputs(i) for i in range(n)]
        self.params = [tuple(self.modules[self.callable_of[i]].parameters()) for i in range(n)]
        self.graphs = [(torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph())
                       for _ in range(n)]
        self.pool = pool
        if pool is None:  # TE's one shared pool, named for the report
            from ...cuda.graphs import GRAPHS

            self.pool = torch.cuda.graph_pool_handle()
            GRAPHS.name(self.pool[0], "Transformer Engine make_graphed_callables (Megatron's "
                        "layers)")
        self.weight_gradient_modules: list[list] = [[] for _ in range(n)]
        self.outputs: list = [None] * n
        self.output_specs: list = [None] * n
        self.grad_outputs: list = [None] * n
        self.grad_inputs: list = [None] * n

    # -- what each pass is -----------------------------------------------------------------
    def _flat_inputs(self, i: int) -> tuple:
        from torch.utils._pytree import tree_flatten

        args, _ = tree_flatten(self.args[i])
        kwargs, _ = tree_flatten([self.kwargs[i][k] for k in self.kwarg_keys[i]])
        return tuple(args) + tuple(kwargs)

    def surface(self, i: int) -> tuple:
        """What the graph of pass `i` differentiates: its inputs, then its parameters."""
        return self.user_inputs[i] + self.params[i]

    def _share_inputs(self) -> None:
        """Buffer reuse: a forward takes the sample inputs of an earlier pass of the same
        signature whose backward has come, in the schedule's order."""
        waiting: dict[int, list] = {}  # chunk -> [(signature, pass)] whose backward is to come
        done: dict[tuple, list] = {}  # signature -> passes whose backward came
        for direction, chunk, passes in self.steps:
            if direction == "forward":
                for i in passes:
                    key = _signature(self.args[i], self.kwargs[i])
                    waiting.setdefault(chunk, []).append((key, i))
                    if done.get(key):
                        earlier = done[key].pop(0)
                        self.args[i], self.kwargs[i] = self.args[earlier], self.kwargs[earlier]
            else:
                queue = waiting.get(chunk, [])
                count = min(len(queue), len(passes))
                for key, i in queue[:count]:
                    done.setdefault(key, []).append(i)
                waiting[chunk] = queue[count:]

    @contextlib.contextmanager
    def _precision(self, i: int):
        """The FP8 context TE's `enabled` gives the layer of pass `i` (its autocast wrapper)."""
        from .fp8_linear import fp8_autocast, recipe_of

        module = self.modules[self.callable_of[i]]
        recipe = recipe_of(self.plugin, module.config) if self.enabled[self.callable_of[i]] \
            else None
        with fp8_autocast(self.plugin, recipe):
            yield

    def _forward(self, i: int):
        with self._precision(i):
            return self.modules[self.callable_of[i]](*self.args[i], **self.kwargs[i])

    def _gradients(self, i: int, outputs, grad_outputs, retain_graph: bool = False):
        import torch

        return torch.autograd.grad(
            outputs=tuple(o for o in outputs if o.requires_grad),
            inputs=tuple(t for t in self.surface(i) if t.requires_grad),
            grad_outputs=tuple(g for g in grad_outputs if g is not None),
            only_inputs=True, allow_unused=self.allow_unused, retain_graph=retain_graph)

    # -- warm-up and capture ---------------------------------------------------------------
    def warm_up(self, iterations: int) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        torch.cuda.synchronize()
        with torch.cuda.stream(torch.cuda.Stream()):
            for i in self._forward_order():
                module = self.modules[self.callable_of[i]]
                for _ in range(min(iterations, 1)):  # the repetitions allocate the same
                    called: list = []
                    hooks = [m.register_forward_hook(
                        lambda m, inputs, outputs: called.append(m)) for m in module.modules()]
                    try:
                        outputs, _ = tree_flatten(self._forward(i))
                    finally:
                        for hook in hooks:
                            hook.remove()
                    if self.training:
                        grads = self._gradients(i, outputs, [
                            torch.empty_like(o) if o.requires_grad else None for o in outputs])
                        self._drop_unused_params(i, grads)
                        self.weight_gradient_modules[i] = _deferred_weight_gradients(called)
                        for m in self.weight_gradient_modules[i]:
                            m.backward_dw()
                        del grads
                    del outputs
                for m in module.modules():  # Megatron's: warm-up must not change control flow
                    if hasattr(m, "is_first_microbatch"):
                        m.is_first_microbatch = True
        torch.cuda.synchronize()

    def _drop_unused_params(self, i: int, grads) -> None:
        wanted = [t for t in self.surface(i) if t.requires_grad]
        inputs = sum(t.requires_grad for t in self.user_inputs[i])
        with_grad = tuple(t for t, g in zip(wanted[inputs:], grads[inputs:]) if g is not None)
        if len(with_grad) != len(self.params[i]):
            self.params[i] = with_grad

    def _forward_order(self) -> list[int]:
        return [i for direction, _, passes in self.steps if direction == "forward"
                for i in passes]

    def capture(self) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        shared_grad_outputs: dict[tuple, tuple] = {}
        previous_chunk_last = None
        for direction, _, passes in self.steps:
            if direction == "forward":
                for i in passes:
                    with torch.cuda.graph(self.graphs[i][0], pool=self.pool):
                        outputs = self._forward(i)
                    flat, self.output_specs[i] = tree_flatten(outputs)
                    self.outputs[i] = tuple(flat)
                continue
            previous = None
            for i in passes:  # a chunk's layers, last first
                outputs = self.outputs[i]
                if self.reuse:
                    key = tuple((o.shape, o.dtype, o.layout) for o in outputs if o.requires_grad)
                    if key not in shared_grad_outputs:
                        shared_grad_outputs[key] = _new_gradients(outputs)
                    grad_outputs = shared_grad_outputs[key]
                else:
                    grad_outputs = _new_gradients(outputs)
                grads = ()
                if self.training:
                    with torch.cuda.graph(self.graphs[i][1], pool=self.pool):
                        grads = self._gradients(i, outputs, grad_outputs, self.retain_graph)
                    if self.weight_gradient_modules[i]:
                        with torch.cuda.graph(self.graphs[i][2], pool=self.pool):
                            for m in self.weight_gradient_modules[i]:
                                m.backward_dw()
                given = iter(grads)
                self.grad_inputs[i] = tuple(next(given) if self.training and t.requires_grad
                                            else None for t in self.surface(i))
                self.grad_outputs[i] = grad_outputs
                del grads, given
                if self.reuse:
                    self.outputs[i] = self._weak(self.outputs[i])
                    if previous is not None:
                        self.grad_inputs[previous] = self._weak(self.grad_inputs[previous])
                    previous = i
                if self.reuse and i == passes[-1]:  # the chunk's first layer
                    if previous_chunk_last is not None:
                        self.grad_inputs[previous_chunk_last] = self._weak(
                            self.grad_inputs[previous_chunk_last])
                    previous_chunk_last = i

    def _weak(self, tensors: tuple) -> tuple:
        """TE's weak references: tensors on the same memory that do not hold it, so that the
        pool may give it to later captures (memlens: unbooked tensors of the same shape)."""
        import torch

        from ...engine.shadow_values import share_values

        accountant = self.plugin.tracer.accountant
        weak = []
        for t in tensors:
            if t is None:
                weak.append(None)
                continue
            with accountant.unbooked():
                weak.append(torch.empty_strided(t.size(), t.stride(), dtype=t.dtype,
                                                device=t.device))
            share_values(weak[-1], t)  # counts a dispatcher reads back after the replay
        return tuple(weak)

    # -- the graphed callables -------------------------------------------------------------
    def callables(self) -> list:
        made = []
        for i in range(len(self.args)):
            function = _replaying(self, i)
            module = self.modules[self.callable_of[i]]
            forward = _graphed_forward(module, module.training, function, module.forward)
            if self.steps_from_order:
                made.append(forward)
            else:
                module.forward = forward
                made.append(module)
            graphs = self.graphs[i]
            dw = bool(self.weight_gradient_modules[i])
            made[-1].backward_dw = (lambda g=graphs[2], dw=dw: g.replay() if dw else None)
            made[-1].reset = functools.partial(_reset, graphs)
        return made

    @property
    def steps_from_order(self) -> bool:
        return self.steps[0][1] is not None


def _schedule(callables: int, samples: int, order, layers_per_chunk):
    """The passes in capture order, [(direction, chunk, [pass indices])], and the callable of
    each pass. Without `_order`: every callable's forward, then their backwards in reverse."""
    if order is None:
        if samples != callables:
            raise AssertionError("sample_args must have one entry per callable")
        return ([("forward", None, list(range(callables))),
                 ("backward", None, list(reversed(range(callables))))],
                list(range(callables)))
    if any(int(c) != c for c in order):
        from .optimizer import _megatron_version

        raise MemlensError(f"{_megatron_version()}: the CUDA graph order has weight-gradient "
                           "passes (--overlap-moe-expert-parallel-comm with "
                           "--delay-wgrad-compute), which TE 2.10's make_graphed_callables, "
                           "the version memlens stands in for, does not capture")
    chunks = max(order)
    microbatches = len(order) // chunks // 2
    if layers_per_chunk is None:
        layers_per_chunk = samples // chunks // microbatches
    if isinstance(layers_per_chunk, int):
        layers_per_chunk = [layers_per_chunk] * chunks
    first_layer = [sum(layers_per_chunk[:c]) for c in range(chunks)]
    if samples != sum(layers_per_chunk) * microbatches:
        raise AssertionError(f"Expected {sum(layers_per_chunk) * microbatches} args tuple, "
                             f"but got {samples}.")
    callable_of = [0] * samples
    for c in range(chunks):
        for mb in range(microbatches):
            for layer in range(layers_per_chunk[c]):
                callable_of[first_layer[c] * microbatches + mb * layers_per_chunk[c] + layer] = \
                    first_layer[c] + layer
    steps, forwards, backwards = [], [0] * chunks, [0] * chunks
    for c_id in order:
        c = abs(int(c_id)) - 1
        count = forwards if c_id > 0 else backwards
        start = first_layer[c] * microbatches + count[c] * layers_per_chunk[c]
        layers = list(range(start, start + layers_per_chunk[c]))
        steps.append(("forward", c, layers) if c_id > 0 else ("backward", c, layers[::-1]))
        count[c] += 1
    return steps, callable_of


def _signature(args, kwargs) -> tuple:
    return tuple((t.shape, t.dtype, t.layout) for t in args) + tuple(
        (k, v.shape, v.dtype, v.layout) for k, v in sorted(kwargs.items()))


def _new_gradients(outputs) -> tuple:
    import torch

    return tuple(torch.empty_like(o) if o.requires_grad else None for o in outputs)


def _deferred_weight_gradients(called) -> list:
    """The modules called in a warm-up forward that defer their weight gradients (TE's
    `need_backward_dw`: --delay-wgrad-compute), each once."""
    seen, deferred = set(), []
    for m in called:
        if id(m) not in seen and callable(getattr(m, "need_backward_dw", None)) \
                and m.need_backward_dw():
            seen.add(id(m))
            deferred.append(m)
    return deferred


def _replaying(graphing: _Graphing, i: int):
    """Pass `i`'s graphed function: an autograd function that replays its graphs."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    forward_graph, backward_graph, _ = graphing.graphs[i]
    static_inputs = graphing.user_inputs[i]
    keys, spec = graphing.kwarg_keys[i], graphing.output_specs[i]

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, given in zip(static_inputs, inputs):
                if static is not given:
                    static.copy_(given)
            forward_graph.replay()
            return tuple(o.detach() for o in graphing.outputs[i])

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            for static, given in zip(graphing.grad_outputs[i], grads):
                if static is not None and static is not given:
                    static.copy_(given)
            backward_graph.replay()
            return tuple(g.detach() if g is not None else None for g in graphing.grad_inputs[i])

    def graphed(*args, **kwargs):
        for key in keys:
            if key not in kwargs:
                raise TypeError(f"Graphed callable was initialized with kwarg {key} ,but it was "
                                "not provided in graph replay")
        flat_args, _ = tree_flatten(args)
        flat_kwargs, _ = tree_flatten([kwargs[key] for key in keys])
        outputs = Graphed.apply(*flat_args, *flat_kwargs, *graphing.params[i])
        return tree_unflatten(list(outputs), spec)

    return graphed


def _reset(graphs) -> None:
    for graph in graphs:
        graph.reset()


def _graphed_forward(module, training: bool, graphed, original):
    """The graph while the module is in the mode it was captured in, else its forward."""

    def forward(*args, **kwargs):
        if module.training == training:
            return graphed(*args, **kwargs)
        return original(*args, **kwargs)

    return forward
