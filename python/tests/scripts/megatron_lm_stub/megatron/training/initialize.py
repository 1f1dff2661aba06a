from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
from megatron.training.arguments import parse_args, validate_args

COMPILED = []


def _compile_dependencies():
    COMPILED.append("helpers")  # Megatron-LM runs `make` here


def initialize_megatron(argv):
    from megatron.training.global_vars import set_args

    args = parse_args(argv)
    validate_args(args, {})
    set_args(args)
    # As Megatron-LM's set_global_variables: the schedule's micro-batches per iteration.
    init_num_microbatches_calculator(args.rank, args.rampup_batch_size, args.global_batch_size,
                                     args.micro_batch_size, args.data_parallel_size)
    _compile_dependencies()
    return args
