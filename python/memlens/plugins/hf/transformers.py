"""The Hugging Face Trainer's evaluations as phases of their own, and its saves kept out of the
user's output folder.

Activated when `transformers` is imported inside a trace; `transformers.trainer` is patched
right after its body has run, undone when the trace ends.

- `Trainer.evaluate` and `Trainer.predict` (the Trainer calls `evaluate` every `eval_steps`)
  run the model's forward on evaluation batches. Left alone, the first of those forwards would
  start the next training iteration (`forward_backward_iter_N`) and the evaluation's memory
  would be reported as the next step's. Each call is an `evaluate_after_iter_N` phase instead
  (phases.py), whose forwards start no iteration: one iteration stays one optimizer step, and
  `--iterations K` counts optimizer steps.
- `Trainer._save_checkpoint` (every `save_steps`) and `Trainer.save_model` run as on a GPU (the
  state dicts gathered and serialized: their memory is the step's), into a folder of the
  trace's own, removed when the trace ends: a traced checkpoint holds no data, and one left in
  `output_dir` would be what a later real run resumes from (`get_last_checkpoint`).
- `push_to_hub=True`: the Trainer would create the user's Hub repository when it starts and
  upload every checkpoint and the final model to it. A traced model holds no data, and the
  repository is the user's: `init_hf_repo`, a checkpoint's push and `Trainer.push_to_hub` do
  nothing in a trace, with a note (offline, they stopped the trace with a connection error).
- `generate` (evaluation, RL loops such as TRL's GRPO) stops a row when it samples EOS or a stop
  string: values a trace does not have (the sampled tokens are made up). Those criteria answer
  "not yet" for every row, as values the trace knows, so each call runs to its length limit,
  the most a real call can take; before, the loop's stop test read a made-up value and never
  ended.
- Hub kernels: from 5.25 `from_pretrained` swaps layers for compiled kernels it downloads from
  the Hub (`kernels-community/...`, with the `kernels` package) unless USE_HUB_KERNELS=NO. A
  trace runs no compiled kernel and reads nothing from the Hub (offline it stopped with "could
  not verify publisher trust status"): the layers keep their PyTorch code, with a note.
- The KV cache: with the config's default `use_cache=True` a model's forward makes a
  `DynamicCache` in training too, and each decoder layer writes its own entry of it by its
  `layer_idx`. `Cache` is declared to layer replay (engine/layer_cache.py), and its `update`
  hands the layer index it is given to the replay, so that the repeated decoder layers are
  replayed as without a cache, each writing its own entry.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from importlib.util import find_spec
from types import ModuleType

from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin


class _ActiveReplay:
    """What the cache's `update` hands its layer index to while a trace replays layers."""

    @staticmethod
    def cache_index(index):
        return index


def _cache_index(index):
    return _ActiveReplay.cache_index(index)


