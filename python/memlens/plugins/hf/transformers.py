"""The Hugging Face Trainer's evaluations as phases of their own.

Activated when `transformers` is imported inside a trace; `transformers.trainer` is patched
right after its body has run, undone when the trace ends.

- `Trainer.evaluate` and `Trainer.predict` (the Trainer calls `evaluate` every `eval_steps`)
  run the model's forward on evaluation batches. Left alone, the first of those forwards would
  start the next training iteration (`forward_backward_iter_N`) and the evaluation's memory
  would be reported as the next step's. Each call is an `evaluate_after_iter_N` phase instead
  (phases.py), whose forwards start no iteration: one iteration stays one optimizer step, and
  `--iterations K` counts optimizer steps.
"""

from __future__ import annotations

import functools
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin




class Plugin(LibraryPlugin):
    watches = {"transformers.trainer": "trainer"}

    def trainer(self, mod: ModuleType) -> None:
        import transformers

        check_tested("hf_transformers", transformers.__version__)
        phases = self.tracer.phases
        for name in ("evaluate", "predict"):
            original = getattr(mod.Trainer, name)

            @functools.wraps(original)
            def evaluation(self, *args, __original=original, **kwargs):
                phases.begin_evaluation()
                try:
                    return __original(self, *args, **kwargs)
                finally:
                    phases.end_evaluation()

            self.patcher.setattr(mod.Trainer, name, evaluation)
