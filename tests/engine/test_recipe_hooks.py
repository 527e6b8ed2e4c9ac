"""Recipe hooks mounted by the CLI (commands, score commands, data writers, resolve) and the override examples the
README and the --help texts show."""
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
import torch

from lavo_zoo.cli import cli, main, recipe_commands
from lavo_zoo.config import ConfigError, available_configs, resolve_config

REPO = Path(__file__).resolve().parents[2]


def test_help_lists_recipe_commands_with_their_recipe_without_importing_torch():
    code = ("import sys; from lavo_zoo.cli import main; rc = main(['--help']); "
            "assert 'torch' not in sys.modules and 'pandas' not in sys.modules, 'heavy import'; sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name, recipe in [("generate", "lm"), ("throughput", "lm"), ("forecast-plot", "time_series"),
                         ("repeats", "time_series")]:
        assert re.search(rf"^\s+{name}\s+\[{recipe}\] \S", out, re.MULTILINE), out
    assert recipe_commands("score_commands")["forecast"][0] == "time_series"


def test_recipe_hooks_read_from_source_match_the_classes():
    from lavo_zoo.cli import recipe_hooks
    from lavo_zoo.recipes import RECIPES

    for name, hooks in recipe_hooks().items():
        cls = RECIPES.get(name)
        assert hooks == {"commands": cls.commands, "score_commands": cls.score_commands}


def test_data_lm_writes_the_pg19_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path / "cache"))
    from lavo_zoo.recipes.lm.data import builtin_corpus, split_files

    assert main(["data", "lm", "--out", str(tmp_path / "pg19"), "--size", "40"]) == 0
    written = sorted(p.relative_to(tmp_path / "pg19") for p in (tmp_path / "pg19").rglob("*.txt"))
    full = builtin_corpus()
    expected = sorted(p.relative_to(full) for p in full.rglob("*.txt"))
    assert len(written) == 40 and set(written) <= set(expected)
    book = split_files(tmp_path / "pg19", "train")[0]
    assert book.read_text() == (full / "train" / book.name).read_text()
    assert main(["data", "lm/nope", "--out", str(tmp_path / "x")]) == 2


def test_data_time_series_writes_the_builtin_table_as_an_ett_csv(tmp_path):
    from lavo_zoo.recipes.time_series.data import DataConfig, prepare

    assert main(["data", "time_series/etth1", "--out", str(tmp_path), "--size", "600"]) == 0
    csv = tmp_path / "ETTh1.csv"
    assert csv.read_text().splitlines()[0] == "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT"
    kw = {"split": "ratio", "seq_len": 24, "label_len": 12, "pred_len": 12}
    from_csv, builtin = prepare(DataConfig(path=str(csv), **kw)), prepare(DataConfig(builtin_rows=600, **kw))
    np.testing.assert_allclose(from_csv.values, builtin.values, atol=1e-4)  # %.6g in the CSV
    np.testing.assert_array_equal(from_csv.stamps, builtin.stamps)


def _informer_metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Informer's utils/metrics.py, verbatim in numpy."""
    mse, mae = np.mean((pred - true) ** 2), np.mean(np.abs(pred - true))
    return {"mse": mse, "mae": mae, "rmse": np.sqrt(mse), "mape": np.mean(np.abs((pred - true) / true)),
            "mspe": np.mean(np.square((pred - true) / true))}


def test_score_forecast_reads_npy_and_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    true = rng.normal(3, 1, (5, 4, 2))
    pred = true + rng.normal(0, 0.3, true.shape)
    np.save(tmp_path / "p.npy", pred)
    np.save(tmp_path / "t.npy", true)
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.npy"), "--true", str(tmp_path / "t.npy"),
                 "--out", str(tmp_path / "s.json")]) == 0
    scores = json.loads((tmp_path / "s.json").read_text())["metrics"]
    for name, value in _informer_metrics(pred, true).items():
        assert scores[name]["value"] == pytest.approx(value, rel=1e-12)
    header = "date,a,b\n"
    for name, arr in (("p.csv", pred[:, 0]), ("t.csv", true[:, 0])):
        (tmp_path / name).write_text(header + "".join(f"2020-01-0{i + 1},{float(x)!r},{float(y)!r}\n" for i, (x, y) in
                                                      enumerate(arr)))
    capsys.readouterr()
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.csv"), "--true", str(tmp_path / "t.csv")]) == 0
    mse = float(re.search(r"^mse\s+(\S+)", capsys.readouterr().out, re.MULTILINE).group(1))
    assert mse == pytest.approx(_informer_metrics(pred[:, 0], true[:, 0])["mse"], rel=1e-5)
    assert main(["score", "forecast", "--pred", str(tmp_path / "p.npy"), "--true", str(tmp_path / "t.csv")]) == 1
    assert "must match" in capsys.readouterr().err


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
_PLACEHOLDER = re.compile(r"=[A-Z_]+\.?$")  # key=N, data.path=FILE: a placeholder, not an example


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
    """Each example applies to the config its line names, else to at least one recipe's tiny config."""
    overrides = [o.replace("$", "") for o in overrides if "${" not in o]
    candidates = [config] if config else ["lm/tiny-lavo", "time_series/tiny-lavo"]
    errors = []
    for name in candidates:
        try:
            resolve_config(name, overrides)
            return
        except ConfigError as e:
            errors.append(str(e))
    pytest.fail(f"{where}: {' '.join(overrides)} does not validate: {errors}")


def test_builtin_dataset_is_written_once_per_fingerprint(tmp_path):
    from lavo_zoo.engine.env import builtin_dataset

    calls = []

    def write(out):
        calls.append(out)
        (out / "data.txt").write_text(str(len(calls)))

    first = builtin_dataset("toy", "set", {"rows": 3}, write, tmp_path)
    again = builtin_dataset("toy", "set", {"rows": 3}, write, tmp_path)
    other = builtin_dataset("toy", "set", {"rows": 4}, write, tmp_path)
    assert first == again != other and len(calls) == 2
    assert (first / "data.txt").read_text() == "1" and (other / "data.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, other.name])  # no temporary left
