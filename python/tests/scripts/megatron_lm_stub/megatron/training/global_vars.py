_ARGS = None


def get_args():
    return _ARGS


def set_args(args):
    global _ARGS
    _ARGS = args
