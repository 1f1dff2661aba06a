"""Recipes: the README's full example is what the loader reads, and every wrong key, type or value
is an error naming the recipe file and the key."""

import re

import pytest

from memlens.errors import MemlensError
from memlens.targets.recipe import load_recipe
from support.paths import REPO
from support.runs import run_memlens


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
    assert gpt.sdpa_backend == "flash"
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
    ("sdpa_backend = \"xformers\"", "unknown SDPA backend 'xformers'; one of flash, efficient"),
    ("optimiser = \"adamw\"", "unknown recipe key(s): optimiser"),
])
def test_a_wrong_key_type_or_value_names_the_file_and_the_key(tmp_path, line, message):
    recipe = tmp_path / "memlens.toml"
    recipe.write_text(line + "\n")
    with pytest.raises(MemlensError) as e:
        load_recipe(tmp_path / "model.py", "Net")
    assert message in e.value.message
    assert e.value.location is not None and e.value.location.file == str(recipe)


def test_an_error_names_the_line_of_the_key_in_its_model_entry(tmp_path):
    recipe = tmp_path / "memlens.toml"
    recipe.write_text('batch = 4\n'                        # 1
                      '\n'                                 # 2
                      '[[model]]\n'                        # 3
                      'target = "other.py:Other"\n'         # 4
                      'batch = 2\n'                        # 5
                      '\n'                                 # 6
                      '[[model]]\n'                        # 7
                      'target = "model.py:Net"\n'           # 8
                      'precision = "bf16"\n'               # 9
                      'batch = -4\n')                      # 10
    with pytest.raises(MemlensError) as e:
        load_recipe(tmp_path / "model.py", "Net")
    assert "batch must be a positive integer, got -4" in e.value.message
    assert (e.value.location.file, e.value.location.line) == (str(recipe), 10)


def test_a_memlens_entry_that_is_no_table_is_named_as_such(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool]\nmemlens = "yes"\n')
    with pytest.raises(MemlensError) as e:
        load_recipe(tmp_path / "model.py", "Net")
    assert e.value.message == "[tool.memlens] must be a table of recipe keys, got 'yes'"
    assert e.value.location.line == 5


@pytest.mark.parametrize("flags, message", [
    (["--batch", "0"], "--batch: batch must be a positive integer, got 0"),
    (["--batch", "-4"], "--batch: batch must be a positive integer, got -4"),
    (["--iterations", "0"], "--iterations: iterations must be at least 1, got 0"),
    (["--loss", "max"], "--loss: unknown loss 'max'"),
])
@pytest.mark.slow  # traces in a fresh process
def test_command_line_overrides_obey_the_recipe_rules(flags, message):
    out = run_memlens("trace", str(REPO / "examples" / "gpt" / "model.py:GPT"), "--device", "cpu",
                      *flags, "--no-snapshot")
    assert out.returncode == 1
    assert message in out.stderr and "Traceback" not in out.stderr
