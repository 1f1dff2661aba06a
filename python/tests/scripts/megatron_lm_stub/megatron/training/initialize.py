from megatron.training.arguments import parse_args, validate_args

COMPILED = []


def _compile_dependencies():
    COMPILED.append("helpers")  # Megatron-LM runs `make` here


def initialize_megatron(argv):
    from megatron.training.global_vars import set_args

    args = parse_args(argv)
    validate_args(args, {})
    set_args(args)
    _compile_dependencies()
    return args
