import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda_build: needs a torch built with CUDA (no GPU needed); skipped otherwise")


def pytest_collection_modifyitems(config, items):
    # Read the torch install from disk: importing torch here would defeat the tests that must
    # load the fake-CUDA shim before torch (they run in subprocesses anyway).
    from memlens.cuda.build import find_torch

    if find_torch().cuda_build:
        return
    skip = pytest.mark.skip(reason="this interpreter's torch is a CPU-only build")
    for item in items:
        if "cuda_build" in item.keywords:
            item.add_marker(skip)
