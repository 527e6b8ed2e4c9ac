"""The TTS recipe's commands, mounted by the CLI through the recipe hooks: ``lavo-zoo score mcd`` (files, no
checkpoint) and ``lavo-zoo synthesize`` (a checkpoint, text in, wav out)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from lavo_zoo.errors import DataError, UsageError


def score_directories(ref: Path, syn: Path) -> dict:
    """MCD/MSD of every ``syn/<name>.wav`` against ``ref/<name>.wav`` (paired by file name)."""
    import soundfile as sf

    from lavo_zoo.evaluators.mcd import MelDistortion

    for folder, what in ((ref, "--ref"), (syn, "--syn")):
        if not folder.is_dir():
            raise UsageError(f"{what} {folder} is not a directory of .wav files")
    ref_names = {p.name for p in ref.glob("*.wav")}
    syn_names = {p.name for p in syn.glob("*.wav")}
    names = sorted(ref_names & syn_names)
    if not names:
        raise DataError(f"no wav file name is in both {ref} ({len(ref_names)} wavs) and {syn} ({len(syn_names)} "
                        f"wavs); synthesised files must be named as their references")
    evaluator, rate = None, None
    for name in names:
        waves = []
        for path in (ref / name, syn / name):
            try:
                wave, sr = sf.read(str(path), dtype="float32", always_2d=True)
            except (sf.LibsndfileError, RuntimeError, OSError) as e:
                raise DataError(f"cannot read {path} as a wav ({e})") from None
            rate = rate or sr
            if sr != rate:
                raise DataError(f"{path} is at {sr} Hz but the other files are at {rate} Hz; MCD compares files "
                                f"at one sample rate (resample them first)")
            waves.append(wave[:, 0])  # first channel, as eval_sp.py
        if evaluator is None:
            evaluator = MelDistortion(sample_rate=rate)
        evaluator.update([waves[1]], [waves[0]])
    return {"num_pairs": len(names), "ref_only": len(ref_names - syn_names), "syn_only": len(syn_names - ref_names),
            "sample_rate": rate, "metrics": evaluator.compute()}


@click.command("mcd", epilog="""\b
Examples:
  lavo-zoo score mcd --ref runs/tts/eval/reference --syn runs/tts/eval/synthesized
  lavo-zoo score mcd --ref refs/ --syn syn/ --json > mcd.json""")
@click.option("--ref", "ref", required=True, type=click.Path(path_type=Path), help="Folder of reference wavs.")
@click.option("--syn", "syn", required=True, type=click.Path(path_type=Path),
              help="Folder of synthesised wavs, named as their references.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def score_mcd(ref: Path, syn: Path, as_json: bool) -> None:
    """Mel-cepstral and mel-spectral distortion (MCD, MSD) of synthesised wavs against references, as fairseq's
    eval_sp.py: 13 MFCCs / 80 log-mels, full DTW, total path cost per synthesised frame, insertion and deletion
    rates. Files are paired by name; names in only one folder are counted and left out."""
    result = score_directories(ref, syn)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{result['num_pairs']} pairs at {result['sample_rate']} Hz "
               f"({result['ref_only']} only in --ref, {result['syn_only']} only in --syn)")
    for name, value in result["metrics"].items():
        click.echo(f"{name:<8} {value:10.4f}")


@click.command("synthesize", epilog="""\b
Examples:
  lavo-zoo synthesize runs/tts-tiny/checkpoints/last --text "Hello world." --out hello.wav
  lavo-zoo synthesize runs/tts/checkpoints/last --text "Printing, in the only sense." --out x.wav --png x.png
  lavo-zoo synthesize runs/tts/checkpoints/last --text "A long one." --out y.wav --max-frames 4000 --seed 2""")
@click.argument("checkpoint")
@click.option("--text", required=True, help="What to say.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The wav to write (22,050 Hz, 16-bit PCM).")
@click.option("--png", "png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the mel spectrogram, stop probability and alignment as a PNG.")
@click.option("--max-frames", type=click.IntRange(min=1), default=None,
              help="Stop after this many frames at the latest (default: the checkpoint's eval.max_frames).")
@click.option("--stop-threshold", type=click.FloatRange(0, 1), default=None,
              help="Stop when the stop-token probability exceeds this (default: eval.stop_threshold, 0.5).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the decoder prenet's dropout (on at inference, as Tacotron 2).")
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available).")
def synthesize(checkpoint: str, text: str, out: Path, png: Path | None, max_frames: int | None,
               stop_threshold: float | None, seed: int, device: str | None) -> None:
    """Speak TEXT with the text-to-speech model in CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL
    or an hf:// reference): autoregressive mel frames until the stop token, then Griffin-Lim."""
    import time

    import torch

    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.recipes.tts.audio import write_wav
    from lavo_zoo.recipes.tts.plot import plot_utterance, teacher_forced_view
    from lavo_zoo.recipes.tts.recipe import speak
    from lavo_zoo.recipes.tts.text import text_encoder

    if not text.strip():
        raise UsageError("--text is empty; give the sentence to speak")
    dev = pick_device(device)
    with open_checkpoint(checkpoint) as path:
        recipe, cfg, model, _ = load_model(path, dev)
    if recipe.name != "tts":
        raise UsageError(f"{checkpoint} is a '{recipe.name}' checkpoint; synthesize needs a text-to-speech ('tts') one")
    cfg.eval.max_frames = max_frames or cfg.eval.max_frames
    cfg.eval.stop_threshold = cfg.eval.stop_threshold if stop_threshold is None else stop_threshold
    ids = text_encoder(cfg.data.text).encode(text)
    tokens = torch.tensor([ids], device=dev)
    torch.manual_seed(seed)
    start = time.perf_counter()
    model.eval()
    result = speak(model, tokens, cfg.data.features(), cfg.eval.max_frames, cfg.eval.stop_threshold)[0]
    elapsed = time.perf_counter() - start
    rate = cfg.data.features().sample_rate
    write_wav(out, result["wave"], rate)
    frames, seconds = len(result["mel"]), len(result["wave"]) / rate
    if png is not None:
        stop, align = teacher_forced_view(model, tokens, result["grouped"][None])
        plot_utterance(png, result["mel"], None, stop, align, title=text[:80])
    stopped = "stop token" if frames < cfg.eval.max_frames - cfg.model.frames_per_step else "max frames"
    click.echo(f"wrote {out}: {seconds:.2f} s of audio, {frames} frames (ended by the {stopped}), "
               f"{elapsed:.2f} s to synthesise and vocode" + (f"; {png}" if png else ""))
