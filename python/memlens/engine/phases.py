"""Phases of a training run, detected with no change to the script.

setup_model_and_optimizer   from the start until the first top-level forward
forward_backward_iter_N     from the top-level forward through backward (every micro-batch of a
                            gradient-accumulation step: the iteration is the optimizer step)
optimizer_step_iter_N       from optimizer.step() (and the zero_grad after it) to the next forward
update_iter_N               with no torch optimizer: from the end of backward (a hand-written
                            update such as `p.data.add_(p.grad, alpha=-lr)`) to the next forward
forward_iter_N              with no optimizer and no backward (evaluation): one forward of the
                            model (the first module called at top level) to its next
evaluate_after_iter_N       an evaluation a library plugin recognises (the Hugging Face Trainer's
                            `evaluate`) after iteration N's optimizer step, to the next forward;
                            `evaluate_before_training` before the first step. Its forwards start
                            no iteration: one iteration is one optimizer step.
cuda_graph_capture_after_iter_N
                            CUDA graphs captured between steps (Megatron's Transformer Engine
                            graphs): the layers' warm-up and capture, which start no iteration
                            either.

What ends an iteration is what the script has: an optimizer step if the script made a torch
optimizer, else a backward pass, else the next forward of the model. After the requested number
of iterations the script is stopped (StopTracing raised into it): after an optimizer step, at
its next op outside the step; otherwise at the next top-level forward, so a hand-written update
is traced whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from .. import categories as C
from ..errors import StopTracing

SETUP, FORWARD_BACKWARD, OPTIMIZER, UPDATE = 0, 1, 2, 3

# What one iteration is, by what ends it (the report says what was counted).
OPTIMIZER_STEPS, BACKWARD_PASSES, FORWARD_PASSES = ("optimizer steps", "backward passes",
                                                   "forward passes")


@dataclass
class Phase:
    name: str
    start_seq: int  # the first event in this phase
    current_before: dict[str, int] = field(default_factory=dict)


class PhaseTracker:
    def __init__(self, ledger, iterations: int, stop=StopTracing):
        self.ledger = ledger
        self._stop = stop  # makes the exception that ends the workload
        self.iterations = iterations
        self.phases: list[Phase] = [Phase("setup_model_and_optimizer", 0)]
        self.state = SETUP
        self.iteration = 0
        self.in_step = 0  # nesting depth of optimizer.step()
        self.stop_held = 0  # nesting depth of a plugin's hold_stop()
        self.aside = 0  # nesting depth of an evaluation or capture (plugins: begin_aside)
        self.stop_pending = False  # the accountant stops the script at its next op
        self.interrupt_requested = False  # Ctrl-C: stop at the next op, even after a step
        self.optimizers = 0  # torch optimizers the script has made
        self.stepped = False  # an optimizer step has run
        self._backward_in_iteration = False
        self._backward_seen = False
        self._closure_steps = 0  # steps whose closure has not returned yet (step_pre_hook)
        self._state_init = 0  # inside state_init_step()
        self._iteration_phase = -1  # index of the current iteration's first phase
        self._lead = None  # id of the module whose forward began this iteration
        self.on_phase = lambda name: None  # progress display

    @property
    def index(self) -> int:
        return len(self.phases) - 1

    @property
    def iterations_traced(self) -> int:
        """Iterations begun (the last may be partial when the script ended or was stopped)."""
        return 0 if self._iteration_phase < 0 else self.iteration + 1

    @property
    def counted(self) -> str:
        """What one iteration was."""
        if self.optimizers or self.stepped:
            return OPTIMIZER_STEPS
        return BACKWARD_PASSES if self._backward_seen else FORWARD_PASSES

    def begin(self, name: str) -> None:
        """Start a phase by name (also the public `tracer.phase(...)` API)."""
        self.phases.append(Phase(name, len(self.ledger.events), dict(self.ledger.current)))
        self.on_phase(name)

    def finish(self) -> None:
        """The trace ended: name the last iteration by what it did."""
        self._name_finished_iteration()

    # -- events ----------------------------------------------------------------------------
    def on_top_level_forward(self, module=None) -> None:
        """A forward with no module around it (`module`: the module called; None from a
        schedule such as Megatron's, which stands for the whole model)."""
        if self.stop_pending:
            raise self._stop()
        if self.aside:
            return
        if self.state == SETUP:
            self._begin_iteration(module)
        elif self.state in (OPTIMIZER, UPDATE):
            self._next_iteration(module)
        elif (self.state == FORWARD_BACKWARD and not self.optimizers and not self.stepped
              and not self._backward_in_iteration and module is not None
              and id(module) == self._lead):
            self._next_iteration(module)  # evaluation only: each forward of the model

    def on_optimizer_created(self) -> None:
        self.optimizers += 1

    def on_backward_end(self) -> None:
        """The outermost backward pass (`loss.backward()`, `torch.autograd.grad`) returned."""
        self._backward_in_iteration = self._backward_seen = True
        if self.state == FORWARD_BACKWARD and not self.optimizers and not self.stepped:
            self.state = UPDATE
            self.begin(f"update_iter_{self.iteration}")

    def on_step_begin(self) -> None:
        self.in_step += 1
        self.stepped = True
        # A second optimizer stepping in the same iteration (but Ctrl-C still stops).
        self.stop_pending = self.interrupt_requested
        if self.state != OPTIMIZER:
            self.state = OPTIMIZER
            self.begin(f"optimizer_step_iter_{self.iteration}")

    @contextlib.contextmanager
    def state_init_step(self) -> Iterator[None]:
        """Inside, an optimizer step only creates the optimizer's state (DCP's
        `get_optimizer_state_dict` steps with zero gradients and lr 0 before a first
        checkpoint, as OLMo-core's at step 0): no iteration ends."""
        self._state_init += 1
        try:
            yield
        finally:
            self._state_init -= 1

    def step_pre_hook(self, optimizer, args: tuple, kwargs: dict):
        """optimizer.step's pre-hook. A step given a closure runs the iteration's forward and
        backward inside it (Lightning's automatic optimization, LBFGS): the step begins when
        the closure first returns, so those stay in the forward/backward phase."""
        if self._state_init:
            return None
        closure = kwargs["closure"] if "closure" in kwargs else (args[0] if args else None)
        if not callable(closure):
            self.on_step_begin()
            return None
        self._closure_steps += 1
        began = False

        def closure_then_step(*a, **k):
            nonlocal began
            result = closure(*a, **k)
            if not began:
                began = True
                self._closure_steps -= 1
                self.on_step_begin()
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_step}
        return (closure_then_step, *args[1:]), kwargs

    def step_post_hook(self, optimizer, args: tuple, kwargs: dict) -> None:
        if self._state_init:
            return
        if self._closure_steps:  # a step that never called its closure
            self._closure_steps -= 1
            self.on_step_begin()
        self.on_step_end()

    def on_step_end(self) -> None:
        self.in_step = max(0, self.in_step - 1)
        if self.iteration + 1 >= self.iterations:
            self.stop_pending = True

    @property
    def may_stop(self) -> bool:
        """Whether the accountant stops the script at this op: the last step was taken (or
        Ctrl-C came), and no step is running nor a plugin holding the stop."""
        return self.stop_pending and not self.in_step and not self.stop_held

    def hold_stop(self) -> None:
        """A plugin knows that the iteration goes on after the optimizer step, up to where the
        script measures its memory (Megatron-LM reduces the loss and, with `--log-params-norm`,
        lets Megatron-FSDP release its gathered parameters before it logs): the stop that the
        last step made pending waits for `release_stop`."""
        self.stop_held += 1

    def release_stop(self, stop: bool = True) -> None:
        """The end of a `hold_stop`: stop here if the last step was taken (and `stop`: not
        while an exception of the script's goes by)."""
        self.stop_held = max(0, self.stop_held - 1)
        if stop and self.may_stop:
            raise self._stop()

    def begin_aside(self, what: str = "evaluate") -> None:
        """Work between steps that runs the model but is no iteration (`evaluate`, a
        `cuda_graph_capture`): a phase `<what>_after_iter_N` (`<what>_before_training`)
        whose forwards start no iteration, until `end_aside`."""
        self.aside += 1
        if self.aside == 1:
            self.begin(f"{what}_after_iter_{self.iteration}" if self.state == OPTIMIZER
                       else f"{what}_before_training")

    def end_aside(self) -> None:
        self.aside = max(0, self.aside - 1)

    def request_interrupt(self) -> None:
        """Stop the script at its next op (Ctrl-C arrived while memlens was busy)."""
        self.interrupt_requested = self.stop_pending = True

    # -- iterations ------------------------------------------------------------------------
    def _begin_iteration(self, module) -> None:
        self.state = FORWARD_BACKWARD
        self._lead = id(module) if module is not None else None  # no reference: modules may go
        self._backward_in_iteration = False
        self._iteration_phase = len(self.phases)
        self.begin(f"forward_backward_iter_{self.iteration}")

    def _next_iteration(self, module) -> None:
        self._name_finished_iteration()
        self._keep_as_inputs(self.phases[-1].start_seq)
        if self.iteration + 1 >= self.iterations:
            raise self._stop()
        self.iteration += 1
        self._begin_iteration(module)

    def _keep_as_inputs(self, since_seq: int) -> None:
        """Allocations made outside modules after the last step or backward that are still
        alive as the next forward begins are that iteration's inputs (its batch); the rest of
        what was made there were temporaries."""
        ledger = self.ledger
        for rid in ledger.events[since_seq:]:
            if rid < 0:
                continue
            rec = ledger.records[rid]
            if rec.free_seq < 0 and rec.module < 0 and rec.category == C.TEMPORARY:
                ledger.recategorize(rid, C.INPUT)

    def _name_finished_iteration(self) -> None:
        """An evaluation iteration (no optimizer, no backward) was a forward only: say so in
        its name."""
        if self._iteration_phase < 0 or self._backward_in_iteration or self.counted != \
                FORWARD_PASSES:
            return
        phase = self.phases[self._iteration_phase]
        if phase.name == f"forward_backward_iter_{self.iteration}":
            phase.name = f"forward_iter_{self.iteration}"
