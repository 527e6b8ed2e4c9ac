"""Search (lavo_zoo.nn.search): beam search against exhaustive enumeration on next-token tables, greedy == beam 1,
batched-with-padding == one source at a time on a real TransformerDecoder, lengths, n-gram ban, stop criteria."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from lavo_zoo.errors import InputError
from lavo_zoo.nn.search import AnyStop, EosStop, StepOutput, StopProbability, generate, generate_frames
from lavo_zoo.nn.transformer import TransformerDecoder, TransformerEncoder

PAD, BOS, EOS = 0, 1, 2


@dataclass
class TableCache:
    prefix: torch.Tensor  # [N, t] tokens fed so far (BOS first)
    source: torch.Tensor  # [N] which table


class TableModel:
    """Next-token log-probabilities from a table indexed by (source, position, last token, previous token):
    the distribution depends on the prefix, not only on the last token. The source id is src[:, 0]."""

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table.log_softmax(-1)  # [n_src, L, V, V, V]
        self.steps = 0

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return src

    def init_cache(self, memory: torch.Tensor, src_mask: torch.Tensor) -> TableCache:
        return TableCache(memory.new_zeros(memory.shape[0], 0), memory[:, 0])

    def decode_step(self, tokens: torch.Tensor, cache: TableCache) -> tuple[torch.Tensor, TableCache]:
        self.steps += 1
        prefix = torch.cat([cache.prefix, tokens], 1)
        t = prefix.shape[1] - 1
        prev = prefix[:, -2] if t >= 1 else torch.full_like(tokens[:, 0], BOS)
        return self.table[cache.source, t, prefix[:, -1], prev], TableCache(prefix, cache.source)

    def log_prob(self, source: int, seq: list[int]) -> float:
        full = [BOS] + seq
        return sum(float(self.table[source, t, full[t], full[t - 1] if t else BOS, full[t + 1]])
                   for t in range(len(seq)))


def _brute_force(model: TableModel, source: int, V: int, max_len: int, min_len: int, length_penalty: float,
                 ngram: int) -> tuple[list[int], float]:
    """Best normalised score over every sequence the constraints allow, by enumeration."""
    best, best_score = None, -math.inf
    others = [v for v in range(V) if v != EOS]
    for L in range(1, max_len + 1):
        if L - 1 < min_len and L < max_len:
            continue
        for body in itertools.product(others, repeat=L - 1):
            seq = list(body) + [EOS]
            if ngram and len({tuple(seq[i:i + ngram]) for i in range(L - ngram + 1)}) < L - ngram + 1:
                continue
            score = model.log_prob(source, seq) / L ** length_penalty
            if score > best_score:
                best, best_score = seq, score
    return best, best_score


def _sources(ids: list[int], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    S = max(lengths)
    src = torch.tensor(ids)[:, None].expand(-1, S).clone()
    return src, torch.arange(S)[None] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("length_penalty,min_len,ngram", [(0.0, 0, 0), (1.0, 2, 0), (2.0, 0, 2), (0.5, 1, 1)])
def test_wide_beam_is_exhaustive_search(length_penalty: float, min_len: int, ngram: int) -> None:
    """With a beam wider than every frontier, beam search is exact: it returns the enumerated optimum."""
    g = torch.Generator().manual_seed(int(10 * length_penalty) + min_len + 7 * ngram)
    V, max_len = 5, 4
    model = TableModel(2.0 * torch.randn(3, max_len, V, V, V, generator=g, dtype=torch.float64))
    src, mask = _sources([0, 1, 2], [3, 5, 1])
    out = generate(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=128, max_len_b=max_len, min_len_b=min_len,
                   length_penalty=length_penalty, no_repeat_ngram_size=ngram)
    for b in range(3):
        best, score = _brute_force(model, b, V, max_len, min_len, length_penalty, ngram)
        assert out.tokens[b, :out.lengths[b]].tolist() == best
        assert out.scores[b].item() == pytest.approx(score, rel=1e-5)


def test_beam_finds_the_best_sequence_greedy_misses() -> None:
    """Hand-built table: greedy takes A (0.6) then A A EOS (0.6 * 0.4 * 1.0 = 0.24); the best is B EOS (0.4 * 0.9)."""
    A, B = 3, 4
    V = 5
    table = torch.full((1, 4, V, V, V), 1e-9, dtype=torch.float64)
    table[0, 0, BOS, :, A], table[0, 0, BOS, :, B] = 0.6, 0.4
    table[0, 1, A, :, A], table[0, 1, A, :, B], table[0, 1, A, :, EOS] = 0.4, 0.3, 0.3
    table[0, 1, B, :, EOS], table[0, 1, B, :, A], table[0, 1, B, :, B] = 0.9, 0.05, 0.05
    table[0, 2, :, :, EOS] = 1.0
    table[0, 3, :, :, EOS] = 1.0
    model = TableModel(table.log())
    src, mask = _sources([0], [2])
    kw = {"bos_id": BOS, "eos_id": EOS, "max_len_b": 4, "length_penalty": 0.0}
    greedy = generate(model, src, mask, beam_size=1, **kw)
    beam = generate(model, src, mask, beam_size=2, **kw)
    assert greedy.tokens[0, :greedy.lengths[0]].tolist() == [A, A, EOS]
    assert beam.tokens[0, :beam.lengths[0]].tolist() == [B, EOS]
    assert beam.scores[0].item() == pytest.approx(math.log(0.36), rel=1e-6)
    assert greedy.scores[0].item() == pytest.approx(math.log(0.24), rel=1e-6)


def test_beam_size_one_is_greedy() -> None:
    g = torch.Generator().manual_seed(3)
    model = TableModel(torch.randn(4, 9, 6, 6, 6, generator=g, dtype=torch.float64))
    src, mask = _sources([0, 1, 2, 3], [4, 9, 2, 6])
    kw = {"bos_id": BOS, "eos_id": EOS, "max_len_a": 0.5, "max_len_b": 4, "min_len_b": 1, "no_repeat_ngram_size": 2}
    beam1 = generate(model, src, mask, beam_size=1, **kw)
    # reference greedy, one source at a time, written out directly
    for b in range(4):
        seq, total = [], 0.0
        limit = int(0.5 * int(mask[b].sum()) + 4)
        while True:
            cache = TableCache(torch.tensor([[BOS] + seq[:-1]]) if seq else torch.zeros(1, 0, dtype=torch.long),
                               torch.tensor([b]))
            lp, _ = model.decode_step(torch.tensor([[seq[-1] if seq else BOS]]), cache)
            lp = lp[0].clone()
            grams = {tuple(seq[i:i + 2]) for i in range(len(seq) - 1)}
            for v in range(6):
                if seq and (seq[-1], v) in grams:
                    lp[v] = -math.inf
            if len(seq) < 1:
                lp[EOS] = -math.inf
            if len(seq) + 1 >= limit:
                tok = EOS
            else:
                tok = int(lp.argmax())
            total += float(model.table[b, len(seq), ([BOS] + seq)[-1], ([BOS] + seq)[-2] if seq else BOS, tok])
            seq.append(tok)
            if tok == EOS:
                break
        assert beam1.tokens[b, :beam1.lengths[b]].tolist() == seq
        assert beam1.scores[b].item() == pytest.approx(total / len(seq), rel=1e-6)


def test_lengths_follow_the_source_length() -> None:
    V = 6
    never_eos = torch.zeros(3, 40, V, V, V, dtype=torch.float64)
    never_eos[..., EOS] = -1e4  # EOS is never chosen: every hypothesis runs to its maximum length
    src, mask = _sources([0, 1, 2], [10, 4, 1])
    for beam in (1, 3):
        out = generate(TableModel(never_eos), src, mask, bos_id=BOS, eos_id=EOS, beam_size=beam, max_len_a=1.5,
                       max_len_b=2)
        assert out.lengths.tolist() == [17, 8, 3]  # int(1.5 * S + 2)
        assert all(out.tokens[b, out.lengths[b] - 1] == EOS for b in range(3))  # EOS forced at the maximum
        assert (out.tokens[1, 8:] == PAD).all()
    eos_first = torch.zeros(3, 40, V, V, V, dtype=torch.float64)
    eos_first[..., EOS] = 1e4
    out = generate(TableModel(eos_first), src, mask, bos_id=BOS, eos_id=EOS, beam_size=2, min_len_a=0.5, min_len_b=1)
    assert out.lengths.tolist() == [7, 4, 2]  # int(0.5 * S + 1) tokens, then EOS


def test_no_repeat_ngram() -> None:
    V = 5
    repeat = torch.zeros(1, 30, V, V, V, dtype=torch.float64)
    repeat[..., EOS] = -1e4
    for last in range(V):
        repeat[:, :, last, :, last] = 5.0  # strongly prefers repeating the last token
    src, mask = _sources([0], [3])
    for n in (1, 2, 3):
        out = generate(TableModel(repeat), src, mask, bos_id=BOS, eos_id=EOS, beam_size=2, max_len_b=12,
                       no_repeat_ngram_size=n)
        seq = out.tokens[0, :out.lengths[0] - 1].tolist()
        grams = [tuple(seq[i:i + n]) for i in range(len(seq) - n + 1)]
        assert len(grams) == len(set(grams)), (n, seq)
    out = generate(TableModel(repeat), src, mask, bos_id=BOS, eos_id=EOS, beam_size=2, max_len_b=6)
    assert len(set(out.tokens[0, :5].tolist())) == 1  # without the ban it repeats


class Seq2Seq(nn.Module):
    """A tiny translation model on the shared encoder-decoder core, exposing the search protocol."""

    def __init__(self, vocab: int = 11, dim: int = 16, attention: str = "lavo") -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        spec = {"name": attention, "window_size": 3} if attention == "lavo" else attention
        self.encoder = TransformerEncoder(2, dim, 2, 32, attention=spec)
        self.decoder = TransformerDecoder(2, dim, 2, 32, self_attention=spec, cross_attention=attention)
        self.out = nn.Linear(dim, vocab)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(src), src_mask)

    def init_cache(self, memory: torch.Tensor, src_mask: torch.Tensor):
        return self.decoder.init_cache(memory, src_mask)

    def decode_step(self, tokens: torch.Tensor, cache):
        y, cache = self.decoder.step(self.embed(tokens), cache)
        return 3.0 * self.out(y[:, -1]), cache


@pytest.mark.parametrize("attention", ["lavo", "sdpa"])
def test_batched_with_padding_equals_one_source_at_a_time(attention: str) -> None:
    torch.manual_seed(0)
    model = Seq2Seq(attention=attention).double().eval()
    lengths = [7, 3, 5, 1]
    src = torch.randint(3, 11, (4, 7))
    mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    src = src.masked_fill(~mask, PAD)
    for beam in (1, 3):
        kw = {"bos_id": BOS, "eos_id": EOS, "beam_size": beam, "max_len_a": 1.0, "max_len_b": 3,
              "no_repeat_ngram_size": 2, "length_penalty": 1.0}
        batch = generate(model, src, mask, **kw)
        for b, n in enumerate(lengths):
            alone = generate(model, src[b:b + 1, :n], mask[b:b + 1, :n], **kw)
            assert batch.tokens[b, :batch.lengths[b]].tolist() == alone.tokens[0, :alone.lengths[0]].tolist()
            assert batch.scores[b].item() == pytest.approx(alone.scores[0].item(), rel=1e-6)


@dataclass
class Ramp:
    """Frame model: each frame is the previous one plus 1; stop logit = frame[0] - the source's target length."""

    targets: torch.Tensor  # [B]

    def encode(self, src, src_mask):
        return src

    def init_cache(self, memory, src_mask):
        return self.targets.double()

    def decode_step(self, previous, cache):
        frame = previous[:, 0] + 1.0  # [N, C]
        return frame, (frame[:, 0] - cache) * 10.0 + 0.5, cache


