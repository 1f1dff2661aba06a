"""Runnable training workloads: a script run unmodified, or a model built from a recipe."""
