"""Integrations with libraries that need more than torch's hooks to trace (Megatron-core,
safetensors, accelerate, the Hugging Face Trainer, torchao's float8 training, DeepSpeed).

One subpackage per library (`megatron/`, `hf/`, `torchao/`); each plugin is a module of it
that is imported only when its library is: the tracer installs a `PluginHost`, which watches
for each plugin's trigger module and, when the trigger starts to be imported (before the
package's `__init__` imports its submodules), makes the plugin module's `Plugin(context,
watcher)` (context.py: what a plugin may use of the trace, and the one shape of a plugin). A
plugin keeps its monkey-patches in one module, version-checked, and undoes them when the trace
ends; what it changed about the run goes into the snapshot's
`meta.notes`.
"""

from __future__ import annotations

import importlib
from .context import Plugin, PluginContext, PluginFactory
from .imports import ImportWatcher

# trigger module -> plugin module (in this package: <library>.<plugin>)
PLUGINS = {"megatron.core": "megatron", "safetensors": "hf.safetensors",
           "accelerate": "hf.accelerate", "transformers": "hf.transformers",
           "transformers.modeling_utils": "hf.loading", "torchao": "torchao.float8",
           "deepspeed": "deepspeed", "bitsandbytes": "bitsandbytes", "triton": "triton",
           "olmo_core": "olmo_core", "torchtitan": "torchtitan"}


class PluginHost:
    def __init__(self, tracer: PluginContext) -> None:
        self.tracer = tracer
        self.watcher = ImportWatcher()
        self.active: list[Plugin] = []

    def install(self) -> None:
        self.watcher.install()
        for trigger, name in PLUGINS.items():
            self.watcher.watch_start(trigger, lambda _module, name=name: self._activate(name))

    def uninstall(self) -> None:
        self.watcher.uninstall()
        while self.active:
            self.active.pop().deactivate()

    def _activate(self, name: str) -> None:
        module = importlib.import_module(f"{__name__}.{name}")
        factory: PluginFactory = module.Plugin
        self.active.append(factory(self.tracer, self.watcher))
