"""Torch Memory Lens: how much device memory one training step needs, and where the bytes go."""

__version__ = "0.1.0"
