"""Informer (Zhou et al., AAAI 2021) as its reference ``models/model.py``, with every attention from the registry:
ProbSparse self-attention in the encoder (with distilling between layers), ProbSparse masked self-attention and a
registry cross attention (LAVO in the paper's configs) in the decoder, a start token of ``label_len`` known steps
followed by zero placeholders, and a linear projection to the output channels.

Deliberate differences from the reference: the distilling convolution pads by 1 on every torch version (the
reference's string compare of ``torch.__version__`` pads by 2 on torch >= 1.10), and there is no "mix" reshape of
the decoder self-attention's heads (it lets later positions leak into earlier ones).

Its layers are the shared post-LN blocks of :mod:`lavo_zoo.nn.transformer` (``EncoderBlock``; a
``TransformerDecoder`` whose final LayerNorm is the decoder norm), which are Informer's layers: LN(x + Dropout(
Attention(x))), then LN(x + Dropout(FFN(x))) with FFN = Linear, activation, dropout, Linear (its kernel-1
convolutions). Only the distilling between encoder layers is Informer's own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from lavo_zoo.attention import SITE_PATTERNS, AttentionSpec, SiteAttention, SiteSchedule
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.config import NonNegativeInt, PositiveInt, Probability
from lavo_zoo.nn.position import sinusoidal_positions
from lavo_zoo.nn.transformer import EncoderBlock, TransformerDecoder


def informer_attention() -> SiteAttention:
    """Informer's attention: ProbSparse (factor 5) self-attention in encoder and decoder, full cross attention."""
    return SiteAttention(encoder_self=AttentionSpec("probsparse", {"factor": 5}),
                         decoder_self=AttentionSpec("probsparse", {"factor": 5}), cross=AttentionSpec("sdpa"))


@dataclass
class ModelConfig:
    """Informer's model arguments (defaults: the reference's ``main_informer.py``; its d_model, n_heads, e_layers,
    d_layers, ffn_dim are embed_dim, num_heads, encoder_layers, decoder_layers, ffn_dim here)."""

    embed_dim: PositiveInt = 512
    num_heads: PositiveInt = 8
    encoder_layers: PositiveInt = 2
    decoder_layers: PositiveInt = 1
    ffn_dim: PositiveInt = 2048
    dropout: Probability = 0.05
    activation: Literal["gelu", "relu"] = "gelu"
    distil: bool = True
    # per site: encoder_self (noncausal), decoder_self (causal), cross; "sdpa" is Informer's attn=full
    attention: SiteAttention = field(default_factory=informer_attention)
    # a hybrid per site: the attention of each of the site's layers, a list repeated over them whose entries naming
    # that site's model.attention mechanism take its options (decoder_self: [lavo, lavo, lavo, sdpa])
    attention_schedule: SiteSchedule = field(default_factory=SiteSchedule)
    # sizes from the data (TimeSeriesRecipe.resolve), saved with the run so eval needs no CSV; 0 = unresolved
    channels: NonNegativeInt = 0  # input series (Informer's enc_in / dec_in)
    out_channels: NonNegativeInt = 0  # forecast series (c_out: 1 for features=MS, else channels)
    time_features: NonNegativeInt = 0  # timeF calendar features of data.freq
    # the training series, saved so that forecasts of new data need neither the training CSV nor its rows
    columns: list[str] = field(default_factory=list)  # input columns in order (the target last for M / MS)
    scaler_mean: list[float] = field(default_factory=list)  # per column, over the training split
    scaler_std: list[float] = field(default_factory=list)  # per column (ddof=0; 1 for a constant column)
    step: str = ""  # the time step between rows, a pandas offset (h, 15min, MS, B); "" = unknown

    def __post_init__(self) -> None:
        resolve_schedules(self)


