"""Model cards: written by ``lavo-zoo export`` inside the archive and beside it; Hugging Face metadata that reports
the results JSON exactly, the config verbatim, the provenance meta.json records; read back by ``lavo-zoo info``."""
from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from lavo_zoo.checkpoints.archive import read_card
from lavo_zoo.checkpoints.cache import RECORD, entry_dir, write_json_atomic
from lavo_zoo.checkpoints.card import attention_sites
from lavo_zoo.checkpoints.index import validate_entry
from lavo_zoo.cli import main
from lavo_zoo.engine.evaluate import pin_results
from lavo_zoo.engine.recipe import get_recipe
from tests.checkpoints.helpers import make_checkpoint, sha256, split_card, tar_with

LM_CONFIG = """recipe: lm
model:
  num_layers: 1
  attention:
    name: lavo
    num_bases: 32
    window_size: 16
data:
  path: /data/pg19/
  block_size: 512
train:
  seed: 1234
"""
SUMMARIZATION_CONFIG = """recipe: summarization
model:
  attention:
    encoder_self: {name: lavo, num_bases: 32, window_size: 16}
    decoder_self: {name: sdpa}
    cross: {name: sdpa}
"""
MACHINE = {"cpu": "Test CPU 9000", "isa": ["avx2"], "logical_cores": 16, "torch_threads": 8, "torch": "2.11.0",
           "python": "3.11.7", "gpu": "NVIDIA H100 80GB HBM3"}
TRAIN_COMMAND = "lavo-zoo train lm/pg19-lavo data.path=/data/pg19 --out runs/pg19"
EVAL_COMMAND = "lavo-zoo eval runs/pg19/checkpoints/best --split test --out test.json"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def release_checkpoint(path: Path, config: str = LM_CONFIG) -> Path:
    """A checkpoint whose meta.json records what training records for a card (command, machine, seed)."""
    make_checkpoint(path)
    (path / "config.yaml").write_text(config)
    meta = json.loads((path / "meta.json").read_text())
    meta.update(recipe=yaml.safe_load(config)["recipe"], command=TRAIN_COMMAND, machine=MACHINE, seed=1234,
                num_parameters=12, created="2025-01-02T03:04:05+0000", git_revision="0123abcd")
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def results_file(path: Path, checkpoint: Path, **changes: object) -> Path:
    meta = json.loads((checkpoint / "meta.json").read_text())
    results = {"recipe": meta["recipe"], "checkpoint": str(checkpoint), "checkpoint_sha256": meta["weights_sha256"],
               "split": "test", "num_samples": 42, "device": "cuda",
               "metrics": {"ppl@512": {"value": 38.123456789, "higher_is_better": False},
                           "ppl@4096": {"value": 1234.5, "higher_is_better": False},
                           "ppl@stream": {"value": 37, "higher_is_better": False}},
               "command": EVAL_COMMAND, **changes}
    path.write_text(json.dumps(pin_results(results)))  # pinned, as `lavo-zoo eval` writes it
    return path


def fenced_blocks(body: str, language: str) -> list[str]:
    return re.findall(rf"^(`{{3,}}){language}\n(.*?)\n\1$", body, re.MULTILINE | re.DOTALL)


