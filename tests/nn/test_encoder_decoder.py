"""Encoder-decoder core (lavo_zoo.nn.transformer): blocks against torch's own Transformer layers, cached incremental
decoding against the teacher-forced forward for every registry attention at every decoder site, cache reordering,
and the bad-input errors. float64; tolerance 1e-9 absolute / 1e-7 relative (rounding of chunked sums only)."""
from __future__ import annotations

import itertools
import zlib

import pytest
import torch
from torch import nn

from lavo_zoo.attention import ATTENTIONS, attention_class
from lavo_zoo.errors import ConfigError, InputError, OptionError
from lavo_zoo.nn.transformer import DecoderCache, TransformerDecoder, TransformerEncoder, build_site_attention
from lavo_zoo.testing import randomise_zero_parameters

D, H, F = 16, 2, 32
ATOL, RTOL = 1e-9, 1e-7
NAMES = ATTENTIONS.names()
# (self, cross) of a 2-layer decoder: every mechanism at every decoder site it supports, sdpa at the other
SITES = ([(n, "sdpa") for n in NAMES if "causal" in attention_class(n).patterns]
         + [("sdpa", n) for n in NAMES if "cross" in attention_class(n).patterns and n != "sdpa"])
CHUNKS = [1, 3, 2, 5, 1, 1]  # 13 target positions in uneven steps
SRC_LEN, TGT_LEN = [9, 5, 1], [13, 10, 4]


def _gen(request) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def _decoder(self_attn: str, cross: str, **kw) -> TransformerDecoder:
    torch.manual_seed(0)
    # EPE / relative biases start at 0: randomise them so that misuse shows
    return randomise_zero_parameters(TransformerDecoder(2, D, H, F, self_attention=self_attn, cross_attention=cross,
                                                        **kw)).double().eval()


def _mask(lengths: list[int], T: int) -> torch.Tensor:
    return torch.arange(T)[None] < torch.tensor(lengths)[:, None]  # [B, T] right padding


def _decode(dec: TransformerDecoder, x: torch.Tensor, cache: DecoderCache, sizes: list[int]
            ) -> tuple[torch.Tensor, DecoderCache]:
    ys, start, offset = [], 0, cache.position
    for n in sizes:
        assert cache.position == offset + start
        y, cache = dec.step(x[:, start:start + n], cache)
        ys.append(y)
        start += n
    return torch.cat(ys, 1), cache


def _mixes(dec: TransformerDecoder) -> bool:
    block = dec.layers[0]
    return "causal" in block.self_attn.mixes_queries or "cross" in block.cross_attn.mixes_queries


@pytest.mark.parametrize("self_attn,cross,norm_first", [(s, c, True) for s, c in SITES]
                         + [("lavo", "lavo", False), ("sdpa", "sdpa", False)])  # post-LN: residual wiring
