"""A stand-in for a safetensors older than memlens' integration was tested on (the tests put
this folder first on PYTHONPATH): its version is all that matters."""
__version__ = "0.1.0"
