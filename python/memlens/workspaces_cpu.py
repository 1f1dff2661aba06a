"""Transient buffers of CPU kernels (filled in from measurements against torch.profiler)."""

CPU_RULES: dict = {}
