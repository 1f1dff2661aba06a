"""Fake CUDA for FakeTensorMode tracing on a machine without a GPU.

``build.ensure_fake_cuda_support()`` must run before ``import torch`` (it loads a small
C++ shim where the torch build needs one); ``simulate.simulate_cuda()`` then makes
``torch.cuda`` answer as the target GPU. This package imports neither torch nor its
submodules eagerly, so importing it never imports torch.
"""
