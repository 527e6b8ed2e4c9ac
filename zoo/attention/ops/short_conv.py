"""The short causal convolution of the recurrent mechanisms (flash-linear-attention's ``ShortConvolution``,
Mamba's ``conv1d``): one filter of ``kernel_size`` taps per channel over the current and the previous
``kernel_size - 1`` tokens, then an optional SiLU. It lets a token's key see the tokens just before it (on MQAR:
the key beside its value), which the recurrences themselves cannot do. Its streaming state is the last
``kernel_size - 1`` inputs.

Padding: a convolution over a padded row would mix the padding into the real tokens' windows. The mechanisms
therefore run on the row with its real tokens moved to the front (:func:`~lavo_zoo.attention.ops.padding.pack`,
order kept) and put the outputs back (:func:`~lavo_zoo.attention.ops.padding.gather_rows` with the inverse order),
so a padded row gives what the row alone gives, wherever the padding is (left, right, inside), as
flash-linear-attention's layers do by unpadding.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ShortConv(nn.Module):
    """Depthwise causal convolution over [B, T, C] with a carried state of the last ``kernel_size - 1`` inputs.

    ``kernel_size`` 0 is no convolution (only the activation applies).
    """

    def __init__(self, channels: int, kernel_size: int, activation: bool = True, bias: bool = False) -> None:
        super().__init__()
        if kernel_size < 0:
            raise ValueError(f"conv_size must be >= 0 (0: no short convolution), got {kernel_size}")
        self.kernel_size = kernel_size
        self.activation = activation
        self.weight = nn.Parameter(torch.empty(channels, kernel_size)) if kernel_size else None  # [C, taps]
        self.bias = nn.Parameter(torch.empty(channels)) if kernel_size and bias else None
        if kernel_size:  # nn.Conv1d's initialisation (fan-in = the taps of one channel)
            nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
            if self.bias is not None:
                nn.init.uniform_(self.bias, -1 / math.sqrt(kernel_size), 1 / math.sqrt(kernel_size))

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x [B, T, C], cache [B, kernel_size - 1, C] (the inputs before x; None: zeros) -> (y [B, T, C], the new
        cache, None without a convolution)."""
        if not self.kernel_size:
            return (F.silu(x) if self.activation else x), None
        K = self.kernel_size
        if cache is None:
            cache = x.new_zeros(x.shape[0], K - 1, x.shape[2])
        elif cache.shape != (x.shape[0], K - 1, x.shape[2]):
            raise ValueError(f"state holds a short convolution's last inputs of shape {list(cache.shape)}, this "
                             f"layer's are [{x.shape[0]}, {K - 1}, {x.shape[2]}] (conv_size {K}): the state is from "
                             "a layer of another configuration; continue with the layer that returned it")
        if not x.shape[1]:  # nothing to convolve: the cache stays as it is
            return (F.silu(x) if self.activation else x), cache
        full = torch.cat([cache.to(x.dtype), x], 1)  # [B, K - 1 + T, C]
        y = F.conv1d(full.transpose(1, 2), self.weight[:, None, :].to(x.dtype),
                     None if self.bias is None else self.bias.to(x.dtype), groups=x.shape[2]).transpose(1, 2)
        return (F.silu(y) if self.activation else y), full[:, full.shape[1] - (K - 1):]

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, activation={'silu' if self.activation else 'none'}"


def naive_short_conv(conv: ShortConv, x: torch.Tensor) -> torch.Tensor:
    """The convolution by its definition, y_t = act(bias + sum_j w[:, j] x_{t - K + 1 + j}) (zero before the start):
    x [B, T, C] -> [B, T, C]. Tests only."""
    if not conv.kernel_size:
        return F.silu(x) if conv.activation else x
    K = conv.kernel_size
    y = torch.zeros_like(x) if conv.bias is None else conv.bias.to(x.dtype).expand_as(x).clone()
    for t in range(x.shape[1]):
        for j in range(K):
            s = t - K + 1 + j
            if s >= 0:
                y[:, t] = y[:, t] + conv.weight[:, j].to(x.dtype) * x[:, s]
    return F.silu(y) if conv.activation else y