def test_frames_stop_on_probability() -> None:
    targets = torch.tensor([3, 6, 1])
    src, mask = _sources([0, 0, 0], [4, 2, 3])
    out = generate_frames(Ramp(targets), src, mask, torch.zeros(2, dtype=torch.float64), max_len_b=50)
    assert out.lengths.tolist() == [3, 6, 1]  # sigmoid(10 (t+1 - target) + 0.5) > 0.5 from frame `target` on
    assert out.frames.shape == (3, 6, 2)
    torch.testing.assert_close(out.frames[1, :, 0], torch.arange(1, 7, dtype=torch.float64))
    assert (out.frames[0, 3:] == 0).all()
    out = generate_frames(Ramp(targets), src, mask, torch.zeros(2, dtype=torch.float64), max_len_a=1.0,
                          max_len_b=1, min_len_b=2)
    assert out.lengths.tolist() == [3, 3, 2]  # max int(S + 1) = 5, 3, 4; min 2
    # a stop criterion of one's own, combined with the probability
    first_over = AnyStop(StopProbability(0.5), lambda o: o.frames[:, 1] >= 2)
    out = generate_frames(Ramp(targets), src, mask, torch.zeros(2, dtype=torch.float64), stop=first_over)
    assert out.lengths.tolist() == [2, 2, 1]