def test_incremental_decoding_equals_teacher_forcing(self_attn: str, cross: str, norm_first: bool, request) -> None:
    """Padded batch (sources of 9, 5 and 1 tokens; targets of 13, 10 and 4), uneven chunks: every real target
    position decodes to the teacher-forced output. Mechanisms whose queries interact at a site (``mixes_queries``)
    equal the forward over each prefix instead (what re-running the prefix means for them)."""
    g = _gen(request)
    dec = _decoder(self_attn, cross, norm_first=norm_first)
    B, S, T = 3, max(SRC_LEN), sum(CHUNKS)
    memory = torch.randn(B, S, D, generator=g, dtype=torch.float64)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    mm, tm = _mask(SRC_LEN, S), _mask(TGT_LEN, T)
    y, cache = _decode(dec, x, dec.init_cache(memory, mm), CHUNKS)
    assert cache.position == T
    if _mixes(dec):
        ends = list(itertools.accumulate(CHUNKS))
        ref = torch.cat([dec(x[:, :e], memory, mm)[:, e - n:e] for e, n in zip(ends, CHUNKS)], 1)
        torch.testing.assert_close(y, ref, atol=ATOL, rtol=RTOL)
    else:
        ref = dec(x, memory, mm, tm)
        torch.testing.assert_close(y[tm], ref[tm], atol=ATOL, rtol=RTOL)
        # padded source tokens never matter
        memory2 = torch.where(mm[..., None], memory, 100 * torch.randn(B, S, D, generator=g, dtype=torch.float64))
        y2, _ = _decode(dec, x, dec.init_cache(memory2, mm), CHUNKS)
        torch.testing.assert_close(y2, y, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("self_attn,cross", [("lavo", "lavo"), ("sdpa", "sdpa"), ("longshort", "probsparse"),
                                             ("performer", "vanilla")])
def test_reordered_cache_decodes_like_the_reordered_batch(self_attn: str, cross: str, request) -> None:
    g = _gen(request)
    dec = _decoder(self_attn, cross)
    memory = torch.randn(3, 8, D, generator=g, dtype=torch.float64)
    mm = _mask([8, 3, 6], 8)
    x, nxt = torch.randn(3, 6, D, generator=g, dtype=torch.float64), torch.randn(5, 4, D, generator=g,
                                                                                 dtype=torch.float64)
    _, cache = _decode(dec, x, dec.init_cache(memory, mm), [2, 3, 1])
    index = torch.tensor([2, 0, 0, 1, 2])  # beam-style: rows duplicated and permuted, batch grows 3 -> 5
    y, _ = _decode(dec, nxt, cache.reorder(index), [1, 3])
    ref, _ = _decode(dec, torch.cat([x[index], nxt], 1), dec.init_cache(memory[index], mm[index]), [6, 1, 3])
    torch.testing.assert_close(y, ref[:, 6:], atol=ATOL, rtol=RTOL)
    # cross=False keeps the per-source caches: right when rows only move between beams of the same source
    same = torch.tensor([0, 0, 1])
    memory_same = memory[[0, 0, 1]]
    _, cache = _decode(dec, x, dec.init_cache(memory_same, mm[[0, 0, 1]]), [6])
    y, _ = dec.step(nxt[:3, :1], cache.reorder(torch.tensor([1, 0, 2]), cross=False))
    ref, _ = dec.step(nxt[:3, :1], cache.reorder(same.new_tensor([1, 0, 2])))
    torch.testing.assert_close(y, ref, atol=ATOL, rtol=RTOL)


def _copy_mha(ours, mha: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        mha.out_proj.weight.copy_(ours.out_proj.weight)
        mha.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_ffn_norms(block, layer, norms: list[str], residuals: list[str]) -> None:
    with torch.no_grad():
        layer.linear1.load_state_dict(block.ffn.fc1.state_dict())
        layer.linear2.load_state_dict(block.ffn.fc2.state_dict())
        for n, r in zip(norms, residuals):
            getattr(layer, n).load_state_dict(getattr(block, r).norm.state_dict())


@pytest.mark.parametrize("norm_first,activation", [(True, "gelu"), (False, "relu")])
def test_sdpa_stacks_equal_torch_transformer(norm_first: bool, activation: str, request) -> None:
    """With sdpa at every site, the encoder and decoder are torch.nn.Transformer{Encoder,Decoder}Layer stacks
    (an independent implementation) with the same weights, pre-LN and post-LN, padded sources and targets."""
    g = _gen(request)
    torch.manual_seed(1)
    enc = TransformerEncoder(2, D, H, F, attention="sdpa", activation=activation, norm_first=norm_first).double()
    dec = TransformerDecoder(2, D, H, F, activation=activation, norm_first=norm_first).double()
    kw = {"d_model": D, "nhead": H, "dim_feedforward": F, "dropout": 0.0, "activation": activation,
          "batch_first": True, "norm_first": norm_first, "dtype": torch.float64}
    t_enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), 2, norm=nn.LayerNorm(D, dtype=torch.float64)
                                  if norm_first else None, enable_nested_tensor=False)
    t_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), 2, norm=nn.LayerNorm(D, dtype=torch.float64)
                                  if norm_first else None)
    for ours, theirs in zip(enc.layers, t_enc.layers):
        _copy_mha(ours.attn, theirs.self_attn)
        _copy_ffn_norms(ours, theirs, ["norm1", "norm2"], ["attn_res", "ffn_res"])
    for ours, theirs in zip(dec.layers, t_dec.layers):
        _copy_mha(ours.self_attn, theirs.self_attn)
        _copy_mha(ours.cross_attn, theirs.multihead_attn)
        _copy_ffn_norms(ours, theirs, ["norm1", "norm2", "norm3"], ["self_res", "cross_res", "ffn_res"])
    if norm_first:
        t_enc.norm.load_state_dict(enc.norm.state_dict())
        t_dec.norm.load_state_dict(dec.norm.state_dict())
    else:
        assert enc.norm is None and dec.norm is None
    enc.eval(), dec.eval(), t_enc.eval(), t_dec.eval()
    src, tgt = torch.randn(3, 9, D, generator=g, dtype=torch.float64), torch.randn(3, 7, D, generator=g,
                                                                                   dtype=torch.float64)
    sm, tm = _mask([9, 4, 6], 9), _mask([7, 7, 2], 7)
    memory = enc(src, sm)
    ref_memory = t_enc(src, src_key_padding_mask=~sm)
    torch.testing.assert_close(memory[sm], ref_memory[sm], atol=ATOL, rtol=RTOL)
    y = dec(tgt, memory, sm, tm)
    causal = torch.ones(7, 7, dtype=torch.bool).triu(1)  # True = not allowed
    ref = t_dec(tgt, memory, tgt_mask=causal, tgt_key_padding_mask=~tm, memory_key_padding_mask=~sm)
    torch.testing.assert_close(y[tm], ref[tm], atol=ATOL, rtol=RTOL)


