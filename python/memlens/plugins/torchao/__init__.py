"""torchao: `float8.py`, its float8 training (`convert_to_float8_training`)."""
