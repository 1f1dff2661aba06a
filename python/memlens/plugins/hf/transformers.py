"""The Hugging Face Trainer's evaluations as phases of their own.

Activated when `transformers` is imported inside a trace; `transformers.trainer` is patched
right after its body has run, undone when the trace ends.

- `Trainer.evaluate` and `Trainer.predict` (the Trainer calls `evaluate` every `eval_steps`)
  run the model's forward on evaluation batches. Left alone, the first of those forwards would
  start the next training iteration (`forward_backward_iter_N`) and the evaluation's memory
  would be reported as the next step's. Each call is an `evaluate_after_iter_N` phase instead
  (phases.py), whose forwards start no iteration: one iteration stays one optimizer step, and
  `--iterations K` counts optimizer steps.
- Hub kernels: from 5.25 `from_pretrained` swaps layers for compiled kernels it downloads from
  the Hub (`kernels-community/...`, with the `kernels` package) unless USE_HUB_KERNELS=NO. A
  trace runs no compiled kernel and reads nothing from the Hub (offline it stopped with "could
  not verify publisher trust status"): the layers keep their PyTorch code, with a note.
"""

from __future__ import annotations

import functools
from importlib.util import find_spec
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin




class Plugin(LibraryPlugin):
    watches = {"transformers.trainer": "trainer", "transformers.modeling_utils": "modeling"}

    def modeling(self, mod: ModuleType) -> None:
        if not hasattr(mod, "_kernels_enabled"):  # before 5.25: no hub kernels by default
            return
        self.patcher.setattr(mod, "_kernels_enabled", lambda: False)
        if find_spec("kernels") is not None:
            self.tracer.add_note("transformers' hub kernels (kernels-community, downloaded by "
                                 "from_pretrained) are not used in a trace: layers run their "
                                 "PyTorch code, as with USE_HUB_KERNELS=NO")

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
