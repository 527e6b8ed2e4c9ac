"""Text-to-speech inference, all of it: greedy autoregressive synthesis (:func:`synthesize`), Griffin-Lim vocoding
(:func:`speak`), the recipe's scoring of batches and splits (:func:`synthesize_batch`, :func:`evaluate_synthesis`,
reproducible in eval mode: :func:`reproducible`), the teacher-forced view behind the plots
(:func:`teacher_forced_view`), and :class:`Synthesizer`, what ``lavo_zoo.load`` returns for a ``tts`` checkpoint
(``lavo-zoo synthesize`` calls it)."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lavo_zoo import limits
from lavo_zoo.engine.checkpoint_io import unwrap
from lavo_zoo.engine.predictor import Predictor, as_batch, describe
from lavo_zoo.engine.recipe import to_device
from lavo_zoo.errors import InputError
from lavo_zoo.evaluators.base import Evaluator
from lavo_zoo.recipes.tts.audio import FeatureSettings, griffin_lim, read_wav, write_wav
from lavo_zoo.recipes.tts.model import TransformerTTS, shift_right
from lavo_zoo.recipes.tts.text import text_encoder


@torch.no_grad()
def synthesize(model: TransformerTTS, tokens: torch.Tensor, token_mask: torch.Tensor, max_frames: int,
               threshold: float = 0.5, frames: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy autoregressive synthesis as fairseq's ``AutoRegressiveSpeechGenerator``, through the shared
    ``generate_frames``: from a zero group, each predicted group (before the postnet) is fed back until the stop
    probability exceeds ``threshold`` or ``max_frames``; the postnet then runs once over the whole output.
    ``frames`` [B] (optional): synthesise exactly ceil(frames / r) groups per utterance, the stop token ignored
    (e.g. the reference's duration, which takes the stop decision out of a comparison).

    -> (frames [B, T, n_mels] after the postnet (normalised), lengths [B] in frames, the groups that were fed back
    [B, T / r, r * n_mels] (zeros after each utterance's end)).

    Args:
        model: the TTS model.
        tokens: [B, S] the texts' ids.
        token_mask: [B, S] bool, True = real token.
        max_frames: frames per utterance at most.
        threshold: the stop probability that ends an utterance.
        frames: [B] frames per utterance, or None (above).
    """
    from lavo_zoo.nn.search import StopProbability, generate_frames

    max_steps = max(1, max_frames // model.cfg.frames_per_step)
    start = tokens.new_zeros(model.group, dtype=next(model.parameters()).dtype)  # the all-zero "go" group
    r = model.cfg.frames_per_step
    steps = None if frames is None else (frames.to(tokens.device) + r - 1) // r  # [B] groups
    out = generate_frames(model, tokens, token_mask, start, max_len_b=max_steps, stop=StopProbability(threshold),
                          lengths=steps)
    grouped = out.frames  # [B, T / r, r * n_mels]
    steps = torch.arange(grouped.shape[1], device=grouped.device)[None] < out.lengths[:, None]  # [B, T / r]
    post = (grouped + model.postnet(grouped, steps)) * steps[..., None]
    return model.ungroup(post), out.lengths * model.cfg.frames_per_step, grouped


@torch.no_grad()
def speak(model: nn.Module, tokens: torch.Tensor, features: FeatureSettings, max_frames: int,
          stop_threshold: float = 0.5, frames: torch.Tensor | None = None) -> list[dict[str, np.ndarray]]:
    """Synthesise tokens [B, S] (0 = pad): per utterance ``mel`` [T, n_mels] (denormalised log-mel), ``wave`` [N]
    (Griffin-Lim) and ``grouped`` [T / r, r * n_mels] (the normalised groups fed back to the decoder). ``frames``
    [B] (optional) fixes each utterance's length instead of the stop token (:func:`synthesize`).

    Args:
        model: the TTS model (a wrapped one is unwrapped).
        tokens: [B, S] the texts' ids, 0 = pad.
        features: the feature settings (the mel and Griffin-Lim parameters).
        max_frames: frames per utterance at most.
        stop_threshold: the stop probability that ends an utterance.
        frames: [B] frames per utterance, or None (the stop token decides).
    """
    tts = unwrap(model)
    frames, lengths, grouped = synthesize(tts, tokens, tokens != 0, max_frames, stop_threshold, frames)
    mean, std = np.asarray(tts.cfg.feature_mean), np.asarray(tts.cfg.feature_std)
    mel = frames.float().cpu().numpy() * std + mean  # [B, T, n_mels]
    r = tts.cfg.frames_per_step
    return [{"mel": mel[i, :n], "wave": griffin_lim(mel[i, :n], features), "grouped": grouped[i, :n // r]}
            for i, n in enumerate(lengths.tolist())]


@dataclass(frozen=True)
class Synthesis:
    """What scoring a batch needs besides the model (every batch of the recipe's datasets carries it): the feature
    settings (Griffin-Lim), the stop rule, and where the reference audio comes from."""

    features: FeatureSettings
    max_frames: int
    stop_threshold: float
    reference: str  # "resynthesized" or "recording"
    root: str  # the data folder (recordings are <root>/wavs/<id>.wav)
    length: str = "stop_token"  # or "reference": synthesise as many frames as the target has

    @classmethod
    def of(cls, cfg: Any, root: Path) -> Synthesis:
        """The settings of a ``TTSConfig`` (``data`` and ``eval``) for the data in ``root``."""
        return cls(cfg.data.features(), cfg.eval.max_frames, cfg.eval.stop_threshold, cfg.eval.reference, str(root),
                   cfg.eval.length)


@contextlib.contextmanager
def reproducible(model: nn.Module) -> Iterator[None]:
    """In eval mode, draw the decoder prenet's always-on dropout from the random generator seeded with 0 (and put
    the caller's generator state back afterwards): the same weights and batch give the same loss and the same
    audio, as validation, ``predict`` and ``eval`` need. In training mode nothing changes."""
    if model.training:
        yield
        return
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(0)
        yield


@torch.no_grad()
def synthesize_batch(model: nn.Module, batch: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """:func:`speak` for the texts of a batch of the recipe's datasets (in eval mode reproducibly), plus per
    utterance ``target`` [T', n_mels] (the denormalised target log-mel) and ``reference`` [N'] (its Griffin-Lim
    resynthesis, or the recording), as its :class:`Synthesis` settings say."""
    syn = batch["synthesis"]
    with reproducible(model):
        fixed = batch["mel_lengths"] if syn.length == "reference" else None  # [B] frames
        results = speak(model, batch["tokens"], syn.features, syn.max_frames, syn.stop_threshold, fixed)
    tts = unwrap(model)
    mean, std = np.asarray(tts.cfg.feature_mean), np.asarray(tts.cfg.feature_std)
    for i, res in enumerate(results):
        res["target"] = batch["mel"][i, :int(batch["mel_lengths"][i])].float().cpu().numpy() * std + mean
        if syn.reference == "recording":
            res["reference"] = read_wav(Path(syn.root) / "wavs" / f"{batch['ids'][i]}.wav",
                                        syn.features.sample_rate)
        else:
            res["reference"] = griffin_lim(res["target"], syn.features)
    return results


@torch.no_grad()
def evaluate_synthesis(model: nn.Module, cfg: Any, batches: Iterable[dict[str, Any]], evaluator: Evaluator,
                       device: torch.device | str, max_batches: int | None = None,
                       out: Path | None = None) -> Evaluator:
    """Synthesise ``batches`` (at most ``max_batches`` of them and ``eval.max_utterances`` utterances), vocode with
    Griffin-Lim and score them with ``evaluator`` (MCD / MSD) against the Griffin-Lim resynthesis of the target
    features (or the recordings).

    Args:
        model: the trained model.
        cfg: its config (``eval.max_utterances``, the features).
        batches: the split's batches.
        evaluator: the MCD / MSD evaluator to update.
        device: where batches go.
        max_batches: synthesise at most this many batches.
        out: write synthesized/<id>.wav, reference/<id>.wav and plots/<id>.png in this folder (None: nothing).

    Returns:
        ``evaluator``, updated.
    """
    from lavo_zoo.recipes.tts.plot import plot_utterance

    rate = cfg.data.features().sample_rate
    was_training = model.training
    model.eval()
    done, limit = 0, cfg.eval.max_utterances or None
    for b, batch in enumerate(batches):
        if (max_batches and b >= max_batches) or (limit and done >= limit):
            break
        if limit:  # synthesise only what is still wanted
            batch = {k: v[:limit - done] if isinstance(v, (torch.Tensor, list)) else v for k, v in batch.items()}
        batch = to_device(batch, device)
        results = synthesize_batch(model, batch)
        evaluator.update([r["wave"] for r in results], [r["reference"] for r in results])
        done += len(results)
        if out is None:
            continue
        for i, res in enumerate(results):
            uid = batch["ids"][i]
            write_wav(out / "synthesized" / f"{uid}.wav", res["wave"], rate, exact=True)  # what was scored
            write_wav(out / "reference" / f"{uid}.wav", res["reference"], rate, exact=True)
            if cfg.eval.plots:
                tokens = batch["tokens"][i:i + 1, :int(batch["token_lengths"][i])]
                with reproducible(model):
                    stop, align = teacher_forced_view(unwrap(model), tokens, res["grouped"][None])
                plot_utterance(out / "plots" / f"{uid}.png", res["mel"], res["target"], stop, align,
                               title=f"{uid}: {batch['texts'][i][:80]}")
    model.train(was_training)
    return evaluator


@torch.no_grad()
def teacher_forced_view(model: TransformerTTS, tokens: torch.Tensor, grouped: torch.Tensor
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """For one synthesised utterance (tokens [1, S], the groups fed back [1, T / r, r * n_mels]): the stop
    probabilities [T / r] and the head-averaged weights [T / r, S] of the last decoder layer's cross attention
    (fairseq's alignment), from one teacher-forced pass over the fed-back groups; the alignment is None when the
    cross mechanism has no explicit softmax weights (linear attentions)."""
    attn = model.decoder.layers[-1].cross_attn
    explicit = type(attn).__name__ in ("SDPAttention", "VanillaAttention") and hasattr(attn, "q_proj")
    captured = {}

    def hook(module, args, kwargs):
        captured["x"], captured["context"] = args[0], kwargs["context"]

    handle = attn.register_forward_pre_hook(hook, with_kwargs=True) if explicit else None
    try:
        _, _, stop = model(tokens, tokens != 0, shift_right(grouped))  # stop [1, T / r]
    finally:
        if handle is not None:
            handle.remove()
    probs = torch.sigmoid(stop[0]).float().cpu().numpy()
    if not explicit:
        return probs, None
    H, d = attn.num_heads, attn.head_dim
    q = attn.q_proj(captured["x"]).view(1, -1, H, d).transpose(1, 2)  # [1, H, T, d]
    k = attn.k_proj(captured["context"]).view(1, -1, H, d).transpose(1, 2)  # [1, H, S, d]
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)  # [1, H, T, S]
    return probs, weights.mean(1)[0].float().cpu().numpy()


def text_list(texts: Any, argument: str = "texts") -> list[str]:
    """``texts`` if it is a list of str; else an :class:`InputError` (a bare string would be read letter by letter)."""
    if isinstance(texts, str):
        raise InputError(f"{argument} must be a list of texts, got one str {texts[:20]!r}; give [text] (or call "
                         "synthesize(text))")
    if not isinstance(texts, list):
        raise InputError(f"{argument} must be a list of texts (str), got {describe(texts)}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"{argument}[{i}] must be a text (str), got {describe(text)}")
    return texts


class Synthesizer(Predictor):
    """A trained text-to-speech model: ``synthesize`` speaks text (``lavo_zoo.load`` returns it for a ``tts``
    checkpoint)."""

    @property
    def sample_rate(self) -> int:
        """The sample rate of the audio it synthesises (Hz)."""
        return self.cfg.data.features().sample_rate

    def tokens(self, texts: list[str]) -> torch.Tensor:
        """The model's input for texts.

        Args:
            texts: the texts to speak (a list of str).

        Returns:
            Right-padded token ids [B, S] (0 = pad) on the predictor's device.

        Raises:
            InputError: ``texts`` is not a non-empty list of str, or a text reduces to nothing speakable by the
                model's front end.
        """
        texts = text_list(texts)
        if not texts:
            raise InputError("texts is empty; give at least one text to speak")
        encoder = text_encoder(self.cfg.data.text)
        ids = []
        for text in texts:
            ids.append(torch.tensor(encoder.encode(text)))  # each text through the front end once
            if ids[-1].numel() <= 1:  # the end-of-text symbol alone
                raise InputError(f"{text[:60]!r} holds nothing this model can speak (its {self.cfg.data.text} front "
                                 "end keeps letters, digits (spelled out) and punctuation); give words to say")
        return torch.nn.utils.rnn.pad_sequence(ids, batch_first=True).to(self.device)

    def memory_estimate(self, texts: int, tokens: int, frames: int) -> int:
        """Estimated bytes of synthesising ``texts`` texts of up to ``tokens`` tokens for up to ``frames`` frames:
        the decoder's caches (self attention over the frames, cross attention over the text), the frames, the
        encoder's widest activations, and one utterance's Griffin-Lim (fp64 magnitudes, complex spectra)."""
        m, f = self.cfg.model, self.cfg.data.features()
        groups = -(-frames // m.frames_per_step)
        decoder = m.decoder_layers * 2 * (tokens + groups) * m.embed_dim * 4 + frames * m.n_mels * 4 * 4
        encoder = tokens * (m.ffn_dim + 4 * m.embed_dim) * 4
        vocoder = frames * ((f.n_fft // 2 + 1) * (8 + 3 * 16) + f.hop_length * 8)
        return texts * (decoder + encoder) + vocoder

    def speak(self, texts: list[str], *, max_frames: int | None = None, stop_threshold: float | None = None,
              seed: int = 0) -> list[dict[str, np.ndarray]]:
        """Synthesise texts as one batch, with everything the synthesis produced.

        Args:
            texts: the texts to speak (a list of str).
            max_frames: stop at the latest after this many frames (default: the checkpoint's ``eval.max_frames``).
            stop_threshold: stop when the stop-token probability exceeds this (default: ``eval.stop_threshold``).
            seed: seed of the decoder prenet's dropout (on at inference, as Tacotron 2); the caller's random state
                is left as it was.

        Returns:
            Per text: ``wave`` [N] (Griffin-Lim), ``mel`` [T, n_mels] (denormalised log-mel) and ``grouped`` (what
            the decoder fed back).

        Raises:
            InputError: ``texts`` is not a list of str or a text holds nothing speakable, an option is outside its
                range, the synthesis would not fit in memory, or the audio is not finite.
        """
        e = self.cfg.eval
        texts = text_list(texts)
        max_frames = limits.MAX_FRAMES.check_optional(max_frames)
        stop_threshold = limits.STOP_THRESHOLD.check_optional(stop_threshold)
        seed = limits.SEED.check(seed)
        if not texts:
            return []
        frames = max_frames or e.max_frames
        longest = max(len(t) for t in texts)  # before the front end reads them (phonemes of a long text take minutes)
        self.check_fits(self.memory_estimate(len(texts), longest, frames),
                        f"synthesising {len(texts)} text(s) of up to {longest:,} characters for up to {frames:,} "
                        "frames", "give shorter or fewer texts, or lower max_frames")
        tokens = self.tokens(texts)  # [B, S]
        self.check_fits(self.memory_estimate(len(texts), tokens.shape[1], frames),
                        f"synthesising {len(texts)} text(s) of up to {tokens.shape[1]} symbols for up to {frames:,} "
                        "frames", "lower max_frames, or give shorter or fewer texts")
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            results = speak(self.model, tokens, self.cfg.data.features(), frames,
                            e.stop_threshold if stop_threshold is None else stop_threshold)
        for text, result in zip(texts, results):
            for key in ("mel", "wave"):
                self.check_finite(result[key], f"the text {text[:40]!r}")
        return results

    def synthesize(self, text: str | list[str], *, max_frames: int | None = None,
                   stop_threshold: float | None = None, seed: int = 0
                   ) -> tuple[np.ndarray, int] | list[tuple[np.ndarray, int]]:
        """Speak text: autoregressive mel frames until the stop token (or ``max_frames``), then Griffin-Lim.

        Args:
            text: a text, or a list of them (synthesised as one batch).
            max_frames: stop at the latest after this many frames (default: the checkpoint's ``eval.max_frames``).
            stop_threshold: stop when the stop-token probability exceeds this (default: ``eval.stop_threshold``).
            seed: seed of the decoder prenet's dropout; the caller's random state is left as it was.

        Returns:
            (samples [N] float32 in [-1, 1], sample rate), or a list of them for a list of texts.

        Raises:
            InputError: ``text`` is not a str or a list of them, a text holds nothing the model can speak, an
                option is outside its range, or the synthesis would not fit in memory.
        """
        texts, single = as_batch(text, lambda t: isinstance(t, str), "text", "a text (str)")
        results = self.speak(texts, max_frames=max_frames, stop_threshold=stop_threshold, seed=seed)
        out = [(r["wave"].astype(np.float32), self.sample_rate) for r in results]
        return out[0] if single else out
