"""The contract every registered recipe keeps, checked on its ``tiny_config``: a new recipe is tested here without
writing a test (docs/architecture.md, "The recipe contract"). The last test runs the public kit
(:mod:`lavo_zoo.testing`) that plugin recipes run in their own suites, so the kit is held to the built-in recipes."""
import importlib
import math
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch

import lavo_zoo
from lavo_zoo.checkpoints import load_predictor
from lavo_zoo.config import to_dict
from lavo_zoo.engine.checkpoint_io import latest_checkpoint, load_model
from lavo_zoo.engine.configs import available_configs, config_from_dict, resolve_config
from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.engine.recipe import RECIPES, Recipe, get_recipe
from lavo_zoo.engine.trainer import Trainer
from lavo_zoo.errors import UsageError
from lavo_zoo.evaluators import EVALUATORS
from lavo_zoo.testing import recipe_checks

NAMES = RECIPES.names()
FAST = ["train.batch_size=2", "train.grad_accum=1", "train.max_steps=1", "train.max_epochs=null", "train.save_every=1",
        "train.eval_every=1", "train.eval_per_epoch=false", "train.eval_batches=1", "train.log_every=1",
        "train.num_workers=0", "eval.batch_size=2"]


@pytest.fixture(scope="module", params=NAMES)
def tiny(request):
    """(recipe, resolved tiny config with one-step training settings)."""
    recipe = get_recipe(request.param)
    assert recipe.tiny_config, f"recipe '{recipe.name}' must set tiny_config (a config that trains in seconds)"
    _, cfg = resolve_config(recipe.tiny_config, FAST)
    assert cfg.recipe == recipe.name
    return recipe, recipe.resolve(cfg)


def _batch(recipe, cfg, split: str, n: int = 2):
    ds = recipe.build_dataset(cfg, split)
    assert len(ds) > 0, f"{recipe.name}: split '{split}' of {recipe.tiny_config} is empty"
    return recipe.collate([ds[i] for i in range(min(n, len(ds)))])


BUILTIN = sorted(p.parent.name for p in (Path(__file__).resolve().parents[2] / "recipes").glob("*/recipe.py"))
# docs/architecture.md, "Every recipe has the same rooms" (a room is a module, or a package where a domain has several
# formats: LRA's data/)
ROOMS = ("recipe.py", "model.py", "data", "builtin.py", "infer.py", "cli.py", "configs", "README.md")


def check_rooms(folder: Path, package: str, recipe: Recipe) -> None:
    """The recipe in ``folder`` (importable as ``package``) has every room, and each room holds what it is for:
    recipe.py the config, whose training defaults are its paper_train_config(), with an EvalConfig; builtin.py the
    recipe's BuiltinData (dataset names, cache key, generator); infer.py its predictor; cli.py its COMMANDS, click
    commands; and a model card can say its task and limits."""
    import click

    from lavo_zoo.engine.builtin_data import BuiltinData
    from lavo_zoo.engine.run_config import EvalConfig

    name = recipe.name
    for room in ROOMS:
        path = folder / room
        if room == "README.md" and (folder.parent / "pyproject.toml").is_file():
            path = folder.parent / room  # a plugin's README is its project's
        assert path.is_file() or (path / "__init__.py").is_file() or (room == "configs" and path.is_dir()) or \
            (folder / f"{room}.py").is_file(), f"{package}: no {room}"
    eval_field = next(f for f in fields(recipe.config_class) if f.name == "eval")
    assert issubclass(eval_field.type if isinstance(eval_field.type, type) else type(eval_field.default_factory()),
                      EvalConfig), f"{name}: its eval config must subclass EvalConfig"
    module = importlib.import_module(f"{package}.recipe")
    train_field = next(f for f in fields(recipe.config_class) if f.name == "train")
    assert callable(getattr(module, "paper_train_config", None)), f"{name}: recipe.py has no paper_train_config()"
    assert train_field.default_factory is module.paper_train_config, \
        f"{name}: the config's train defaults must be recipe.py's paper_train_config()"
    assert isinstance(recipe.builtin, BuiltinData) and recipe.builtin.datasets, f"{name}: no built-in dataset"
    assert type(recipe.builtin).__module__ == f"{package}.builtin", f"{name}: its BuiltinData belongs in builtin.py"
    for hook in ("key", "write"):
        assert getattr(type(recipe.builtin), hook) is not getattr(BuiltinData, hook), f"{name} does not define {hook}"
    assert recipe.task != Recipe.task and all(recipe.task) and recipe.limits, \
        f"{name}: the model card needs its task (type, name) and limits"
    assert recipe.predictor is not None and issubclass(recipe.predictor, Predictor), f"{name}: no predictor"
    assert recipe.predictor.__module__ == f"{package}.infer", f"{name}: its predictor belongs in infer.py"
    commands = importlib.import_module(f"{package}.cli").COMMANDS
    assert isinstance(commands, list) and all(isinstance(c, click.Command) for c in commands), \
        f"{name}: cli.py's COMMANDS must be a list of click commands"


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_recipe_has_the_same_rooms(name):
    check_rooms(Path(__file__).resolve().parents[2] / "recipes" / name, f"lavo_zoo.recipes.{name}", get_recipe(name))


