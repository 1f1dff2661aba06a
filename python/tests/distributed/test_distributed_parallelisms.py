"""Tensor, pipeline, data and expert parallelism: each simulated rank builds exactly its own
part, and the numbers follow from the layout (scripts in scripts/distributed/)."""

import pytest

from support.ranks import max_alive, model_state_bytes, module, trace_all

pytestmark = pytest.mark.slow  # traces in fresh processes

F32 = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parallel")
    plan = {
        "tp2": ("tp_train.py", 2, 1), "tp4": ("tp_train.py", 4, 3),
        "tp4-sp": ("tp_train.py", 4, 0, "--sp"),
        "pp-1f1b-0": ("pp_train.py", 4, 0), "pp-1f1b-3": ("pp_train.py", 4, 3),
        "pp-gpipe-0": ("pp_train.py", 4, 0, "--schedule", "gpipe"),
        "pp-gpipe-3": ("pp_train.py", 4, 3, "--schedule", "gpipe"),
        "ddp": ("ddp_train.py", 4, 2), "ddp-view": ("ddp_train.py", 4, 2, "--bucket-view"),
        "ep": ("moe_train.py", 4, 1),
    }
    return dict(zip(plan, trace_all(tmp, list(plan.values()))))


# -- tensor parallelism (tp_train.py: LayerNorm, up 256 -> 1024, down 1024 -> 256) --------------
@pytest.mark.parametrize("name,t", [("tp2", 2), ("tp4", 4), ("tp4-sp", 4)])
def test_column_parallel_linear_holds_one_t_th_of_its_weight(runs, name, t):
    snap = runs[name]
    up, down, norm = (module(snap, f) for f in ("up", "down", "norm"))
    # Column-wise: weight rows and bias split over t ranks.
    assert up["parameter_bytes"] == (1024 * 256 + 1024) * F32 // t
    # Row-wise: weight columns split, bias replicated.
    assert down["parameter_bytes"] == 256 * 1024 * F32 // t + 256 * F32
    assert norm["parameter_bytes"] == 2 * 256 * F32  # replicated
    assert up["optimizer_state_bytes"] == 2 * up["parameter_bytes"] + 2 * _step_bytes(snap)
    assert snap["meta"]["parallel"]["role"] == f"tp {snap['meta']['rank']}/{t}"


def test_sequence_parallel_shards_the_layer_norm_activations(runs):
    """Without SP every rank normalises the whole sequence and `up` saves that output; with SP
    a rank normalises 1/t of it (its statistics are all LayerNorm keeps: the output is
    all-gathered into `up`, which saves the gathered copy)."""
    full, sp = runs["tp4"], runs["tp4-sp"]
    b, s, h, t = 4, 128, 256, 4
    stats = 2 * b * s * F32  # mean and rstd per token
    assert module(full, "norm")["activation_bytes"] == b * s * h * F32 + stats
    assert module(sp, "norm")["activation_bytes"] == stats // t


def _step_bytes(snap) -> int:
    """Adam's step counter: a CPU scalar, on the target device only when that is the CPU."""
    return F32 if snap["meta"]["device_key"] == "cpu" else 0


# -- pipeline parallelism (pp_train.py: 4 stages, 8 micro-batches) -----------------------------
@pytest.mark.parametrize("schedule,stage,in_flight", [
    ("1f1b", 0, 4), ("1f1b", 3, 1),  # 1F1B: stage s keeps (stages - s) micro-batches
    ("gpipe", 0, 8), ("gpipe", 3, 8),  # GPipe: all of them, until backward starts
])
def test_pipeline_stages_hold_the_micro_batches_their_schedule_implies(runs, schedule, stage,
                                                                       in_flight):
    snap = runs[f"pp-{schedule}-{stage}"]
    # Each micro-batch in flight keeps the outputs of the stage's two ReLUs for backward.
    assert max_alive(snap, "relu") == 2 * in_flight
    assert snap["meta"]["parallel"]["stages"] == [stage]
    assert snap["meta"]["parallel"]["role"] == f"pp {stage}/4"


def test_pipeline_stages_hold_their_own_layers(runs):
    linear = (512 * 512 + 512) * F32
    assert model_state_bytes(runs["pp-1f1b-0"])["parameter"] == 2 * linear
    assert model_state_bytes(runs["pp-1f1b-3"])["parameter"] == 3 * linear  # and the head


# -- data parallelism (ddp_train.py: 4 x Linear(512, 512)) --------------------------------------
def test_ddp_gradient_buckets_are_counted(runs):
    params = 4 * (512 * 512 + 512) * F32
    plain, view = model_state_bytes(runs["ddp"]), model_state_bytes(runs["ddp-view"])
    assert plain["parameter"] == view["parameter"] == params
    # The buckets are a second copy of the gradients, unless the gradients are views of them.
    assert plain["gradient"] == 2 * params
    assert view["gradient"] == params
    assert runs["ddp"]["meta"]["parallel"]["role"] == "dp 2/4"


# -- expert parallelism (moe_train.py: 8 experts over 4 ranks, capacity 96) ----------------------
def test_expert_parallel_rank_holds_its_experts_and_all_to_all_buffers(runs):
    snap = runs["ep"]
    experts = 2 * (256 * 512 + 512 * 256) * F32  # 8 experts / 4 ranks
    router = 256 * 8 * F32
    assert model_state_bytes(snap)["parameter"] == experts + router
    # Each all-to-all allocates its output: [8 experts x 96 slots x 256] on every rank, twice
    # per forward (dispatch, combine) and twice per backward.
    assert snap["ops"].count("_c10d_functional.all_to_all_single") == 1
    assert max_alive(snap, "_c10d_functional.all_to_all_single") >= 1
    assert snap["meta"]["parallel"]["role"] == "ep 1/4"
