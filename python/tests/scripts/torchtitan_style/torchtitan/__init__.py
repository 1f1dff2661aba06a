"""A stand-in package with the name and the token dispatcher's method names of torchtitan 0.3.0,
written for memlens' tests (plugins/torchtitan): not torchtitan's code."""

__version__ = "0.3.0"