class Plugin(LibraryPlugin):
    watches = {"transformers.trainer": "trainer", "transformers.modeling_utils": "modeling",
               "transformers.generation.stopping_criteria": "stopping",
               "transformers.cache_utils": "cache_utils"}
    scratch: str | None = None  # where the Trainer's saves go during the trace

    def deactivate(self) -> None:
        super().deactivate()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def _scratch(self, output_dir: str | None) -> str:
        if self.scratch is None:
            self.scratch = tempfile.mkdtemp(prefix="memlens-trainer-")
            self.tracer.add_note(f"the Trainer's checkpoints and saved model went into a "
                                 f"folder of the trace's own, not into {output_dir} (a traced "
                                 "checkpoint holds no data)")
        return self.scratch

    def modeling(self, mod: ModuleType) -> None:
        if not hasattr(mod, "_kernels_enabled"):  # before 5.25: no hub kernels by default
            return
        self.patcher.setattr(mod, "_kernels_enabled", lambda: False)
        if find_spec("kernels") is not None:
            self.tracer.add_note("transformers' hub kernels (kernels-community, downloaded by "
                                 "from_pretrained) are not used in a trace: layers run their "
                                 "PyTorch code, as with USE_HUB_KERNELS=NO")

    def cache_utils(self, mod: ModuleType) -> None:
        replay = self.tracer.layer_replay
        if replay is None or not hasattr(mod.Cache, "update"):
            return
        import torch
        import transformers

        check_tested("hf_transformers", transformers.__version__)
        original = mod.Cache.update

        @functools.wraps(original)
        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            # Dynamo inlines this: nothing of the replay in its closure, and none of it run
            if not torch.compiler.is_compiling():
                layer_idx = _cache_index(layer_idx)
            return original(self, key_states, value_states, layer_idx, *args, **kwargs)

        def accepts(cache) -> bool:
            # The base class's update, on the GPU (offloading moves entries to the host and
            # back on streams of its own)
            return type(cache).update is update and not getattr(cache, "offloading", True) \
                and isinstance(getattr(cache, "layers", None), list)

        self.patcher.setattr(mod.Cache, "update", update)
        self.patcher.setattr(_ActiveReplay, "cache_index", replay.caches.index)
        replay.caches.declare(mod.Cache, accepts, lambda cache: cache.layers)

    def stopping(self, mod: ModuleType) -> None:
        import torch

        add_note = self.tracer.add_note

        def not_yet(self, input_ids, scores=None, *args, **kwargs):
            add_note("generate: EOS and stop strings were taken as never sampled (the sampled "
                     "tokens are not known in a trace): each call ran to its length limit")
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        for name in ("EosTokenCriteria", "StopStringCriteria", "ConfidenceCriteria"):
            criteria = getattr(mod, name, None)
            if criteria is not None:
                self.patcher.setattr(criteria, "__call__",
                                     functools.wraps(criteria.__call__)(not_yet))

    def trainer(self, mod: ModuleType) -> None:
        import transformers

        check_tested("hf_transformers", transformers.__version__)
        phases = self.tracer.phases
        for name in ("evaluate", "predict"):
            original = getattr(mod.Trainer, name)

            @functools.wraps(original)
            def evaluation(self, *args, __original=original, **kwargs):
                phases.begin_aside("evaluate")
                try:
                    return __original(self, *args, **kwargs)
                finally:
                    phases.end_aside()

            self.patcher.setattr(mod.Trainer, name, evaluation)
        self._saves(mod.Trainer)
        self._no_hub(mod.Trainer)

    def _no_hub(self, trainer: type) -> None:
        note = ("push_to_hub: the Trainer created no Hub repository and uploaded nothing (a "
                "traced model holds no data)")
        add_note = self.tracer.add_note

        def init_hf_repo(self, *args, **kwargs):
            add_note(note)
            self.hub_model_id = self.args.hub_model_id or os.path.basename(
                os.path.abspath(self.args.output_dir))
            self.push_in_progress = None

        def push_to_hub(self, *args, **kwargs):
            add_note(note)

        def _push_from_checkpoint(self, checkpoint_folder):
            add_note(note)

        for name, replacement in (("init_hf_repo", init_hf_repo), ("push_to_hub", push_to_hub),
                                  ("_push_from_checkpoint", _push_from_checkpoint)):
            original = getattr(trainer, name, None)
            if original is not None:
                self.patcher.setattr(trainer, name, functools.wraps(original)(replacement))

    def _saves(self, trainer: type) -> None:
        plugin = self
        save_checkpoint, save_model = trainer._save_checkpoint, trainer.save_model

        @functools.wraps(save_checkpoint)
        def _save_checkpoint(self, *args, **kwargs):
            scratch = plugin._scratch(self.args.output_dir)
            self._get_output_dir = lambda trial=None: scratch  # this call's run folder
            try:
                return save_checkpoint(self, *args, **kwargs)
            finally:
                del self._get_output_dir

        @functools.wraps(save_model)
        def _save_model(self, output_dir=None, *args, **kwargs):
            asked = output_dir or self.args.output_dir
            scratch = plugin._scratch(asked)
            if not os.path.abspath(asked).startswith(scratch):  # not a checkpoint's own
                asked = os.path.join(scratch, "saved-model")
            return save_model(self, asked, *args, **kwargs)

        self.patcher.setattr(trainer, "_save_checkpoint", _save_checkpoint)
        self.patcher.setattr(trainer, "save_model", _save_model)
