"""Recipe hooks as the CLI uses them (each recipe's cli.py COMMANDS, the built-in data `lavo-zoo data` writes and
the cache a config without data.path reads, resolve) and the override examples the README and the --help texts
show."""
import re
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
import torch

from lavo_zoo.cli import cli, main, recipe_commands
from lavo_zoo.config import ConfigError
from lavo_zoo.engine.recipe import RECIPES, available_configs, get_recipe, resolve_config

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_recipe_commands_with_their_recipe_without_importing_torch():
    code = ("import sys; from lavo_zoo.cli import main; rc = main(['--help']); "
            "assert 'torch' not in sys.modules and 'pandas' not in sys.modules, 'heavy import'; sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name, recipe in [("generate", "lm"), ("forecast-plot", "time_series"), ("complete", "point_cloud"),
                         ("summarize", "summarization"), ("synthesize", "tts")]:
        assert re.search(rf"^\s+{name}\s+\[{recipe}\] \S", out, re.MULTILINE), out
    assert recipe_commands()["generate"][0] == "lm"


def test_every_recipe_exports_its_commands_from_cli_py():
    """Each built-in recipe's cli.py exports COMMANDS, click commands whose --help ends with examples."""
    for name in [n for n in RECIPES.names() if (REPO / "recipes" / n).is_dir()]:
        module = __import__(f"lavo_zoo.recipes.{name}.cli", fromlist=["COMMANDS"])
        assert isinstance(module.COMMANDS, list), name
        for command in module.COMMANDS:
            assert isinstance(command, click.Command) and recipe_commands()[command.name] == (name, command)


def test_builtin_data_is_generated_once_into_the_cache_and_written_by_data(tmp_path, monkeypatch):
    """One hook, one cache: a config without data.path reads what write_builtin generated once (keyed by
    builtin_key), and `lavo-zoo data` writes the same files."""
    from lavo_zoo.recipes.lra.data import DataConfig

    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path / "cache"))
    recipe = get_recipe("lra")
    small = DataConfig(task="listops", builtin_size=16, builtin_min_length=10, builtin_max_length=30)
    first = recipe.data_path(small)
    stamp = (first / "basic_train.tsv").stat().st_mtime_ns
    assert recipe.data_path(small) == first and (first / "basic_train.tsv").stat().st_mtime_ns == stamp
    other = recipe.data_path(DataConfig(task="listops", builtin_size=17, builtin_min_length=10,
                                        builtin_max_length=30))
    assert other != first and first.parent == other.parent == tmp_path / "cache" / "lra" / "builtin"
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]

def test_data_lm_writes_the_pg19_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path / "cache"))
    from lavo_zoo.recipes.lm.data import DataConfig, split_files

    assert main(["data", "lm", "--out", str(tmp_path / "pg19"), "--size", "40"]) == 0
    written = sorted(p.relative_to(tmp_path / "pg19") for p in (tmp_path / "pg19").rglob("*.txt"))
    full = get_recipe("lm").data_path(DataConfig())
    expected = sorted(p.relative_to(full) for p in full.rglob("*.txt"))
    assert len(written) == 40 and set(written) <= set(expected)
    book = split_files(tmp_path / "pg19", "train")[0]
    assert book.read_text() == (full / "train" / book.name).read_text()
    assert main(["data", "lm/nope", "--out", str(tmp_path / "x")]) == 2


def test_data_time_series_writes_the_builtin_table_as_an_ett_csv(tmp_path):
    from lavo_zoo.recipes.time_series.data import DataConfig, prepare

    recipe = get_recipe("time_series")

    assert main(["data", "time_series/etth1", "--out", str(tmp_path), "--size", "600"]) == 0
    csv = tmp_path / "ETTh1.csv"
    assert csv.read_text().splitlines()[0] == "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT"
    kw = {"split": "ratio", "seq_len": 24, "label_len": 12, "pred_len": 12}
    from_csv, builtin = prepare(DataConfig(path=str(csv), **kw), csv), recipe.series(DataConfig(builtin_size=600, **kw))
    np.testing.assert_allclose(from_csv.values, builtin.values, atol=1e-4)  # %.6g in the CSV
    np.testing.assert_array_equal(from_csv.stamps, builtin.stamps)


