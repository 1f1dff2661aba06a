"""The store and the group API of a simulated rank (patches/torch_distributed_store.py,
torch_distributed_groups.py): what OLMo-core, torch elastic's barrier, Lightning's infinite
barrier and DeviceMesh on a device-bound default group call, answered as rank 5 of a job of 8.

One trace of scripts/platform/process_groups.py (`--world-size 8 --rank 5`); the script prints
what each call answered."""

import ast
import re

import pytest

from support.paths import TESTS
from support.runs import run_memlens

pytestmark = pytest.mark.slow  # traces in a fresh process

SCRIPT = TESTS / "scripts" / "platform" / "process_groups.py"
RANK, WORLD = 5, 8


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("groups")
    out = run_memlens("run", "--device", "h100-80gb", "--world-size", str(WORLD), "--rank",
                      str(RANK), "--json", "--progress", "none", "--no-snapshot", "--",
                      str(SCRIPT), cwd=tmp)
    assert out.returncode == 0, out.stderr[-4000:]
    return {name: ast.literal_eval(value)
            for name, value in re.findall(r"^ANSWER (\w+) (.+)$", out.stderr, re.M)}


def test_the_default_store_answers_its_whole_api(answers):
    # add returns the running total (5, then 5 + 2); compare_set swaps when the value is the
    # expected one and returns the value now held either way; a deleted key is gone.
    assert answers["add"] == [5, 7]
    assert answers["get"] == b"memlens"
    assert answers["compare_set"] == [b"lens", b"lens"]
    assert answers["check"] == [True, False]
    assert answers["delete_key"] == [True, False]
    assert answers["num_keys_positive"] is True
    # A key only another rank would set: waiting passes, reading it is an error naming it.
    assert answers["get_missing"] is True
    assert answers["elastic_barrier"] == "passed"
    assert answers["tcp"] == [b"v", 3, 29511]


def test_split_groups_and_meshes_follow_the_rank(answers):
    # split_ranks [[0..3], [4..7]]: rank 5 is in the second, as its second member.
    assert answers["split"] == [4, 5, 6, 7]
    assert answers["split_rank"] == 1
    # A 2 x 4 mesh (dp, tp) over ranks 0..7 in row-major order: rank 5 is row 1, column 1;
    # its tp group is its row, its dp group its column (1 and 5).
    assert answers["mesh_tp"] == [4, 5, 6, 7]
    assert answers["mesh_dp"] == [1, 5]
    # new_subgroups(group_size=2): 8 / 2 = 4 groups; rank 5 is in [4, 5], as member 1, and
    # that group's member 0 is global rank 4.
    assert answers["subgroup"] == [[4, 5], WORLD // 2]
    assert answers["global_rank"] == 4
    assert answers["group_rank"] == 1


def test_monitored_barrier_on_gloo_groups_only(answers):
    assert answers["gloo_backend"] == "gloo"
    # The default group was made with nccl: torch's own refusal, as on a GPU.
    assert answers["monitored_nccl"] == "monitored_barrier is only implemented for GLOO backend."