def test_a_scaffolded_recipe_has_the_rooms_of_a_builtin_one(tmp_path, monkeypatch):
    """`lavo-zoo new recipe` writes a plugin with the same rooms, checked the same way."""
    from lavo_zoo.scaffold import render, substitutions

    name = "rooms_demo"
    render("recipe", name, tmp_path / "pkg")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    try:
        recipe_class = getattr(importlib.import_module(f"{name}.recipe"), substitutions("recipe", name)["cls"])
        check_rooms(tmp_path / "pkg" / name, name, recipe_class())
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


@pytest.mark.parametrize("name", NAMES)
def test_every_config_of_the_recipe_validates(name):
    configs = [c for c in available_configs() if c.startswith(f"{name}/")]
    if name in BUILTIN:  # a plugin may give its configs as paths only
        assert get_recipe(name).tiny_config in configs, f"{name}: its named configs lack its tiny_config"
    for config in configs:
        recipe, cfg = resolve_config(config)
        assert recipe.name == name and config_from_dict(to_dict(cfg))[1] == cfg  # what a run saves reads back


def test_every_split_builds_and_the_loss_is_finite_with_gradients(tiny):
    recipe, cfg = tiny
    torch.manual_seed(0)
    model = recipe.build_model(cfg)
    for split in recipe.splits:
        batch = _batch(recipe, cfg, split)
        loss, logs = recipe.training_loss(model, batch)
        assert loss.dim() == 0 and torch.isfinite(loss) and all(math.isfinite(v) for v in logs.values())
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    with pytest.raises(UsageError, match=f"recipe '{recipe.name}' has no split 'dev'"):  # the one split check
        recipe.build_dataset(cfg, "dev")


def test_validation_step_agrees_with_training_loss_and_predict(tiny):
    recipe, cfg = tiny
    torch.manual_seed(0)
    model = recipe.build_model(cfg).eval()
    batch = _batch(recipe, cfg, "validation")
    with torch.no_grad():
        loss, predictions, targets = recipe.validation_step(model, batch)
        torch.testing.assert_close(loss, recipe.training_loss(model, batch)[0])
        evaluator = recipe.build_evaluator(cfg)
        evaluator.update(predictions, targets)
        reference = recipe.build_evaluator(cfg)
        reference.update(*recipe.predict(model, batch))
    assert evaluator.compute() == reference.compute()


def test_the_evaluator_is_registered_and_declares_every_metric_direction(tiny):
    recipe, cfg = tiny
    torch.manual_seed(0)
    evaluator = recipe.evaluate(recipe.build_model(cfg), cfg, "test", torch.device("cpu"), max_batches=1)
    assert type(evaluator) is EVALUATORS.get(recipe.evaluator)  # what `lavo-zoo list recipes` names
    results = evaluator.results()
    assert results and all(isinstance(m["higher_is_better"], bool) for m in results.values())
    assert evaluator.num_samples > 0


