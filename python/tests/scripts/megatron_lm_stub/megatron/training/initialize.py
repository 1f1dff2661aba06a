from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator
from megatron.training.arguments import parse_args, validate_args

COMPILED = []


def _compile_dependencies():
    COMPILED.append("helpers")  # Megatron-LM runs `make` here


def _initialize_tp_communicators():
    """Userbuffers for TP communication overlapped with GEMMs: Transformer Engine's, as
    Megatron-LM asks for them (TE is never installed where the tests run)."""
    try:
        import transformer_engine  # noqa: F401
        import yaml  # noqa: F401
        from transformer_engine.pytorch import module as te_module
    except ImportError:
        raise RuntimeError("Tensor Parallel Communication/GEMM Overlap optimization needs "
                           "'yaml' and 'transformer_engine' packages")
    te_module.base.initialize_ub()


def finish_mpu_init(args):
    """After the process groups are made (Megatron-LM's initialize_megatron does this part
    once torch.distributed is up)."""
    if args.tp_comm_overlap:
        _initialize_tp_communicators()


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
