"""Recipes: the README's full example is what the loader reads, and every wrong key, type or value
is an error naming the recipe file and the key."""

import re
from pathlib import Path

import pytest

from memlens.errors import MemlensError
from memlens.targets.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]


def _readme_recipe() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Recipes", 1)[1]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_reads_as_documented(tmp_path):
    (tmp_path / "pyproject.toml").write_text(_readme_recipe())
    model = tmp_path / "src" / "model.py"
    model.parent.mkdir()
    model.write_text("")

    gpt = load_recipe(model, "GPT")
    assert (gpt.device, gpt.iterations, gpt.precision, gpt.optimizer) == (
        "h100-80gb", 2, "autocast-bf16", "adamw")
    assert gpt.optimizer_args == {"fused": True, "weight_decay": 0.1}
    assert gpt.budget == "80 GiB" and gpt.lr == 3e-4 and gpt.batch == 8
    assert gpt.init["n_layer"] == 12
    assert gpt.input_shape(gpt.inputs["idx"]) == [8, 1024]
    assert gpt.inputs["idx"].dtype == "int64" and gpt.inputs["idx"].high == 50257

    llama = load_recipe(model, "make_llama")  # the second entry overrides the defaults
    assert (llama.precision, llama.loss, llama.batch) == ("bf16", "output.loss", 1)
    assert llama.init == {"size": "1b"}
    assert sorted(llama.inputs) == ["input_ids", "labels"]
    assert llama.optimizer_args == {"fused": True, "weight_decay": 0.1}  # a default kept


@pytest.mark.parametrize("line, message", [
    ("batch = \"8\"", "recipe key 'batch' must be int"),
    ("lr = \"fast\"", "recipe key 'lr' must be int or float"),
    ("iterations = true", "recipe key 'iterations' must be int"),
    ("iterations = 0", "iterations must be at least 1"),
    ("optimizer_args = 3", "recipe key 'optimizer_args' must be dict"),
    ("device = \"h1000\"", "recipe key 'device': unknown device 'h1000'"),
    ("budget = \"lots\"", "recipe key 'budget': not a size: 'lots'"),
    ("loss = \"max\"", "unknown loss 'max'"),
    ("precision = \"fp8\"", "unknown precision 'fp8'"),
    ("optimiser = \"adamw\"", "unknown recipe key(s): optimiser"),
])
def test_a_wrong_key_type_or_value_names_the_file_and_the_key(tmp_path, line, message):
    recipe = tmp_path / "memlens.toml"
    recipe.write_text(line + "\n")
    with pytest.raises(MemlensError) as e:
        load_recipe(tmp_path / "model.py", "Net")
    assert message in e.value.message
    assert e.value.location is not None and e.value.location.file == str(recipe)
