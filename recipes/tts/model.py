"""Transformer-TTS as fairseq's ``tts_transformer`` (the model CAB trained on LJSpeech), on the shared
encoder-decoder core (:mod:`lavo_zoo.nn.transformer`), so that any registry attention can sit at each site.

Encoder: token embeddings, a prenet of 3 x (Conv1d k5 + BatchNorm + ReLU + dropout), a linear projection, scaled
sinusoidal positions (x + alpha * pos, alpha learned), dropout, pre-LN transformer layers with a final LayerNorm.
Decoder: frames grouped ``frames_per_step`` at a time ([T / r, r * n_mels]), the previous group through a prenet of
2 x (Linear 256 + ReLU + dropout 0.5, dropout also at inference as Tacotron 2), a projection, scaled positions,
pre-LN layers with causal self-attention and cross attention, then a linear frame head, a stop-token head and a
5-layer convolutional postnet added to the frames (all on grouped frames, as fairseq).
Loss: fairseq's ``tacotron2`` criterion: L1 + MSE of the frames before and after the postnet, BCE of the stop
token (positive weight 5), averaged over the real (unpadded) decoder steps.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import SiteAttention, SiteSchedule
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.config import NonNegativeFloat, NonNegativeInt, PositiveInt, Probability
from lavo_zoo.nn.position import sinusoidal_positions
from lavo_zoo.nn.transformer import DecoderCache, TransformerDecoder, TransformerEncoder


@dataclass
class ModelConfig:
    vocab_size: NonNegativeInt = 0  # resolved from data.text by the recipe (the text front end's fixed symbol set)
    n_mels: PositiveInt = 80
    frames_per_step: PositiveInt = 4
    embed_dim: PositiveInt = 512
    num_heads: PositiveInt = 8
    ffn_dim: PositiveInt = 2048
    encoder_layers: PositiveInt = 6
    decoder_layers: PositiveInt = 6
    dropout: Probability = 0.1
    attention_dropout: Probability = 0.1
    activation: Literal["gelu", "relu"] = "relu"
    # per site (encoder_self: noncausal, decoder_self: causal, cross), flat: {name: lavo, num_bases: 64, ...}
    attention: SiteAttention = field(default_factory=SiteAttention)
    # a hybrid per site: the attention of each of the site's layers, a list repeated over them whose entries naming
    # that site's model.attention mechanism take its options (decoder_self: [lavo, lavo, lavo, sdpa])
    attention_schedule: SiteSchedule = field(default_factory=SiteSchedule)
    encoder_conv_layers: PositiveInt = 3
    encoder_conv_kernel: PositiveInt = 5
    encoder_dropout: Probability = 0.5
    prenet_layers: PositiveInt = 2
    prenet_dim: PositiveInt = 256
    prenet_dropout: Probability = 0.5
    postnet_layers: PositiveInt = 5
    postnet_dim: PositiveInt = 512
    postnet_kernel: PositiveInt = 5
    postnet_dropout: Probability = 0.5
    stop_pos_weight: NonNegativeFloat = 5.0  # BCE positive weight of the stop token (fairseq --bce-pos-weight)
    # the train split's log-mel mean / std per band (resolved by the recipe from the data; undo the
    # normalisation of synthesised frames without the training data)
    feature_mean: list[float] = field(default_factory=list)
    feature_std: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        resolve_schedules(self)


class EncoderPrenet(nn.Module):
    """Embeddings [B, S] -> [B, S, D] through conv + BatchNorm + ReLU + dropout layers and a projection."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.encoder_conv_kernel % 2 == 0:
            raise ValueError(f"model.encoder_conv_kernel must be odd, got {cfg.encoder_conv_kernel}")
        d, k = cfg.embed_dim, cfg.encoder_conv_kernel
        self.embed = nn.Embedding(cfg.vocab_size, d, padding_idx=0)
        self.convs = nn.ModuleList(nn.Sequential(nn.Conv1d(d, d, k, padding=k // 2), nn.BatchNorm1d(d), nn.ReLU(),
                                                 nn.Dropout(cfg.encoder_dropout))
                                   for _ in range(cfg.encoder_conv_layers))
        for conv in self.convs:
            nn.init.xavier_uniform_(conv[0].weight, nn.init.calculate_gain("relu"))
        self.proj = nn.Linear(d, d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Padding (token 0) reads as zeros in every convolution, as past the end of an unpadded sequence, so an
        utterance's encoding does not depend on the other utterances of its batch."""
        real = (tokens != 0)[:, None].to(self.embed.weight.dtype)  # [B, 1, S]
        x = self.embed(tokens).transpose(1, 2)  # [B, D, S]
        for conv in self.convs:
            x = conv(x * real)
        return self.proj(x.transpose(1, 2))  # [B, S, D]


class DecoderPrenet(nn.Module):
    """Grouped frames [B, T, r * n_mels] -> [B, T, D]: Linear + ReLU layers with dropout that stays on at inference
    (Tacotron 2's prenet, fairseq ``Prenet``), then a projection to the model width."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dims = [cfg.n_mels * cfg.frames_per_step] + [cfg.prenet_dim] * cfg.prenet_layers
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.dropout = cfg.prenet_dropout
        self.proj = nn.Linear(dims[-1], cfg.embed_dim)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames
        for layer in self.layers:
            x = F.dropout(F.relu(layer(x)), p=self.dropout, training=True)
        return self.proj(x)


class Postnet(nn.Module):
    """Residual frames [B, T, C] from 5 conv layers (BatchNorm, tanh except the last, dropout), fairseq ``Postnet``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.postnet_kernel % 2 == 0:
            raise ValueError(f"model.postnet_kernel must be odd, got {cfg.postnet_kernel}")
        c, k, n = cfg.n_mels * cfg.frames_per_step, cfg.postnet_kernel, cfg.postnet_layers
        self.convs = nn.ModuleList()
        for i in range(n):
            last = i == n - 1
            conv = nn.Conv1d(c if i == 0 else cfg.postnet_dim, c if last else cfg.postnet_dim, k, padding=k // 2)
            nn.init.xavier_uniform_(conv.weight, nn.init.calculate_gain("linear" if last else "tanh"))
            layers = [conv, nn.BatchNorm1d(conv.out_channels)] + ([] if last else [nn.Tanh()])
            self.convs.append(nn.Sequential(*layers, nn.Dropout(cfg.postnet_dropout)))

    def forward(self, x: torch.Tensor, step_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, T, C], step_mask [B, T] (True = real step): the steps past an utterance's end read as zeros in
        every convolution, as past the end of an unpadded one."""
        real = None if step_mask is None else step_mask[:, None].to(x.dtype)  # [B, 1, T]
        x = x.transpose(1, 2)  # [B, C, T]
        for conv in self.convs:
            x = conv(x if real is None else x * real)
        return x.transpose(1, 2)  # [B, T, C]


class ScaledPositions(nn.Module):
    """x + alpha * sinusoid(positions offset..), alpha a learned scalar (fairseq ``pos_emb_alpha``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:  # x [B, T, D]
        pos = sinusoidal_positions(x.shape[1], self.dim, offset, dtype=x.dtype, device=x.device)  # [T, D]
        return x + self.alpha * pos


class TransformerTTS(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.vocab_size <= 0:
            raise ValueError("model.vocab_size is unset: the recipe resolves it from data.text before building")
        self.cfg = cfg
        self.group = cfg.n_mels * cfg.frames_per_step
        self.encoder_prenet = EncoderPrenet(cfg)
        self.encoder_positions = ScaledPositions(cfg.embed_dim)
        common = {"embed_dim": cfg.embed_dim, "num_heads": cfg.num_heads, "ffn_dim": cfg.ffn_dim,
                  "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout, "activation": cfg.activation,
                  "norm_first": True}
        layers = attention_layers(cfg)  # {site: the attention of each layer}
        self.encoder = TransformerEncoder(cfg.encoder_layers, attention=layers["encoder_self"], **common)
        self.decoder_prenet = DecoderPrenet(cfg)
        self.decoder_positions = ScaledPositions(cfg.embed_dim)
        self.decoder = TransformerDecoder(cfg.decoder_layers, self_attention=layers["decoder_self"],
                                          cross_attention=layers["cross"], **common)
        self.dropout = nn.Dropout(cfg.dropout)
        self.frame_head = nn.Linear(cfg.embed_dim, self.group)
        self.stop_head = nn.Linear(cfg.embed_dim, 1)
        self.postnet = Postnet(cfg)

    # ------------------------------------------------------------------------------------------------ pieces
    def encode(self, tokens: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """tokens [B, S] (0 = pad), token_mask [B, S] (True = real) -> memory [B, S, D]."""
        x = self.dropout(self.encoder_positions(self.encoder_prenet(tokens)))
        return self.encoder(x, token_mask)

    def decoder_input(self, prev: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Previous grouped frames [B, t, r * n_mels] -> decoder input [B, t, D] at positions offset.."""
        return self.dropout(self.decoder_positions(self.decoder_prenet(prev), offset))

    def heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Decoder output [B, t, D] -> (grouped frames before the postnet [B, t, r * n_mels], stop logits [B, t])."""
        return self.frame_head(h), self.stop_head(h).squeeze(-1)

    # -------------------------------------------------------------------------------------- teacher forcing
    def forward(self, tokens: torch.Tensor, token_mask: torch.Tensor, prev: torch.Tensor,
                step_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Teacher-forced decoding -> (frames [B, T, r * n_mels], the same after the postnet, stop logits [B, T]).

        Args:
            tokens: [B, S] the texts' ids.
            token_mask: [B, S] bool, True = real token.
            prev: [B, T, r * n_mels] the target groups shifted right by one step.
            step_mask: [B, T] bool, True = real step, or None (all real).
        """
        memory = self.encode(tokens, token_mask)
        h = self.decoder(self.decoder_input(prev), memory, token_mask, step_mask)
        frames, stop = self.heads(h)
        return frames, frames + self.postnet(frames, step_mask), stop

    # ----------------------------------------------------------------------------------------- decoding
    # the frame-model protocol of lavo_zoo.nn.search.generate_frames: encode / init_cache / decode_step
    def init_cache(self, memory: torch.Tensor, token_mask: torch.Tensor) -> DecoderCache:
        """The decoder's cache for a batch of encoded sources (cross caches computed once)."""
        return self.decoder.init_cache(memory, token_mask)

    def decode_step(self, prev: torch.Tensor, cache: DecoderCache) -> tuple[torch.Tensor, torch.Tensor, DecoderCache]:
        """One decoder step: prev [N, 1, r * n_mels] (the last predicted group, zeros at first) ->
        (next group before the postnet [N, r * n_mels], stop logit [N], cache)."""
        h, cache = self.decoder.step(self.decoder_input(prev, cache.position), cache)  # [N, 1, D]
        frames, stop = self.heads(h[:, 0])
        return frames, stop, cache

    def ungroup(self, grouped: torch.Tensor) -> torch.Tensor:
        """[B, T / r, r * n_mels] -> [B, T, n_mels]."""
        return grouped.reshape(grouped.shape[0], -1, self.cfg.n_mels)


def group_frames(mel: torch.Tensor, lengths: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor]:
    """mel [B, T, n_mels], lengths [B] -> (grouped [B, T // r, r * n_mels], grouped lengths [B]); the last
    T mod r frames of each utterance are dropped, as fairseq's ``pack_frames``."""
    steps = mel.shape[1] // r
    grouped = mel[:, :steps * r].reshape(mel.shape[0], steps, r * mel.shape[2])
    return grouped, lengths // r


def shift_right(grouped: torch.Tensor) -> torch.Tensor:
    """Decoder inputs: a zero group, then every target group but the last ([B, T, C] -> [B, T, C])."""
    return torch.cat([grouped.new_zeros(grouped[:, :1].shape), grouped[:, :-1]], dim=1)


def tacotron2_loss(frames: torch.Tensor, post: torch.Tensor, stop_logits: torch.Tensor, target: torch.Tensor,
                   lengths: torch.Tensor, pos_weight: float = 5.0) -> tuple[torch.Tensor, dict[str, float]]:
    """fairseq's ``tacotron2`` criterion over the real steps: L1 + MSE before and after the postnet, stop BCE.

    Args:
        frames: [B, T, C] the decoder's frames.
        post: [B, T, C] the frames after the postnet.
        stop_logits: [B, T] the stop logits.
        target: [B, T, C] the target frames.
        lengths: [B] real steps (the stop target is 1 at the last).
        pos_weight: the stop BCE's weight on the positive (last-step) target.

    Returns:
        (the loss, its parts as floats for logging).
    """
    steps = torch.arange(target.shape[1], device=target.device)[None]  # [1, T]
    mask = steps < lengths[:, None]  # [B, T]
    stop_target = (steps == (lengths[:, None] - 1)).float()  # [B, T]
    tgt, out, out_post = target[mask], frames[mask], post[mask]  # [N, C]
    l1 = F.l1_loss(out, tgt) + F.l1_loss(out_post, tgt)
    mse = F.mse_loss(out, tgt) + F.mse_loss(out_post, tgt)
    bce = F.binary_cross_entropy_with_logits(stop_logits[mask], stop_target[mask],
                                             pos_weight=torch.tensor(pos_weight, device=target.device))
    return l1 + mse + bce, {"l1": l1.item(), "mse": mse.item(), "stop_bce": bce.item()}
