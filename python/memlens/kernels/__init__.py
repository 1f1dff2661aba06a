"""Memory kernels allocate for themselves inside an op (scratch buffers, library handles' buffers):
the rules per op, for CPU kernels (`cpu/`) and CUDA kernels (`cuda.py`)."""