def test_bad_input() -> None:
    model = TableModel(torch.zeros(1, 4, 5, 5, 5))
    src, mask = _sources([0, 0], [3, 2])
    mask[1] = False
    with pytest.raises(InputError, match=r"no real token in batch row\(s\) \[1\]"):
        generate(model, src, mask, bos_id=BOS, eos_id=EOS)
    with pytest.raises(InputError, match="beam_size"):
        generate(model, src, mask | True, bos_id=BOS, eos_id=EOS, beam_size=0)
    with pytest.raises(InputError, match="eos_id or a stop"):
        generate(model, src, mask | True, bos_id=BOS, eos_id=None)
    with pytest.raises(InputError, match="StopProbability"):
        EosStop(EOS)(StepOutput(0, frames=src))


def test_impossible_source_gives_an_empty_hypothesis() -> None:
    """4 tokens, each usable once (no_repeat_ngram_size=1), EOS not before 10: every hypothesis dies at step 3."""
    table = torch.zeros(2, 12, 4, 4, 4, dtype=torch.float64)
    src, mask = _sources([0, 1], [2, 9])
    out = generate(TableModel(table), src, mask, bos_id=BOS, eos_id=EOS, beam_size=2, max_len_b=12,
                   min_len_a=1.0, min_len_b=1, no_repeat_ngram_size=1)
    assert out.lengths.tolist() == [4, 0] and out.scores[1] == float("-inf")  # source 0: min_len 3, then EOS