def test_encoder_ignores_padded_tokens(request) -> None:
    g = _gen(request)
    torch.manual_seed(0)
    enc = randomise_zero_parameters(TransformerEncoder(2, D, H, F, attention={"name": "lavo", "window_size": 4}))
    enc = enc.double().eval()
    x = torch.randn(2, 11, D, generator=g, dtype=torch.float64)
    m = _mask([11, 5], 11)
    x2 = torch.where(m[..., None], x, 100 * torch.randn(2, 11, D, generator=g, dtype=torch.float64))
    torch.testing.assert_close(enc(x2, m)[m], enc(x, m)[m], atol=ATOL, rtol=RTOL)


def test_options_reach_the_blocks() -> None:
    dec = TransformerDecoder(1, D, H, F, self_attention={"name": "lavo", "num_bases": 4, "window_size": 3},
                             cross_attention="sdpa", dropout=0.2, attention_dropout=0.1, activation="relu")
    block = dec.layers[0]
    assert block.self_attn.num_bases == 4 and block.self_attn.window_size == 3
    assert block.self_attn.pattern == "causal" and block.cross_attn.pattern == "cross"
    assert block.self_attn.dropout == block.cross_attn.dropout == 0.1  # attention_dropout -> the `dropout` option
    assert isinstance(block.ffn.act, nn.ReLU) and block.ffn.dropout.p == 0.2 and block.ffn_res.dropout.p == 0.2
    enc = TransformerEncoder(1, D, H, F, attention={"name": "lavo", "dropout": 0.3}, attention_dropout=0.1)
    assert enc.layers[0].attn.dropout == 0.3  # the spec's own option wins
    assert TransformerEncoder(1, D, H, F, attention="performer", attention_dropout=0.1)  # no dropout option: ignored


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ConfigError, match="unknown attention site 'encoder'.*did you mean 'encoder_self'"):
        build_site_attention("lavo", D, H, "encoder")
    with pytest.raises(ConfigError, match="'local' does not support pattern 'cross'.*mechanisms with 'cross':.*lavo"):
        TransformerDecoder(1, D, H, F, cross_attention="local")
    with pytest.raises(ConfigError, match="'decoder_self': attention 'lara' does not support pattern 'causal'"):
        TransformerDecoder(1, D, H, F, self_attention="lara")
    with pytest.raises(OptionError, match="activation must be one of gelu, relu, got 'swish'"):
        TransformerEncoder(1, D, H, F, activation="swish")
    dec, other = TransformerDecoder(1, D, H, F), TransformerDecoder(1, D, H, F)
    memory = torch.randn(2, 5, D)
    with pytest.raises(InputError, match=r"memory_mask has no real token in batch row\(s\) \[1\]") as err:
        dec.init_cache(memory, _mask([5, 0], 5))
    assert err.value.exit_code == 2  # a usage error: the CLI exits 2 with the message, no traceback
    with pytest.raises(InputError, match="no real token"):
        TransformerEncoder(1, D, H, F)(memory, _mask([0, 3], 5))
    with pytest.raises(ValueError, match="no real token"):  # library callers can catch a ValueError
        dec(torch.randn(2, 3, D), memory, _mask([0, 0], 5))
    cache = dec.init_cache(memory)
    with pytest.raises(InputError, match="another decoder"):
        other.step(torch.randn(2, 1, D), cache)
    with pytest.raises(InputError, match=r"shape \[2, t >= 1, 16\]"):
        dec.step(torch.randn(3, 1, D), cache)
    with pytest.raises(InputError, match="cross=True"):
        cache.reorder(torch.tensor([0, 1, 1]), cross=False)
