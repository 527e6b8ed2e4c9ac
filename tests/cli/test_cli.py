"""The command line: --help everywhere ends with examples, `list` output, exit codes and messages."""
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from lavo_zoo.cli import cli, main, recipe_commands
from lavo_zoo.engine.recipe import RECIPES

REPO = Path(__file__).resolve().parents[2]


def _all_commands(group: click.Group, ctx: click.Context, prefix=()):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield prefix + (name,), cmd
        if isinstance(cmd, click.Group):
            yield from _all_commands(cmd, click.Context(cmd, parent=ctx, info_name=name), prefix + (name,))


COMMANDS = [path for path, _ in _all_commands(cli, click.Context(cli, info_name="lavo-zoo"))]


@pytest.mark.parametrize("path", [()] + COMMANDS, ids=lambda p: " ".join(p) or "lavo-zoo")
def test_every_help_ends_with_examples(path, capsys):
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples:" in out, f"`lavo-zoo {' '.join(path)} --help` has no worked examples"
    examples = out.split("Examples:")[-1]
    assert "lavo-zoo" in examples and "lavo-zoo" in out.rstrip().splitlines()[-1]  # the help ends with them


def test_list_json_and_glob(capsys):
    assert main(["list", "recipes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"name": "toy"} .items() <= next(r for r in rows if r["name"] == "toy").items()
    assert main(["list", "evaluators", "mean_*", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["mean_loss"] and rows[0]["metrics"] == ["loss"]
    assert main(["list", "attentions", "--json"]) == 0
    for row in json.loads(capsys.readouterr().out):
        assert set(row["patterns"]) <= {"causal", "noncausal", "cross"} and isinstance(row["streaming"], bool)


def test_list_configs_say_per_layer_what_runs_and_what_each_layer_keeps(capsys):
    assert main(["list", "configs", "lm/tiny-hybrid-lavo-sdpa", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["attention"] == "hybrid:lavo*3+sdpa"
    assert [(g["key"], g["layers"], g["attention"], g["state"]) for g in row["layers"]] == [
        ("model.attention_schedule", [0, 1, 2], "lavo",
         "2 (w-1) D window keys/values + 2 D feature sums (memory=binding: 2 r D, r x d per head)"),
        ("model.attention_schedule", [3], "sdpa", "2 T D (KV cache, grows with T)")]
    assert row["layers"][0]["options"]["num_bases"] == 32
    assert main(["list", "configs", "summarization/tiny-sdpa", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["attention"] == "encoder_self=sdpa decoder_self=sdpa cross=sdpa" and len(row["layers"]) == 3
    assert main(["list", "configs", "lm/tiny-*"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"lm/tiny-hybrid-lavo-sdpa +attention=hybrid:lavo\*3\+sdpa\n +layers 0-2 +lavo num_bases=32 "
                     r"window_size=16 +state: 2 \(w-1\) D window keys/values \+ 2 D feature sums "
                     r"\(memory=binding: 2 r D, r x d per head\)\n +layer 3 +sdpa +"
                     r"state: 2 T D \(KV cache, grows with T\)\n", out), out
    assert re.search(r"lm/tiny-lavo +attention=lavo\n  lm/", out)  # one attention in every layer: one line


def test_list_table(capsys):
    assert main(["list", "evaluators"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evaluators (") and "mean_loss" in out


@pytest.mark.parametrize("args, code, message", [
    (["train", "no/such-config"], 2, "no config named 'no/such-config'"),
    (["list", "widgets"], 2, "Invalid value"),
    (["train"], 2, "Missing argument"),
    (["eval", "/nonexistent/dir"], 2, "is neither a directory nor"),
    (["train", "tests/engine/data/toy.yaml", "train.optimizer=sgd"], 2, "must be one of 'adamw', 'adam'"),
    (["train", "tests/engine/data/toy.yaml", "--device", "cuda:7"], 2, "no CUDA GPU"),
    (["nosuchcommand"], 2, "No such command"),
])
def test_usage_errors_exit_2_without_traceback(args, code, message, capsys):
    assert main(args) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_nan_loss_exits_1_and_debug_shows_traceback(tmp_path, capsys):
    args = ["train", "tests/engine/data/toy.yaml", "data.nan_after=3", "--out", str(tmp_path / "r")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "training loss is nan at step 1" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "checkpoints").exists()
    assert main(["--debug", *args[:-1], str(tmp_path / "r2")]) == 1  # (r holds the first attempt's config.yaml)
    assert "Traceback" in capsys.readouterr().err


def test_existing_run_is_not_overwritten(tmp_path, capsys):
    args = ["train", "tests/engine/data/toy.yaml", "train.max_steps=2", "train.save_every=2", "train.eval_every=0",
            "--out", str(tmp_path / "r")]
    assert main(args) == 0
    before = (tmp_path / "r" / "checkpoints" / "step-2" / "model.safetensors").read_bytes()
    assert main(args) == 2
    assert "--resume auto" in capsys.readouterr().err
    assert (tmp_path / "r" / "checkpoints" / "step-2" / "model.safetensors").read_bytes() == before


def test_non_terminal_progress_is_plain_lines(tmp_path, capsys):
    args = ["train", "tests/engine/data/toy.yaml", "train.max_steps=4", "train.log_every=2", "train.eval_every=0",
            "--out", str(tmp_path / "r")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "step 2/4 loss=" in err and "step 4/4 loss=" in err and "\r" not in err


def test_tensorboard_logging_writes_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    args = ["train", "tests/engine/data/toy.yaml", "train.max_steps=2", "train.log_every=1", "train.eval_every=0",
            "train.tensorboard=true", "--out", str(out)]
    assert main(args) == 0
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_validation_per_epoch(tmp_path):
    """40 samples, batch 4, 2 micro-batches a step: 5 steps per epoch, so validation at 5, 10 and the end."""
    out = tmp_path / "r"
    args = ["train", "tests/engine/data/toy.yaml", "train.eval_every=0", "train.eval_per_epoch=true",
            "train.save_best=false", "--out", str(out)]
    assert main(args) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "validation"] == [5, 10, 12]
    assert not (out / "checkpoints" / "best").exists()


def test_refused_option_value_is_a_usage_error_and_a_value_error(tmp_path, capsys):
    from lavo_zoo.attention import build_attention
    with pytest.raises(ValueError, match="num_bases"):
        build_attention("lavo", embed_dim=32, num_heads=4, num_bases=9)
    args = ["train", "lm/tiny-lavo", "model.attention.num_bases=999", "--out", str(tmp_path / "r")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "num_bases (999)" in err and "Traceback" not in err


# --------------------------------------------------------------------------------------------- recipe commands
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
