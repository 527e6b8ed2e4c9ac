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
