from .global_vars import get_args, set_args  # noqa: F401
