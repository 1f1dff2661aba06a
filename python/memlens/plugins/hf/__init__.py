"""Hugging Face's libraries, one plugin each: `safetensors.py` (loading onto the simulated GPU),
`accelerate.py`, `transformers.py` (the Trainer)."""