class DataEmbedding(nn.Module):
    """Value (circular conv, kernel 3) + timeF (linear) + sinusoidal position embedding, then dropout."""

    def __init__(self, channels: int, time_features: int, embed_dim: int, max_len: int, dropout: float) -> None:
        super().__init__()
        self.value = nn.Conv1d(channels, embed_dim, kernel_size=3, padding=1, padding_mode="circular")
        nn.init.kaiming_normal_(self.value.weight, mode="fan_in", nonlinearity="leaky_relu")
        self.time = nn.Linear(time_features, embed_dim)
        self.register_buffer("positions", sinusoidal_positions(max_len, embed_dim), persistent=False)  # [max_len, D]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor) -> torch.Tensor:
        """x [B, L, C], x_mark [B, L, F] -> [B, L, D]."""
        value = self.value(x.transpose(1, 2)).transpose(1, 2)  # [B, L, D]
        return self.dropout(value + self.positions[:x.shape[1]] + self.time(x_mark))


class DistilLayer(nn.Module):
    """Self-attention distilling: circular conv (kernel 3), batch norm, ELU, max-pool (stride 2) halves the length."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(embed_dim, embed_dim, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(embed_dim)
        self.pool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, D] -> [B, ceil(L / 2), D]."""
        return self.pool(F.elu(self.norm(self.conv(x.transpose(1, 2))))).transpose(1, 2)


class Informer(nn.Module):
    """Encoder-decoder forecaster: (history, its time features, start token, decoder time features) -> horizon."""

    def __init__(self, cfg: ModelConfig, seq_len: int, label_len: int, pred_len: int) -> None:
        super().__init__()
        if min(cfg.channels, cfg.out_channels, cfg.time_features) < 1:
            raise ValueError("model.channels / out_channels / time_features are unset: resolve the config first "
                             "(TimeSeriesRecipe.resolve(cfg))")
        self.label_len, self.pred_len, self.c_out = label_len, pred_len, cfg.out_channels
        d, drop, act, ffn = cfg.embed_dim, cfg.dropout, cfg.activation, cfg.ffn_dim
        self.enc_embedding = DataEmbedding(cfg.channels, cfg.time_features, d, seq_len, drop)
        self.dec_embedding = DataEmbedding(cfg.channels, cfg.time_features, d, label_len + pred_len, drop)
        layers = attention_layers(cfg)  # {site: the attention of each layer}
        self.encoder = nn.ModuleList(EncoderBlock(spec.build(d, cfg.num_heads, SITE_PATTERNS["encoder_self"]), ffn,
                                                  drop, act, norm_first=False) for spec in layers["encoder_self"])
        self.distil = nn.ModuleList(DistilLayer(d) for _ in range(cfg.encoder_layers - 1)) if cfg.distil else None
        self.enc_norm = nn.LayerNorm(d)
        # post-LN decoder blocks; the stack's final LayerNorm is Informer's decoder norm
        self.decoder = TransformerDecoder(cfg.decoder_layers, d, cfg.num_heads, ffn, layers["decoder_self"],
                                          layers["cross"], drop, activation=act, norm_first=False,
                                          final_norm=True)
        self.projection = nn.Linear(d, cfg.out_channels)

    def encode(self, x: torch.Tensor, x_mark: torch.Tensor) -> torch.Tensor:
        """x [B, seq_len, C], x_mark [B, seq_len, F] -> [B, Le, D] (Le = seq_len halved per distilling step)."""
        h = self.enc_embedding(x, x_mark)
        for i, layer in enumerate(self.encoder):
            h = layer(h)
            if self.distil is not None and i < len(self.distil):
                h = self.distil[i](h)
        return self.enc_norm(h)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor, y_start: torch.Tensor,
                y_mark: torch.Tensor) -> torch.Tensor:
        """The forecast [B, pred_len, c_out].

        Args:
            x: [B, seq_len, C] the input window.
            x_mark: [B, seq_len, F] its time features.
            y_start: [B, label_len, C] the known start of the decoder's input (the window's end).
            y_mark: [B, label_len + pred_len, F] the decoder's time features.
        """
        memory = self.encode(x, x_mark)
        placeholder = y_start.new_zeros(y_start.shape[0], self.pred_len, y_start.shape[2])  # [B, pred_len, C]
        h = self.dec_embedding(torch.cat([y_start, placeholder], dim=1), y_mark)  # [B, label+pred, D]
        return self.projection(self.decoder(h, memory))[:, -self.pred_len:]
