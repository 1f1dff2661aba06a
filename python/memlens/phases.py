"""Phases of a training run, detected with no change to the script.

setup_model_and_optimizer   from the start until the first top-level forward
forward_backward_iter_N     from the top-level forward through backward
optimizer_step_iter_N       from optimizer.step() (and the zero_grad after it) to the next forward
evaluate_after_iter_N       an evaluation a library plugin recognises (the Hugging Face Trainer's
                            `evaluate`) after iteration N's optimizer step, to the next forward;
                            `evaluate_before_training` before the first step. Its forwards start
                            no iteration: one iteration is one optimizer step.

After the requested number of iterations the next top-level forward, or the next op outside
an optimizer step, raises StopTracing into the script.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import StopTracing

SETUP, FORWARD_BACKWARD, OPTIMIZER = 0, 1, 2


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
        self.in_evaluation = 0  # nesting depth of an evaluation (plugins: begin_evaluation)
        self.stop_pending = False
        self.on_phase = lambda name: None  # progress display

    @property
    def index(self) -> int:
        return len(self.phases) - 1

    def begin(self, name: str) -> None:
        """Start a phase by name (also the public `tracer.phase(...)` API)."""
        self.phases.append(Phase(name, len(self.ledger.events), dict(self.ledger.current)))
        self.on_phase(name)

    def on_top_level_forward(self) -> None:
        if self.stop_pending:
            raise self._stop()
        if self.in_evaluation:
            return
        if self.state == OPTIMIZER:
            self.iteration += 1
        if self.state != FORWARD_BACKWARD:
            self.state = FORWARD_BACKWARD
            self.begin(f"forward_backward_iter_{self.iteration}")

    def on_step_begin(self) -> None:
        self.in_step += 1
        self.stop_pending = False  # a second optimizer stepping in the same iteration
        if self.state != OPTIMIZER:
            self.state = OPTIMIZER
            self.begin(f"optimizer_step_iter_{self.iteration}")

    def on_step_end(self) -> None:
        self.in_step = max(0, self.in_step - 1)
        if self.iteration + 1 >= self.iterations:
            self.stop_pending = True

    def begin_evaluation(self) -> None:
        self.in_evaluation += 1
        if self.in_evaluation == 1:
            self.begin(f"evaluate_after_iter_{self.iteration}" if self.state == OPTIMIZER
                       else "evaluate_before_training")

    def end_evaluation(self) -> None:
        self.in_evaluation = max(0, self.in_evaluation - 1)