def test_one_trainer_step_and_the_checkpoint_round_trip(tiny, tmp_path):
    recipe, cfg = tiny
    metrics = Trainer(recipe, cfg, tmp_path / "run", device="cpu").fit()
    assert "loss" in metrics and math.isfinite(metrics["loss"])
    ckpt = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert ckpt is not None and ckpt.name == "step-1"
    torch.manual_seed(0)
    _, loaded_cfg, model, meta = load_model(ckpt, "cpu")
    assert to_dict(loaded_cfg) == to_dict(cfg) and meta["step"] == 1
    batch = _batch(recipe, cfg, "test")
    torch.manual_seed(0)
    first = recipe.predict(model, batch)[0]
    _, _, again, _ = load_model(ckpt, "cpu")
    torch.manual_seed(0)
    second = recipe.predict(again, batch)[0]
    assert str(first) == str(second)  # the same weights give the same predictions (tensors or mappings of them)
    if recipe.predictor is None:  # test toys; every built-in recipe has one (test_every_builtin_recipe_has_...)
        with pytest.raises(UsageError, match="no predictor"):
            lavo_zoo.load(tmp_path / "run", device="cpu")
        return
    predictor = lavo_zoo.load(tmp_path / "run", device="cpu")  # a run directory: its newest checkpoint
    assert type(predictor) is recipe.predictor and isinstance(predictor, Predictor)
    assert to_dict(predictor.cfg) == to_dict(cfg) and not predictor.model.training
    with pytest.raises(UsageError, match="needs a 'no-such-recipe' one"):
        load_predictor(ckpt, "cpu", recipe="no-such-recipe")


KIT_OVERRIDES = ["train.batch_size=2", "train.grad_accum=1", "train.max_epochs=null", "eval.batch_size=2"]
BUILT_IN = [n for n in NAMES if type(get_recipe(n)).__module__.startswith("lavo_zoo.recipes.")]  # not test toys
KIT = [check for name in BUILT_IN for check in recipe_checks(get_recipe(name).tiny_config, KIT_OVERRIDES,
                                                             max_eval_batches=1)]


@pytest.mark.parametrize("check", KIT, ids=repr)
def test_the_public_recipe_kit(check, tmp_path):
    check(tmp_path)


UNRANGED = {"pad_id", "never_generate", "feature_mean", "feature_std",  # resolved from the data, not set by hand
            "scaler_mean", "scaler_std",
            "length_penalty"}  # any real number (fairseq: < 1 favours short summaries, > 1 long ones)


def _numeric_fields(cls: type, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, type hint) of every int / float field of a config dataclass and its nested sections."""
    import dataclasses
    import typing

    out = []
    for name, hint in typing.get_type_hints(cls, include_extras=True).items():
        if name not in {f.name for f in fields(cls)}:
            continue
        base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
        args = [a for a in typing.get_args(base) if a is not type(None)]
        if dataclasses.is_dataclass(base):
            out += _numeric_fields(base, f"{prefix}{name}.")
        elif base in (int, float) or (args and all(a in (int, float) for a in args)):
            out.append((f"{prefix}{name}", hint))
    return out


@pytest.mark.parametrize("name", BUILTIN)
def test_every_size_and_rate_of_the_schema_declares_its_range(name):
    """A negative or zero size is a config error naming the key, never a crash deep in the model."""
    import typing

    from lavo_zoo.config import Range

    unranged = [key for key, hint in _numeric_fields(get_recipe(name).config_class)
                if key.rsplit(".", 1)[-1] not in UNRANGED
                and not (typing.get_origin(hint) is typing.Annotated
                         and any(isinstance(a, Range) for a in hint.__metadata__))]
    assert not unranged, f"{name}: numeric config keys without a declared range: {unranged}"