def _informer_metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Informer's utils/metrics.py, verbatim in numpy."""
    mse, mae = np.mean((pred - true) ** 2), np.mean(np.abs(pred - true))
    return {"mse": mse, "mae": mae, "rmse": np.sqrt(mse), "mape": np.mean(np.abs((pred - true) / true)),
            "mspe": np.mean(np.square((pred - true) / true))}


def test_time_series_model_is_built_from_the_checkpoint_without_the_csv(tmp_path):
    from lavo_zoo.engine.checkpoint import load_model, save_checkpoint

    assert main(["data", "time_series/etth1", "--out", str(tmp_path), "--size", "500"]) == 0
    csv = tmp_path / "ETTh1.csv"
    recipe, cfg = resolve_config("time_series/tiny-lavo", [f"data.path={csv}", "data.split=ratio", "data.features=MS",
                                                            "data.seq_len=24", "data.label_len=12", "data.pred_len=6"])
    cfg = recipe.resolve(cfg)
    assert (cfg.model.channels, cfg.model.out_channels, cfg.model.time_features) == (7, 1, 4)
    model = recipe.build_model(cfg)
    ckpt = save_checkpoint(tmp_path / "ckpt", 1, model, cfg, "time_series")
    csv.unlink()
    _, loaded_cfg, loaded, _ = load_model(ckpt, "cpu")
    assert loaded_cfg.model == cfg.model
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        torch.testing.assert_close(a, b)


# ------------------------------------------------------------------------------------ override examples
_OVERRIDE = re.compile(r"(?<![\w.$/-])((?:train|model|data|eval)(?:\.\w+)+=(?:\[[^\]]*\]|[^\s`'\"),;]+))")
_PLACEHOLDER = re.compile(r"=(?:[A-Z_]+\.?|.*\$.*)$")  # key=N, data.path=FILE: a placeholder, not an example;
# train.seed=$s: a shell variable (tests/test_docs.py runs those blocks as bash expands them)


def _help_texts() -> str:
    def walk(group: click.Group, ctx: click.Context):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            sub = click.Context(cmd, parent=ctx, info_name=name)
            yield cmd.get_help(sub)
            if isinstance(cmd, click.Group):
                yield from walk(cmd, sub)
    return "\n".join(walk(cli, click.Context(cli, info_name="lavo-zoo")))


def _snippets(text: str) -> list[str]:
    """A markdown text's examples: each line of a fenced block (continuations joined) and each inline code span."""
    out, prose = [], []
    for i, part in enumerate(re.split(r"^```.*$", text, flags=re.MULTILINE)):
        (out.extend(part.replace("\\\n", " ").splitlines()) if i % 2 else prose.append(part))
    out += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return out


def _examples() -> list[tuple[str, str | None, list[str]]]:
    """(where, config named in the same example or None, overrides) for every example that shows overrides."""
    sources = {p.relative_to(REPO).as_posix(): _snippets(p.read_text())
               for p in [REPO / "README.md", *sorted(REPO.glob("recipes/*/README.md"))]}
    sources["--help"] = _help_texts().replace("\\\n", " ").splitlines()
    configs = set(available_configs())
    found = []
    for where, snippets in sources.items():
        for snippet in snippets:
            overrides = [o for o in _OVERRIDE.findall(snippet) if not _PLACEHOLDER.search(o)]
            if not overrides:
                continue
            named = [w for w in re.findall(r"[\w.-]+/[\w.$-]+", snippet) if w in configs]
            found.append((where, named[0] if named else None, overrides))
    return found


EXAMPLES = _examples()


