"""The TTS recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): ``synthesize`` (a checkpoint,
text in, wav out). MCD / MSD of saved wavs are ``lavo-zoo score mcd``."""
from __future__ import annotations

from pathlib import Path

import click

from lavo_zoo import limits
from lavo_zoo.errors import UsageError
from lavo_zoo.options import device_option, out_option, overwrite_option
from lavo_zoo.outputs import FIGURE, WAV, Outputs


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
@click.option("--max-frames", type=limits.MAX_FRAMES.click_type(), default=None,
              help=f"Stop after this many frames at the latest, {limits.MAX_FRAMES.describe()} (default: the "
                   "checkpoint's eval.max_frames).")
@click.option("--stop-threshold", type=limits.STOP_THRESHOLD.click_type(), default=None,
              help="Stop when the stop-token probability exceeds this, from 0 to 1 (default: eval.stop_threshold).")
@click.option("--seed", type=limits.SEED.click_type(), default=0, show_default=True,
              help="Seed of the decoder prenet's dropout (on at inference, as Tacotron 2).")
@device_option
def synthesize(checkpoint: str, text: str, out: Path, overwrite: bool, png: Path | None, max_frames: int | None,
               stop_threshold: float | None, seed: int, device: str | None) -> None:
    """Speak TEXT with the text-to-speech model in CHECKPOINT (a directory, a .tar.gz/.zip, an index name, a URL
    or an hf:// reference): autoregressive mel frames until the stop token, then Griffin-Lim."""
    import time

    from lavo_zoo.checkpoints import load_predictor
    from lavo_zoo.recipes.tts.audio import write_wav
    from lavo_zoo.recipes.tts.infer import teacher_forced_view
    from lavo_zoo.recipes.tts.plot import plot_utterance
    from lavo_zoo.recipes.tts.text import dropped_characters

    if not text.strip():
        raise UsageError("--text is empty; give the sentence to speak")
    with Outputs("synthesize", overwrite) as outputs:
        staged = outputs.file(out, WAV)
        staged_png = outputs.file(png, FIGURE, "--png") if png is not None else None
        tts = load_predictor(checkpoint, device, recipe="tts")
        start = time.perf_counter()
        result = tts.speak([text], max_frames=max_frames, stop_threshold=stop_threshold, seed=seed)[0]
        elapsed = time.perf_counter() - start
        dropped = dropped_characters(text) if tts.cfg.data.text == "chars" else []
        if dropped:
            click.echo(f"note: left out characters the model cannot speak: {' '.join(dropped)}", err=True)
        write_wav(staged, result["wave"], tts.sample_rate)
        if staged_png is not None:
            stop, align = teacher_forced_view(tts.model, tts.tokens([text]), result["grouped"][None])
            plot_utterance(staged_png, result["mel"], None, stop, align, title=text[:80])
    frames, seconds = len(result["mel"]), len(result["wave"]) / tts.sample_rate
    limit = max_frames or tts.cfg.eval.max_frames
    stopped = "stop token" if frames < limit - tts.cfg.model.frames_per_step else "max frames"
    click.echo(f"wrote {out}: {seconds:.2f} s of audio, {frames} frames (ended by the {stopped}), "
               f"{elapsed:.2f} s to synthesise and vocode" + (f"; {png}" if png else ""))


COMMANDS = [synthesize]
