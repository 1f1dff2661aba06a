"""transformers' checkpoint loading in worker threads, under the trace's fake mode.

Activated when `transformers.modeling_utils` starts to be imported inside a trace (it imports
core_model_loading: a plugin triggered by the module it patches would find it still empty);
undone when the trace ends.

`from_pretrained(..., device_map=...)` in transformers 5 moves each checkpoint tensor to its
device in a `ThreadPoolExecutor` (core_model_loading.convert_and_load_state_dict_in_model,
unless HF_DEACTIVATE_ASYNC_LOAD is set). torch's dispatch modes are per thread: in a worker
the FakeTensorMode and the accountant are not active, and the copy asks for a real CUDA tensor
on a machine without one ("a real CUDA tensor was requested ... outside FakeTensorMode").
Entering the same modes in the workers is no answer: a FakeTensorMode keeps per-mode state
(`in_kernel_invocation`, its enter stack) that the loading thread changes at the same time.

So the module's `ThreadPoolExecutor` runs each job when it is submitted, in the submitting
thread, under its modes, and hands back a finished Future. The copies are the same; they are
made in the order the jobs are submitted, each group's tensors all materialized before the
loading thread collects them: the most a real run's workers can have in flight.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

from ...patches.inline_pool import InlineThreadPoolExecutor
from ...patches.patcher import check_tested
from ..library_plugin import LibraryPlugin


class Plugin(LibraryPlugin):
    watches = {"transformers.core_model_loading": "loading"}

    def loading(self, mod: ModuleType) -> None:
        import transformers

        check_tested("hf_transformers", transformers.__version__)
        if getattr(mod, "ThreadPoolExecutor", None) is ThreadPoolExecutor:
            self.patcher.setattr(mod, "ThreadPoolExecutor", InlineThreadPoolExecutor)