def test_the_documentation_shows_override_examples():
    assert len(EXAMPLES) >= 10
    shown = {o for _, _, overrides in EXAMPLES for o in overrides}
    assert {"model.attention.name=sdpa", "model.attention.cross.name=performer"} <= shown


@pytest.mark.parametrize("where,config,overrides", EXAMPLES, ids=[f"{w}:{' '.join(o)}" for w, _, o in EXAMPLES])
def test_override_examples_in_the_readme_and_help_validate(where, config, overrides, tmp_path):
    """Each example applies to the config its line names, else to at least one recipe's tiny config (an example on a
    checkpoint, e.g. `lavo-zoo eval CKPT eval.beam=4`, names no config)."""
    overrides = [o.replace("$", "") for o in overrides if "${" not in o]
    candidates = [config] if config else [get_recipe(name).tiny_config for name in RECIPES.names()]
    errors = []
    for name in candidates:
        try:
            resolve_config(name, overrides)
            return
        except ConfigError as e:
            errors.append(str(e))
    pytest.fail(f"{where}: {' '.join(overrides)} does not validate: {errors}")


def test_builtin_dataset_is_written_once_per_key(tmp_path):
    from lavo_zoo.engine.env import builtin_dataset

    calls = []

    def write(out):
        calls.append(out)
        (out / "data.txt").write_text(str(len(calls)))
        return out / "data.txt"

    first = builtin_dataset(tmp_path, "set", {"rows": 3}, write)
    again = builtin_dataset(tmp_path, "set", {"rows": 3}, write)
    other = builtin_dataset(tmp_path, "set", {"rows": 4}, write)
    assert first == again != other and len(calls) == 2 and first.name == "data.txt"
    assert first.read_text() == "1" and other.read_text() == "2"
    folders = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert folders == sorted([first.parent.name, other.parent.name])  # no temporary folder left


def test_builtin_dataset_asked_for_at_once_is_written_once(tmp_path):
    """Two processes (threads here: the lock is a file lock) asking for the same dataset at once: one writes it, the
    other waits and reads it; nobody replaces a dataset that another one is reading."""
    import threading
    import time

    from lavo_zoo.engine.env import builtin_dataset

    calls, paths = [], []

    def write(out):
        calls.append(out)
        time.sleep(0.3)  # long enough for the other one to ask meanwhile
        (out / "data.txt").write_text("complete")
        return out / "data.txt"

    threads = [threading.Thread(target=lambda: paths.append(builtin_dataset(tmp_path, "set", {"rows": 3}, write)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(paths) == 2 and paths[0] == paths[1] and paths[0].read_text() == "complete"


def test_data_never_replaces_a_users_file_and_leaves_nothing_partial(tmp_path, capsys, monkeypatch):
    """`lavo-zoo data` refuses, before anything moves, to replace any existing file (naming it) unless --overwrite;
    a failure while generating (a full disk) leaves the folder as it was."""
    out = tmp_path / "ETT-small"
    out.mkdir()
    (out / "ETTh1.csv").write_text("my own data\n")
    assert main(["data", "time_series/etth1", "--out", str(out), "--size", "300"]) == 2
    assert "ETTh1.csv" in capsys.readouterr().err and (out / "ETTh1.csv").read_text() == "my own data\n"
    assert main(["data", "time_series/etth1", "--out", str(out), "--size", "300", "--overwrite"]) == 0
    assert (out / "ETTh1.csv").read_text().startswith("date,")
    recipe = get_recipe("time_series")

    def full_disk(out_dir, data):
        (out_dir / "ETTm1.csv").write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(recipe), "write_builtin", lambda self, o, d: full_disk(o, d))
    with pytest.raises(OSError):
        recipe.write_data(out, "ettm1", 300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ETT-small"]  # no temporary folder left beside it
    assert sorted(p.name for p in out.iterdir()) == ["ETTh1.csv"]      # no partial ETTm1.csv
