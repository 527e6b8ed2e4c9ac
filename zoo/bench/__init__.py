"""Every measurement of the project behind ``lavo-zoo bench <name>`` (click, one module each, imported on first use):

- ``attention``: one attention layer's time and peak memory against length (fwd, fwd+bwd, decode, stream)
- ``lm``: a language-model config's training and evaluation tokens/s at several context lengths
- ``summarization``: training throughput, peak memory and cached decoding speed against source length
- ``tts``: per-frame synthesis time of Transformer-TTS with LAVO or softmax decoder self-attention
- ``decode``: one cached encoder-decoder decoding step against target prefix and source length
- ``lra``: the LRA efficiency table (training steps/s and peak memory, every noncausal mechanism vs softmax)
- ``chamfer``: seconds per scored pair of 16,384-point clouds; ``step``: seconds per training step of any config
- ``ops``: the PyTorch operations and kernel launches one step of an attention layer dispatches, per path (sdpa,
  LAVO's CPU default, LAVO's Triton kernels): the fixed cost of a step on a GPU
- ``report``: the tables of benchmarks/RESULTS.md from the JSON the others write

Timing and isolation (fresh processes, peak memory) are shared in :mod:`lavo_zoo.bench.timing`; the efficiency-length
search (the shortest length at which an attention beats softmax, as CAB reports it) in
:mod:`lavo_zoo.bench.efficiency`, used by ``attention`` and by ``lavo-zoo compare``. Every JSON a
benchmark writes records the machine (:func:`lavo_zoo.engine.env.machine`): figures from different machines are not
comparable.
"""
from __future__ import annotations

import importlib

import click

SUBCOMMANDS = {
    "attention": ("lavo_zoo.bench.attention:attention_cmd",
                  "Attention time and peak memory against length; lengths from which it beats softmax."),
    "lm": ("lavo_zoo.bench.lm:lm_cmd", "LM training and evaluation tokens/s at several context lengths."),
    "summarization": ("lavo_zoo.bench.summarization:summarization_cmd",
                      "Summarization training throughput, memory and decoding speed against source length."),
    "tts": ("lavo_zoo.bench.tts:tts_cmd", "Text-to-speech synthesis time per frame, LAVO against softmax."),
    "decode": ("lavo_zoo.bench.decode:decode_cmd", "One cached encoder-decoder decoding step against prefix/source."),
    "lra": ("lavo_zoo.bench.lra:lra_cmd", "LRA efficiency table: steps/s and peak memory relative to softmax."),
    "chamfer": ("lavo_zoo.bench.chamfer:chamfer_cmd", "Seconds per Chamfer / F-score of two 16,384-point clouds."),
    "step": ("lavo_zoo.bench.step:step_cmd", "Seconds per training step and peak memory of a config."),
    "ops": ("lavo_zoo.bench.ops:ops_cmd", "PyTorch operations and kernel launches of one attention step, per path."),
    "report": ("lavo_zoo.bench.report:report_cmd", "The tables of benchmarks/RESULTS.md from benchmark JSON."),
}


class BenchGroup(click.Group):
    """The benchmark subcommands, imported when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, _, attr = SUBCOMMANDS[name][0].partition(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Benchmarks"):
            formatter.write_dl([(name, text) for name, (_, text) in SUBCOMMANDS.items()])


@click.group("bench", cls=BenchGroup, epilog="""\b
Examples:
  lavo-zoo bench attention --attentions lavo,sdpa --lengths 1024,4096,16384 --mode fwdbwd
  lavo-zoo bench lm lm/tiny-lavo lm/tiny-sdpa --lengths 2048,8192
  lavo-zoo bench tts --size tiny --frames 600 --at 100,600
  lavo-zoo bench lra --lengths 4096 --attentions sdpa,lavo --rounds 5
  lavo-zoo bench report benchmarks/results""")
def bench() -> None:
    """Benchmarks: attention time and memory against length, and each recipe's throughput and speed."""
