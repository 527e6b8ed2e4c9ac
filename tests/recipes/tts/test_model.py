"""Transformer-TTS: fairseq's loss, frame grouping, prenet/postnet, cached decoding equal to the full decoder."""
import pytest
import torch

from lavo_zoo.recipes.tts.model import TransformerTTS, group_frames, shift_right, tacotron2_loss
from tests.recipes.tts.helpers import SITES, tiny_config


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


def test_unknown_site_and_unsupported_pattern_are_refused() -> None:
    from lavo_zoo.errors import ConfigError

    with pytest.raises(ConfigError, match="cross"):
        TransformerTTS(tiny_config(cross={"name": "local"}))
