"""The tts recipe end to end on the built-in corpus: configs, a 2-step training run, eval writing results, wavs and
plots, synthesize writing a playable 22,050 Hz wav, --help examples."""
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.cli import main
from lavo_zoo.engine.configs import available_configs, resolve_config
from lavo_zoo.recipes.tts.cli import synthesize
from tests.recipes.tts.helpers import BUILTIN_SIZE

MICRO = [f"data.builtin_size={BUILTIN_SIZE}", "data.max_duration=6", "model.embed_dim=16", "model.num_heads=2",
         "model.ffn_dim=32", "model.encoder_layers=1", "model.decoder_layers=1", "model.prenet_dim=16",
         "model.postnet_dim=16", "model.postnet_layers=2", "model.encoder_conv_layers=1", "train.batch_size=4",
         "train.log_every=1", "train.save_every=2", "eval.batch_size=2", "eval.max_utterances=2",
         "eval.max_frames=24"]


def test_configs_resolve_with_their_sites() -> None:
    names = {n for n in available_configs() if n.startswith("tts/")}
    expected = {f"tts/{p}-{a}" for p in ("ljspeech", "tiny") for a in ("sdpa", "lavo-causal", "lavo-noncausal",
                                                                         "local-causal")}
    assert expected <= names
    for name in expected:
        _, cfg = resolve_config(name)
        sites = {k: v["name"] for k, v in cfg.model.attention.to_config().items()}
        want = {"encoder_self": "sdpa", "decoder_self": "sdpa", "cross": "sdpa"}
        if name.endswith("lavo-causal"):
            want["decoder_self"] = "lavo"
        elif name.endswith("lavo-noncausal"):
            want["encoder_self"] = "lavo"
        elif name.endswith("local-causal"):
            want["decoder_self"] = "local"
        assert sites == want, name
    _, paper = resolve_config("tts/ljspeech-lavo-causal")
    assert (paper.model.embed_dim, paper.model.num_heads, paper.model.ffn_dim, paper.train.batch_size) == \
        (512, 8, 2048, 48)
    assert paper.model.attention.decoder_self == AttentionSpec("lavo", {"num_bases": 64, "window_size": 16})


@pytest.fixture(scope="module")
def trained(builtin_root, tmp_path_factory) -> Path:
    """A 2-step run of tts/tiny-lavo-causal shrunk further, on the session's built-in corpus."""
    out = tmp_path_factory.mktemp("tts-run")
    mp = pytest.MonkeyPatch()
    mp.setenv("LAVO_ZOO_CACHE", str(builtin_root.parents[2]))
    try:
        assert main(["train", "tts/tiny-lavo-causal", *MICRO, "model.attention.decoder_self.num_bases=4",
                     "--out", str(out), "--max-steps", "2", "--device", "cpu"]) == 0
    finally:
        mp.undo()
    return out


def test_two_training_steps_write_a_checkpoint(trained: Path) -> None:
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r.get("split") == "train" and "loss" in r]
    assert len(losses) == 2 and all(0 < x < 1e3 for x in losses)
    ckpt = trained / "checkpoints" / "last"
    saved = (ckpt / "config.yaml").read_text()
    assert "vocab_size: 41" in saved and "feature_mean:" in saved  # resolved from the data, saved with the run


def test_eval_writes_results_wavs_and_plots(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    results = tmp_path / "results.json"
    assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results),
                 "--device", "cpu"]) == 0
    data = json.loads(results.read_text())
    assert data["num_samples"] == 2 and {"mcd", "msd", "mcd_ins", "mcd_del"} <= set(data["metrics"])
    files = tmp_path / "results"
    synthesized = sorted(p.name for p in (files / "synthesized").glob("*.wav"))
    assert len(synthesized) == 2 and synthesized == sorted(p.name for p in (files / "reference").glob("*.wav"))
    assert len(list((files / "plots").glob("*.png"))) == 2
    rescored = tmp_path / "rescored.json"  # the files hold what eval scored: `score mcd` gives the same figures
    assert main(["score", "mcd", "--pred", str(files / "synthesized"), "--ref", str(files / "reference"),
                 "--out", str(rescored)]) == 0
    for name, metric in json.loads(rescored.read_text())["metrics"].items():
        assert metric["value"] == pytest.approx(data["metrics"][name]["value"], rel=1e-9), name
    # an evaluation's folder holds that evaluation only: --overwrite replaces the earlier files, not adds to them
    assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results),
                 "--device", "cpu"]) == 2
    assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results),
                 "--device", "cpu", "--overwrite", "eval.max_utterances=1"]) == 0
    assert json.loads(results.read_text())["num_samples"] == 1
    assert len(list((files / "synthesized").glob("*.wav"))) == 1 and len(list((files / "plots").glob("*.png"))) == 1
    # it removes only files an evaluation recorded writing there: the user's notes and own wav stop it, untouched
    notes, own = files / "notes.txt", files / "synthesized" / "mine.wav"
    notes.write_text("my notes")
    own.write_bytes(b"RIFF my own recording")
    before = {p: p.read_bytes() for p in files.rglob("*") if p.is_file()}
    for extra in ([f"eval.out_dir={files}", "--out", str(tmp_path / "other.json")], ["--out", str(results),
                                                                                     "--overwrite"]):
        assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--device", "cpu",
                     *extra]) == 2
        err = capsys.readouterr().err
        assert "notes.txt, synthesized/mine.wav" in err and "no evaluation recorded writing" in err
        assert {p: p.read_bytes() for p in files.rglob("*") if p.is_file()} == before
    notes.unlink()
    own.unlink()
    assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results),
                 "--device", "cpu", "--overwrite"]) == 0
    assert len(list((files / "synthesized").glob("*.wav"))) == 2


