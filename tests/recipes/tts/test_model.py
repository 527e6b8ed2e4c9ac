"""Transformer-TTS: fairseq's loss, frame grouping, prenet/postnet, cached decoding equal to the full decoder,
synthesis stopping on the stop token."""
import pytest
import torch

from lavo_zoo.attention import AttentionSpec, SiteAttention
from lavo_zoo.recipes.tts.model import (
    ModelConfig,
    TransformerTTS,
    group_frames,
    shift_right,
    synthesize,
    tacotron2_loss,
)


def tiny_config(**attention) -> ModelConfig:
    return ModelConfig(vocab_size=20, n_mels=8, frames_per_step=2, embed_dim=16, num_heads=2, ffn_dim=32,
                       encoder_layers=2, decoder_layers=2, dropout=0.0, attention_dropout=0.0, prenet_dim=16,
                       prenet_dropout=0.0, postnet_layers=3, postnet_dim=16, encoder_conv_layers=2,
                       attention=SiteAttention(**{site: AttentionSpec.from_config(v, site, "the test")
                                                  for site, v in attention.items()}))


def test_loss_is_fairseqs_tacotron2_criterion() -> None:
    torch.manual_seed(0)
    B, T, C = 3, 7, 6
    frames, post, target = torch.randn(B, T, C), torch.randn(B, T, C), torch.randn(B, T, C)
    stop = torch.randn(B, T)
    lengths = torch.tensor([7, 4, 1])
    loss, parts = tacotron2_loss(frames, post, stop, target, lengths, pos_weight=5.0)
    rows = [(b, t) for b in range(B) for t in range(int(lengths[b]))]
    n = len(rows) * C
    l1 = sum((frames[b, t] - target[b, t]).abs().sum() + (post[b, t] - target[b, t]).abs().sum() for b, t in rows) / n
    mse = sum(((frames[b, t] - target[b, t]) ** 2).sum() + ((post[b, t] - target[b, t]) ** 2).sum()
              for b, t in rows) / n
    bce = 0.0
    for b, t in rows:
        y = 1.0 if t == lengths[b] - 1 else 0.0
        p = torch.sigmoid(stop[b, t])
        bce -= 5.0 * y * torch.log(p) + (1 - y) * torch.log(1 - p)
    bce /= len(rows)
    torch.testing.assert_close(loss, l1 + mse + bce, rtol=1e-5, atol=1e-5)
    assert parts["stop_bce"] == pytest.approx(float(bce), rel=1e-5)


def test_grouping_and_shift() -> None:
    mel = torch.arange(2 * 9 * 3, dtype=torch.float).reshape(2, 9, 3)
    grouped, lengths = group_frames(mel, torch.tensor([9, 6]), 4)
    assert grouped.shape == (2, 2, 12) and lengths.tolist() == [2, 1]  # the last 9 mod 4 frames are dropped
    torch.testing.assert_close(grouped[0, 1], mel[0, 4:8].reshape(-1))
    prev = shift_right(grouped)
    assert prev[:, 0].abs().sum() == 0 and torch.equal(prev[:, 1], grouped[:, 0])


def test_prenet_dropout_stays_on_at_inference_and_postnet_keeps_shape() -> None:
    cfg = tiny_config()
    cfg.prenet_dropout = 0.5
    model = TransformerTTS(cfg).eval()
    x = torch.randn(2, 5, 16)
    assert not torch.equal(model.decoder_prenet(x), model.decoder_prenet(x))
    assert model.postnet(x).shape == (2, 5, 16)
    assert model.encoder_prenet(torch.randint(1, 20, (2, 9))).shape == (2, 9, 16)


SITES = [{}, {"decoder_self": {"name": "lavo", "num_bases": 4, "window_size": 2}},
         {"decoder_self": {"name": "local", "window_size": 2}},
         {"encoder_self": {"name": "lavo", "num_bases": 4, "window_size": 2}},
         {"cross": {"name": "lavo", "num_bases": 4}}]


