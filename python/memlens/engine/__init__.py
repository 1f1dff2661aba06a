"""The tracing engine: a TorchDispatchMode accountant over fake tensors that books every
allocation and free of one training step into a ledger, with who asked (module, phase, stack)."""