def test_an_interrupted_eval_leaves_none_of_its_files(trained: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or a full disk) once the first utterance's wavs are written: the evaluation's files were staged beside
    their folder, and none of them is left (no folder, no results, no staging folder, no lock), so the rerun needs
    no --overwrite."""
    from lavo_zoo.recipes.tts import plot

    def interrupted(*args, **kwargs):  # Ctrl-C once the first utterance's wavs are written
        raise KeyboardInterrupt

    out = tmp_path / "out"
    results = out / "results.json"
    args = ["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results), "--device", "cpu"]
    with monkeypatch.context() as m:
        m.setattr(plot, "plot_utterance", interrupted)
        assert main(args) == 130
    assert not out.exists()
    assert main(args) == 0
    files = out / "results"
    assert len(list((files / "synthesized").glob("*.wav"))) == 2 and len(list((files / "plots").glob("*.png"))) == 2
    manifest = json.loads((files / "eval-manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(p.relative_to(files).as_posix() for p in files.rglob("*")
                                               if p.is_file() and p.name != "eval-manifest.json")
    assert sorted(p.name for p in out.iterdir()) == ["results", "results.json"]


def test_synthesize_writes_a_playable_wav(trained: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "hello.wav", tmp_path / "hello.png"
    result = CliRunner().invoke(synthesize, [str(trained / "checkpoints" / "last"), "--text", "Hello world.",
                                             "--out", str(out), "--png", str(png), "--max-frames", "16",
                                             "--device", "cpu"])
    assert result.exit_code == 0, result.output
    info = sf.info(str(out))
    assert info.samplerate == 22_050 and info.channels == 1 and info.subtype == "PCM_16" and info.frames > 0
    assert png.stat().st_size > 1000
    empty = CliRunner().invoke(synthesize, [str(trained / "checkpoints" / "last"), "--text", " ", "--out", str(out)])
    assert empty.exit_code != 0 and "--text is empty" in str(empty.exception)
    mine = tmp_path / "mine.wav"
    mine.write_bytes(b"my recording")
    again = CliRunner().invoke(synthesize, [str(trained / "checkpoints" / "last"), "--text", "Hi.", "--out", str(mine)])
    assert again.exit_code != 0 and "already exists" in str(again.exception) and mine.read_bytes() == b"my recording"
    snowmen = CliRunner().invoke(synthesize, [str(trained / "checkpoints" / "last"), "--text", "☃☃☃",
                                              "--out", str(tmp_path / "s.wav")])
    assert snowmen.exit_code != 0 and "nothing this model can speak" in str(snowmen.exception)
    assert not (tmp_path / "s.wav").exists()
    noted = CliRunner().invoke(synthesize, [str(trained / "checkpoints" / "last"), "--text", "Hi 5 ☃",
                                            "--out", str(tmp_path / "n.wav"), "--max-frames", "8", "--device", "cpu"])
    assert noted.exit_code == 0 and "left out characters the model cannot speak: ☃" in noted.output


def test_the_python_api_speaks_what_the_command_writes(trained: Path, tmp_path: Path) -> None:
    import lavo_zoo

    tts = lavo_zoo.load(trained, device="cpu")
    samples, rate = tts.synthesize("Hello world.", max_frames=16)
    assert rate == 22_050 and samples.dtype == np.float32 and np.abs(samples).max() <= 1.0
    out = tmp_path / "hello.wav"
    result = CliRunner().invoke(synthesize, [str(trained), "--text", "Hello world.", "--out", str(out),
                                             "--max-frames", "16", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    written, _ = sf.read(str(out), dtype="float64")
    np.testing.assert_allclose(written, samples, atol=2 / 32767)  # 16-bit rounding only
    assert len(tts.synthesize(["Hello world.", "Hi."], max_frames=16)) == 2


def test_help_ends_with_examples() -> None:
    text = CliRunner().invoke(synthesize, ["--help"]).output
    assert "Examples:" in text and text.rstrip().splitlines()[-1].strip().startswith("lavo-zoo")


def test_scoring_in_eval_mode_is_reproducible_and_leaves_the_random_state(trained: Path, builtin_root: Path,
                                                                          monkeypatch) -> None:
    import numpy as np
    import torch

    from lavo_zoo.engine.checkpoint_io import load_model

    monkeypatch.setenv("LAVO_ZOO_CACHE", str(builtin_root.parents[2]))
    recipe, cfg, model, _ = load_model(trained / "checkpoints" / "last", "cpu")
    ds = recipe.build_dataset(cfg, "test")
    batch = recipe.collate([ds[0], ds[1]])
    model.eval()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    loss, waves, _ = recipe.validation_step(model, batch)
    again = recipe.predict(model, batch)[0]
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random stream is untouched
    assert len(waves) == 2 and all(np.array_equal(a, b) for a, b in zip(waves, again, strict=True))
    assert loss == recipe.training_loss(model, batch)[0]
    model.train()  # in training mode the prenet dropout draws fresh masks: two losses differ
    assert recipe.training_loss(model, batch)[0] != recipe.training_loss(model, batch)[0]


def test_stop_diagnosis_tells_the_teacher_forced_stop_from_the_synthesised_length(trained: Path, builtin_root,
                                                                                  monkeypatch) -> None:
    import runpy

    import torch

    import lavo_zoo

    monkeypatch.setenv("LAVO_ZOO_CACHE", str(builtin_root.parents[2]))
    script = runpy.run_path(str(Path(__file__).parents[3] / "benchmarks" / "tts_stop_diagnosis.py"))
    p = lavo_zoo.load(trained, device="cpu")
    with torch.no_grad():
        p.model.stop_head.bias.fill_(50.0)  # stops at once, teacher-forced and synthesising
    d = script["measure"](p.model, p.cfg, p.recipe, "test", max_utterances=2)
    loader = p.recipe.eval_loader(p.cfg, "test")
    frames = next(iter(loader))["mel_lengths"].tolist()[:2]
    r = p.model.cfg.frames_per_step
    assert d["teacher_forced_stop"][:2] == pytest.approx([1 / (n // r) for n in frames])  # the first whole group
    assert d["synthesised_length"][:2] == pytest.approx([r / n for n in frames])
    with torch.no_grad():
        p.model.stop_head.bias.fill_(-50.0)  # never stops: teacher-forced past the end, synthesis to max_frames
    d = script["measure"](p.model, p.cfg, p.recipe, "test", max_utterances=2)
    assert all(s > 1 for s in d["teacher_forced_stop"])
    assert d["synthesised_length"][:2] == pytest.approx([p.cfg.eval.max_frames / n for n in frames])


def test_eval_passes_the_staged_places_and_leaves_the_config_as_given(trained: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation writes where the output policy staged its folder, told so explicitly: the config it reads (and
    the results record) keeps the user's eval.out_dir, which the engine once overwrote and restored."""
    from lavo_zoo.recipes.tts.recipe import TTSRecipe

    seen = {}
    real = TTSRecipe.evaluate

    def spy(self, model, cfg, split, device, max_batches=None, places=None):
        seen.update(out_dir=cfg.eval.out_dir, places=places, exists=places.files.is_dir())
        return real(self, model, cfg, split, device, max_batches, places)

    monkeypatch.setattr(TTSRecipe, "evaluate", spy)
    results = tmp_path / "r.json"
    assert main(["eval", str(trained / "checkpoints" / "last"), "--split", "test", "--out", str(results),
                 "--device", "cpu", "eval.max_utterances=1"]) == 0
    final = tmp_path / "r"
    assert not seen["out_dir"] and seen["places"].plot is None and seen["exists"]
    assert seen["places"].files != final and seen["places"].files.parent == final.parent  # staged beside it
    data = json.loads(results.read_text())
    assert not data["config"]["eval"]["out_dir"] and data["files"] == str(final)
    assert len(list((final / "synthesized").glob("*.wav"))) == 1 and not seen["places"].files.exists()
