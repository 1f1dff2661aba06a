"""What CPU kernels allocate for themselves, op by op (see `rules.CPU_RULES`)."""
