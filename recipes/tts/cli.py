"""The TTS recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``synthesize`` (a checkpoint,
text in, wav out). MCD / MSD of saved wavs are ``lavo-zoo score mcd``."""
from __future__ import annotations

from pathlib import Path

import click

from lavo_zoo.errors import UsageError
from lavo_zoo.options import check_writable, device_option, out_option, overwrite_option


@click.command("synthesize", epilog="""\b
Examples:
  lavo-zoo synthesize runs/tts-tiny/checkpoints/last --text "Hello world." --out runs/hello.wav
  lavo-zoo synthesize runs/tts/checkpoints/last --text "Printing, in the only sense." --out runs/x.wav --png runs/x.png
  lavo-zoo synthesize runs/tts/checkpoints/last --text "A long one." --out runs/y.wav --max-frames 4000 --seed 2""")
@click.argument("checkpoint")
@click.option("--text", required=True, help="What to say.")
@out_option("The wav to write (22,050 Hz, 16-bit PCM).", required=True)
@overwrite_option
@click.option("--png", "png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the mel spectrogram, stop probability and alignment as a PNG.")
@click.option("--max-frames", type=click.IntRange(min=1), default=None,
              help="Stop after this many frames at the latest (default: the checkpoint's eval.max_frames).")
@click.option("--stop-threshold", type=click.FloatRange(0, 1), default=None,
              help="Stop when the stop-token probability exceeds this (default: eval.stop_threshold, 0.5).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the decoder prenet's dropout (on at inference, as Tacotron 2).")
@device_option
def synthesize(checkpoint: str, text: str, out: Path, overwrite: bool, png: Path | None, max_frames: int | None,
               stop_threshold: float | None, seed: int, device: str | None) -> None:
    """Speak TEXT with the text-to-speech model in CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL
    or an hf:// reference): autoregressive mel frames until the stop token, then Griffin-Lim."""
    import time

    import torch

    from lavo_zoo.checkpoints import open_checkpoint
    from lavo_zoo.engine.checkpoint import load_model
    from lavo_zoo.engine.env import pick_device
    from lavo_zoo.recipes.tts.audio import write_wav
    from lavo_zoo.recipes.tts.infer import speak
    from lavo_zoo.recipes.tts.plot import plot_utterance, teacher_forced_view
    from lavo_zoo.recipes.tts.text import dropped_characters, text_encoder

    if not text.strip():
        raise UsageError("--text is empty; give the sentence to speak")
    check_writable(out, overwrite)
    if png is not None:
        check_writable(png, overwrite, "--png")
    dev = pick_device(device)
    with open_checkpoint(checkpoint) as path:
        recipe, cfg, model, _ = load_model(path, dev)
    if recipe.name != "tts":
        raise UsageError(f"{checkpoint} is a '{recipe.name}' checkpoint; synthesize needs a text-to-speech ('tts') one")
    cfg.eval.max_frames = max_frames or cfg.eval.max_frames
    cfg.eval.stop_threshold = cfg.eval.stop_threshold if stop_threshold is None else stop_threshold
    encoder = text_encoder(cfg.data.text)
    if not encoder.symbols_of(text):
        raise UsageError(f"--text {text!r} holds nothing this model can speak (its {cfg.data.text} front end keeps "
                         "letters, digits (spelled out) and punctuation); give words to say")
    dropped = dropped_characters(text) if cfg.data.text == "chars" else []
    if dropped:
        click.echo(f"note: left out characters the model cannot speak: {' '.join(dropped)}", err=True)
    ids = encoder.encode(text)
    tokens = torch.tensor([ids], device=dev)
    torch.manual_seed(seed)
    start = time.perf_counter()
    model.eval()
    result = speak(model, tokens, cfg.data.features(), cfg.eval.max_frames, cfg.eval.stop_threshold)[0]
    elapsed = time.perf_counter() - start
    rate = cfg.data.features().sample_rate
    write_wav(out, result["wave"], rate, overwrite=overwrite)
    frames, seconds = len(result["mel"]), len(result["wave"]) / rate
    if png is not None:
        stop, align = teacher_forced_view(model, tokens, result["grouped"][None])
        plot_utterance(png, result["mel"], None, stop, align, title=text[:80])
    stopped = "stop token" if frames < cfg.eval.max_frames - cfg.model.frames_per_step else "max frames"
    click.echo(f"wrote {out}: {seconds:.2f} s of audio, {frames} frames (ended by the {stopped}), "
               f"{elapsed:.2f} s to synthesise and vocode" + (f"; {png}" if png else ""))


COMMANDS = [synthesize]