@pytest.mark.parametrize("sites", SITES, ids=lambda s: "-".join(f"{k}={v['name']}" for k, v in s.items()) or "sdpa")
def test_cached_decoding_equals_the_full_decoder(sites: dict) -> None:
    torch.manual_seed(1)
    model = TransformerTTS(tiny_config(**sites)).double().eval()
    tokens = torch.randint(3, 20, (2, 11))
    tokens[1, 7:] = 0  # a padded source
    mask = tokens != 0
    prev = torch.randn(2, 9, 16, dtype=torch.double)
    frames, post, stop = model(tokens, mask, prev)
    cache = model.init_cache(model.encode(tokens, mask), mask)
    for t in range(prev.shape[1]):
        step_frames, step_stop, cache = model.decode_step(prev[:, t:t + 1], cache)
        torch.testing.assert_close(step_frames, frames[:, t], rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(step_stop, stop[:, t], rtol=1e-9, atol=1e-9)
    assert post.shape == frames.shape


def test_synthesis_stops_on_the_stop_token_or_at_max_frames() -> None:
    torch.manual_seed(2)
    model = TransformerTTS(tiny_config()).eval()
    tokens = torch.randint(3, 20, (2, 6))
    mask = tokens != 0
    with torch.no_grad():
        model.stop_head.bias.fill_(50.0)
    frames, lengths, fed = synthesize(model, tokens, mask, max_frames=20)
    assert lengths.tolist() == [2, 2] and frames.shape == (2, 2, 8)  # one step of 2 frames
    with torch.no_grad():
        model.stop_head.bias.fill_(-50.0)
    frames, lengths, fed = synthesize(model, tokens, mask, max_frames=20)
    assert lengths.tolist() == [20, 20] and frames.shape == (2, 20, 8) and fed.shape == (2, 10, 16)
    # without prenet dropout the output is the teacher-forced model's on its own fed-back (pre-postnet) groups
    model.decoder_prenet.dropout = 0.0
    frames, lengths, fed = synthesize(model, tokens, mask, max_frames=8)
    pre, _, cache = [], None, model.init_cache(model.encode(tokens, mask), mask)
    prev = torch.zeros(2, 1, 16)
    for _ in range(4):
        group, _, cache = model.decode_step(prev, cache)
        pre.append(group)
        prev = group[:, None]
    pre = torch.stack(pre, 1)  # [2, 4, 16]
    torch.testing.assert_close(fed, pre, rtol=1e-5, atol=1e-5)
    _, post, _ = model(tokens, mask, shift_right(pre))
    torch.testing.assert_close(frames, model.ungroup(post), rtol=1e-5, atol=1e-5)


def test_synthesis_at_given_lengths_ignores_the_stop_token_and_follows_the_same_path() -> None:
    from lavo_zoo.errors import InputError

    torch.manual_seed(3)
    model = TransformerTTS(tiny_config()).eval()
    model.decoder_prenet.dropout = 0.0
    tokens = torch.randint(3, 20, (2, 6))
    mask = tokens != 0
    with torch.no_grad():
        model.stop_head.bias.fill_(-50.0)  # never stops on its own: runs to max_frames
    _, _, free_fed = synthesize(model, tokens, mask, max_frames=12)
    with torch.no_grad():
        model.stop_head.bias.fill_(50.0)  # would stop after the first group
    _, lengths, fed = synthesize(model, tokens, mask, max_frames=4, frames=torch.tensor([7, 12]))
    assert lengths.tolist() == [8, 12]  # ceil(7 / 2) and 12 / 2 groups of 2 frames, beyond max_frames too
    assert fed.shape == (2, 6, 16) and bool((fed[0, 4:] == 0).all())
    torch.testing.assert_close(fed[1], free_fed[1], rtol=1e-6, atol=1e-6)  # the same greedy path, stop aside
    torch.testing.assert_close(fed[0, :4], free_fed[0, :4], rtol=1e-6, atol=1e-6)
    with pytest.raises(InputError, match="one positive frame count"):
        synthesize(model, tokens, mask, max_frames=4, frames=torch.tensor([7, 0]))


def test_unknown_site_and_unsupported_pattern_are_refused() -> None:
    from lavo_zoo.errors import ConfigError

    with pytest.raises(ConfigError, match="cross"):
        TransformerTTS(tiny_config(cross={"name": "local"}))


def test_speed_benchmark_decodes_exactly_the_asked_frames() -> None:
    from lavo_zoo.bench.tts import DECODERS, measure

    for spec in DECODERS.values():
        res = measure(spec, frames=16, at=[8, 16], size="tiny", device="cpu")
        assert res["frames"] == 16 and set(res["per_frame_ms"]) == {8, 16} and res["rtf"] > 0


def test_numbers_are_spelled_out_and_unspeakable_characters_named() -> None:
    from lavo_zoo.recipes.tts.text import dropped_characters, normalise, number_words

    assert [number_words(n) for n in (0, 13, 40, 105, 1905, 2_000_001)] == [
        "zero", "thirteen", "forty", "one hundred five", "one thousand nine hundred five", "two million one"]
    assert normalise("In 1905, 3.5% of 1,000 men.") == \
        "in one thousand nine hundred five, three point five of one thousand men."
    assert dropped_characters("Café 42% ☃") == ["%", "☃"]  # the accent is stripped, not dropped
    assert normalise("☃☃☃") == "" and dropped_characters("☃☃☃") == ["☃"]


@pytest.mark.parametrize("sites", SITES, ids=lambda s: "-".join(f"{k}={v['name']}" for k, v in s.items()) or "sdpa")
def test_an_utterance_is_synthesised_the_same_alone_or_in_any_batch(sites: dict) -> None:
    torch.manual_seed(4)
    model = TransformerTTS(tiny_config(**sites)).double().eval()
    with torch.no_grad():  # BatchNorm shifts make padded positions non-zero after a convolution
        for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)):
            bn.bias.uniform_(-1, 1)
            bn.running_mean.uniform_(-1, 1)
        model.stop_head.bias.fill_(-50.0)  # every utterance decodes max_frames: same decoder steps alone and batched
    short, long = torch.randint(3, 20, (1, 5)), torch.randint(3, 20, (1, 12))
    alone, lengths, _ = synthesize(model, short, short != 0, max_frames=12)
    batch = torch.cat([torch.cat([short, short.new_zeros(1, 7)], 1), long])  # right-padded beside a longer one
    together, batch_lengths, _ = synthesize(model, batch, batch != 0, max_frames=12)
    assert batch_lengths[0] == lengths[0]
    torch.testing.assert_close(together[:1, :int(lengths[0])], alone[:, :int(lengths[0])], rtol=1e-10, atol=1e-10)
    # the postnet reads zeros past an utterance's end, as past the end of an unpadded batch
    frames = torch.randn(2, 6, model.group, dtype=torch.double)
    mask = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    torch.testing.assert_close(model.postnet(frames, mask)[:1, :4], model.postnet(frames[:1, :4]), rtol=1e-10,
                               atol=1e-10)