def test_card_reports_task_dataset_split_every_metric_and_the_config_verbatim(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    results = results_file(tmp_path / "test.json", checkpoint)
    out = tmp_path / "dist" / "lm-pg19-lavo-v1.tar.gz"
    code, text, err = run(capsys, "export", str(checkpoint), str(out), "--name", "lm/pg19-lavo@v1",
                          "--results", str(results))
    assert code == 0, err
    beside = tmp_path / "dist" / "lm-pg19-lavo-v1.README.md"
    assert f"its model card {beside}" in text
    card = beside.read_text()
    with tarfile.open(out) as tar:
        assert tar.getnames()[0] == "lm-pg19-lavo-v1/README.md", "first, so that reading it stops early"
        assert tar.extractfile("lm-pg19-lavo-v1/README.md").read().decode() == card
    assert read_card(out) == card

    front, body = split_card(card)
    assert card.startswith("---\n") and front == yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "lavo-zoo" and front["license"] == "apache-2.0"
    assert {"lavo", "lavo-zoo", "lm", "text-generation"} <= set(front["tags"])
    [model] = front["model-index"]
    [result] = model["results"]
    assert model["name"] == "lm/pg19-lavo@v1"
    assert result["task"] == {"type": "text-generation", "name": "Language modelling"}
    assert result["dataset"] == {"type": "pg19", "name": "pg19", "split": "test"}
    scored = json.loads(results.read_text())["metrics"]
    assert {m["name"]: m["value"] for m in result["metrics"]} == {k: v["value"] for k, v in scored.items()}
    assert [m["type"] for m in result["metrics"]] == list(scored)

    [(_, config_block)] = fenced_blocks(body, "yaml")
    assert yaml.safe_load(config_block) == yaml.safe_load((checkpoint / "config.yaml").read_text())
    assert [block for _, block in fenced_blocks(body, "sh")][:2] == [TRAIN_COMMAND, EVAL_COMMAND]
    for fact in ("git commit `0123abcd`", "GPU NVIDIA H100 80GB HBM3", "CPU Test CPU 9000 (16 logical cores)",
                 "8 torch thread(s)", "torch 2.11.0", "seed: 1234", "Apache-2.0", "12 parameters",
                 # the config predates LAVO's reading options: the card reports the reading it was trained with
                 ("| `model.attention` | `lavo` | combine=half, read_temperature=0.0, memory_norm=mean, num_bases=32, "
                  "window_size=16 |"), "| ppl@512 | 38.1235 | lower |",
                 "Scored on the `test` split (42 samples), on cuda", get_recipe("lm").limits,
                 "comparable only with models trained and scored on the same data"):
        assert fact in body, fact


def test_card_of_an_encoder_decoder_lists_every_site_and_without_results_has_no_model_index(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best", SUMMARIZATION_CONFIG)
    out = tmp_path / "summ.tar.gz"
    code, _, err = run(capsys, "export", str(checkpoint), str(out), "--license", "CC-BY-NC-4.0")
    assert code == 0, err
    front, body = split_card(read_card(out))
    assert "model-index" not in front, "no evaluation given: nothing to report as scored"
    assert front["license"] == "cc-by-nc-4.0" and "summarization" in front["tags"] and "sdpa" in front["tags"]
    assert "No evaluation results were given" in body and "val/perplexity=41.5" in body
    for site in ("encoder_self", "decoder_self", "cross"):
        assert f"| `model.attention.{site}` |" in body
    assert "trained on built-in stdlib" in body and get_recipe("summarization").limits in body


def test_a_card_names_only_the_data_the_checkpoint_was_trained_on(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A recipe's description names no dataset (the paper's is not the one every checkpoint was trained on): the
    card of a model trained on the built-in corpus says so and names no other corpus."""
    datasets = ("PG-19", "LJSpeech", "Multi-News", "PCN", "ETT", "Weather")
    for name in ("lm", "lra", "point_cloud", "recall", "summarization", "time_series", "tts"):
        assert not any(d in get_recipe(name).description for d in datasets), name
    checkpoint = release_checkpoint(tmp_path / "best", LM_CONFIG.replace("  path: /data/pg19/\n", ""))
    code, _, err = run(capsys, "export", str(checkpoint), str(tmp_path / "lm.tar.gz"))
    assert code == 0, err
    _, body = split_card(read_card(tmp_path / "lm.tar.gz"))
    summary = body.split("\n\n")[1]
    assert "trained on built-in stdlib" in summary and "PG-19" not in summary and "pg19" not in summary


def test_unknown_licence_and_missing_provenance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = make_checkpoint(tmp_path / "old")  # written before meta.json recorded command, machine and seed
    out = tmp_path / "old.tar.gz"
    assert run(capsys, "export", str(checkpoint), str(out), "--license", "My Own Licence 1.0")[0] == 0
    front, body = split_card(read_card(out))
    assert front["license"] == "other" and front["license_name"] == "my-own-licence-1.0"
    assert "Trained with:\n\n(not recorded" in body and "hardware: not recorded" in body
    assert "seed: not recorded" in body


SCORE_OUTPUT = {"metric": "perplexity", "pred": "p.txt", "ref": "r.txt", "num_samples": 3,
                "metrics": {"perplexity": {"value": 12.0, "higher_is_better": False}}}


@pytest.mark.parametrize("changes, message", [
    ({"checkpoint_sha256": "f" * 64}, "scored other weights"),
    ({"recipe": "tts"}, "scored a 'tts' checkpoint"),
    ({"metrics": [1]}, "'metrics' a non-empty mapping"),
    ({"metrics": {}}, "'metrics' a non-empty mapping"),
    ({"checkpoint_sha256": None}, "lacks checkpoint_sha256"),
    ({"recipe": None}, "lacks recipe"),
    ({"metrics": {"ppl": {"value": float("nan"), "higher_is_better": False}}}, "metric 'ppl' is nan"),
    ({"metrics": {"ppl": {"value": float("inf"), "higher_is_better": False}}}, "metric 'ppl' is inf"),
    ({"metrics": {"ppl": {"value": "38", "higher_is_better": False}}}, "metric 'ppl' is"),
    ({"metrics": {"ppl": 38.0}}, "metric 'ppl' is 38.0, not"),
    ({"metrics": {"ppl": {"value": 38.0}}}, "metric 'ppl' is"),
], ids=["other-weights", "other-recipe", "metrics-list", "no-metrics", "no-sha", "no-recipe", "nan", "inf",
        "string-value", "bare-number", "no-direction"])
def test_only_an_eval_of_these_weights_with_finite_metrics_is_published(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, message: str) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    results = results_file(tmp_path / "r.json", checkpoint, **changes)
    data = json.loads(results.read_text())
    results.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    code, out, err = run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"), "--results", str(results))
    assert code == 2 and message in err and "lavo-zoo eval" in err and "Traceback" not in err, err
    assert not (tmp_path / "x.tar.gz").exists() and not (tmp_path / "x.README.md").exists() and not out


@pytest.mark.parametrize("content, message", [
    (json.dumps(SCORE_OUTPUT), "is the output of `lavo-zoo score perplexity`"),
    ("{\"metrics\": {", "is not JSON"),
    ("[1, 2]", "it holds a list"),
    (b"\xff\xfe", "is not JSON"),
], ids=["score-output", "truncated", "list", "binary"])
def test_a_score_output_or_a_malformed_file_is_not_published(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             content: str | bytes, message: str) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    results = tmp_path / "r.json"
    results.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, _, err = run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"), "--results", str(results))
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "x.tar.gz").exists()


def test_the_name_must_be_of_the_checkpoints_domain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")  # an lm checkpoint
    code, _, err = run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"), "--name", "tts/x@v1")
    assert code == 2 and "names the domain 'tts', but this is a 'lm' checkpoint" in err
    assert not (tmp_path / "x.tar.gz").exists()
    assert run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"), "--name", "lm/x@v1")[0] == 0


def test_metrics_training_logged_as_non_finite_are_left_out_saying_so(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    meta = json.loads((checkpoint / "meta.json").read_text())
    meta["metrics"] = {"loss": 2.5, "mape": float("inf"), "val": {"ppl": float("nan"), "acc": 0.5}}
    (checkpoint / "meta.json").write_text(json.dumps(meta))
    code, out, err = run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"),
                         "--source", "https://example.org/x.tar.gz")
    assert code == 0 and "mape=inf" in err and "val/ppl=nan" in err
    entry = validate_entry(yaml.safe_load(out.split("published):")[1])[0], where="printed")
    assert entry.metrics == {"loss": 2.5, "val": {"acc": 0.5}}


def test_an_existing_card_beside_out_is_not_replaced_without_overwrite(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    (tmp_path / "x.README.md").write_text("my notes")
    code, _, err = run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"))
    assert code == 2 and "x.README.md" in err and "--overwrite" in err
    assert (tmp_path / "x.README.md").read_text() == "my notes" and not (tmp_path / "x.tar.gz").exists()
    code, _, err = run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"), "--overwrite")
    assert code == 2 and "is not a model card" in err  # --overwrite replaces an earlier card, never the user's file
    assert (tmp_path / "x.README.md").read_text() == "my notes" and not (tmp_path / "x.tar.gz").exists()
    for extra in ([], ["--overwrite"]):
        assert run(capsys, "export", str(checkpoint), str(tmp_path / "y.tar.gz"), *extra)[0] == 0
        assert (tmp_path / "y.README.md").read_text() == read_card(tmp_path / "y.tar.gz")


def test_a_card_in_the_checkpoint_folder_is_replaced_not_duplicated(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    (checkpoint / "README.md").write_text("the card of an earlier release")
    assert run(capsys, "export", str(checkpoint), str(tmp_path / "x.tar.gz"))[0] == 0
    with tarfile.open(tmp_path / "x.tar.gz") as tar:
        assert tar.getnames().count("x/README.md") == 1
    assert read_card(tmp_path / "x.tar.gz").startswith("---\nlibrary_name: lavo-zoo")


def test_card_of_a_hybrid_lists_each_sites_layers_and_what_each_keeps(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = SUMMARIZATION_CONFIG + "  attention_schedule:\n    decoder_self: [sdpa, {name: local, window_size: 4}]\n"
    checkpoint = release_checkpoint(tmp_path / "best", config)
    out = tmp_path / "summ.tar.gz"
    code, _, err = run(capsys, "export", str(checkpoint), str(out))
    assert code == 0, err
    front, body = split_card(read_card(out))
    assert {"lavo", "sdpa", "local"} <= set(front["tags"])
    rows = [line for line in body.splitlines() if line.startswith("| `model.attention")]
    assert rows[0].startswith("| `model.attention.encoder_self` | `lavo` |") and "| all 6 layers | none " in rows[0]
    assert rows[1].startswith("| `model.attention_schedule.decoder_self` | `sdpa` | - |")
    assert rows[1].endswith("| layers 0, 2, 4 | 2 T D (KV cache, grows with T) |")  # repeated over 6 layers
    assert rows[2].startswith("| `model.attention_schedule.decoder_self` | `local` | window_size=4 |")
    assert rows[2].endswith("| layers 1, 3, 5 | 2 (w-1) D last keys/values (+ 2 num_sinks D sink keys/values) |")
    assert rows[3].startswith("| `model.attention.cross` | `sdpa` |") and "cross cache" in rows[3]


def test_attention_sites() -> None:
    assert attention_sites("sdpa") == [("model.attention", "sdpa", {})]
    assert attention_sites({"name": "lavo", "window_size": 8}) == [("model.attention", "lavo", {"window_size": 8})]
    assert attention_sites({"encoder_self": "sdpa", "cross": {"name": "lavo", "num_bases": 4}}) == [
        ("model.attention.encoder_self", "sdpa", {}), ("model.attention.cross", "lavo", {"num_bases": 4})]
    assert attention_sites(None) == []


def test_dataset_names() -> None:
    from lavo_zoo.engine.configs import config_from_dict

    for data, recipe, expected in ((None, "lm", "built-in stdlib"), ({"path": "/d/pg19/"}, "lm", "pg19"),
                                   ({"task": "image"}, "lra", "built-in image"),
                                   ({"task": "image", "path": "/d/lra_release/cifar10"}, "lra", "cifar10 (image)"),
                                   (None, "time_series", "built-in ett")):
        found, cfg = config_from_dict({"recipe": recipe, **({"data": data} if data else {})})
        assert found.dataset_name(cfg.data) == expected


# ---------------------------------------------------------------------------------------------- reading cards
def fake_release(tmp_path: Path, archive: Path, monkeypatch: pytest.MonkeyPatch, cache: bool) -> dict:
    """An index entry for ``archive`` at a URL nothing serves, and the archive in the cache as a download leaves it."""
    source = f"https://example.invalid/{archive.name}"
    entry = {"name": "lm/card@v1", "recipe": "lm", "config": "lm/card", "source": source,
             "sha256": sha256(archive.read_bytes()), "size": archive.stat().st_size, "license": "Apache-2.0",
             "metrics": {"ppl@512": 38.1}, "command": "lavo-zoo eval lm/card@v1 --split test"}
    index = tmp_path / "index.yaml"
    index.write_text(yaml.safe_dump({"version": 1, "checkpoints": [entry]}))
    monkeypatch.setenv("LAVO_ZOO_INDEX", str(index))
    if cache:
        folder = entry_dir(source)
        folder.mkdir(parents=True)
        (folder / archive.name).write_bytes(archive.read_bytes())
        write_json_atomic(folder / RECORD, {"source": source, "name": entry["name"], "file": archive.name,
                                            "sha256": entry["sha256"], "size": entry["size"]})
    return entry


def test_info_shows_the_card_of_a_cached_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = release_checkpoint(tmp_path / "best")
    archive = tmp_path / "lm-card-v1.tar.gz"
    assert run(capsys, "export", str(checkpoint), str(archive), "--name", "lm/card@v1")[0] == 0
    fake_release(tmp_path, archive, monkeypatch, cache=False)
    code, out, _ = run(capsys, "info", "lm/card@v1")
    assert code == 0 and "cached:      no (lavo-zoo download lm/card@v1)" in out
    assert "card:        in the archive: `lavo-zoo download lm/card@v1`, then `lavo-zoo info lm/card@v1`" in out
    assert json.loads(run(capsys, "info", "lm/card@v1", "--json")[1])["card"] is None

    fake_release(tmp_path, archive, monkeypatch, cache=True)
    card = read_card(archive)
    code, out, _ = run(capsys, "info", "lm/card@v1")
    assert code == 0 and out.endswith(card.rstrip() + "\n")
    assert "model card (README.md in lm-card-v1.tar.gz):" in out
    data = json.loads(run(capsys, "info", "lm/card@v1", "--json")[1])
    assert data["card"] == card and data["cached"].endswith("lm-card-v1.tar.gz")
    assert sorted(p.name for p in Path(data["cached"]).parent.iterdir()) == ["lm-card-v1.tar.gz", "record.json"], \
        "nothing was unpacked"


def test_info_of_a_cached_archive_without_a_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    archive = tar_with(tmp_path / "old.tar.gz", [("old/meta.json", None, b"{}")])
    fake_release(tmp_path, archive, monkeypatch, cache=True)
    code, out, _ = run(capsys, "info", "lm/card@v1")
    assert code == 0 and "card:        none (old.tar.gz holds no README.md" in out
    (tmp_path / "broken.tar.gz").write_bytes(b"not a tarball")
    fake_release(tmp_path, tmp_path / "broken.tar.gz", monkeypatch, cache=True)
    code, out, _ = run(capsys, "info", "lm/card@v1")
    assert code == 0 and "card:        unreadable: " in out and "not a readable archive" in out
