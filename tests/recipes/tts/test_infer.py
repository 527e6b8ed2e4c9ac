"""Synthesis (infer.py): stopping on the stop token or at max_frames, at given lengths, the same alone or batched;
the Synthesizer's inputs, options, memory and finite output."""
import numpy as np
import pytest
import torch

from lavo_zoo.recipes.tts.infer import synthesize
from lavo_zoo.recipes.tts.model import TransformerTTS, shift_right
from tests.recipes.tts.helpers import SITES, tiny_config


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


@pytest.fixture(scope="module")
def synthesizer():
    """A tiny Synthesizer with random weights and unit feature statistics (no corpus needed)."""
    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.recipes.tts.infer import Synthesizer

    recipe, cfg = resolve_config("tts/tiny-lavo-causal", ["model.embed_dim=16", "model.num_heads=2",
                                                          "model.ffn_dim=32", "model.encoder_layers=1",
                                                          "model.decoder_layers=1", "model.prenet_dim=16",
                                                          "model.postnet_dim=16", "model.postnet_layers=2",
                                                          "model.encoder_conv_layers=1", "eval.max_frames=16",
                                                          "model.attention.decoder_self.num_bases=4"])
    n_mels = cfg.data.features().n_mels
    cfg.model.feature_mean, cfg.model.feature_std = [-4.0] * n_mels, [1.0] * n_mels
    recipe.resolve(cfg)
    torch.manual_seed(0)
    return Synthesizer(recipe, cfg, recipe.build_model(cfg).eval(), "cpu", checkpoint="tiny")


@pytest.mark.parametrize("call,texts,message", [
    ("speak", "Hello.", "texts must be a list of texts, got one str 'Hello.'; give \\[text\\]"),
    ("speak", ("Hello.",), r"texts must be a list of texts \(str\), got tuple of 1"),
    ("speak", ["Hello.", 5], r"texts\[1\] must be a text \(str\), got int"),
    ("synthesize", ("Hello.", "Bye."), r"text must be a text \(str\) or a list of them, got tuple of 2; give a list"),
    ("synthesize", b"Hello.", "got bytes"),
    ("synthesize", [""], "holds nothing this model can speak"),
])
def test_texts_of_other_types_are_refused(synthesizer, call, texts, message) -> None:
    from lavo_zoo.errors import InputError

    with pytest.raises(InputError, match=message):
        getattr(synthesizer, call)(texts)


def test_a_text_and_a_list_of_texts(synthesizer) -> None:
    wave, rate = synthesizer.synthesize("Hello.", max_frames=8)
    assert rate == synthesizer.sample_rate and wave.ndim == 1 and np.isfinite(wave).all()
    listed = synthesizer.synthesize(["Hello."], max_frames=8)
    assert len(listed) == 1 and np.array_equal(listed[0][0], wave)
    assert synthesizer.synthesize([]) == [] and synthesizer.speak([]) == []


@pytest.mark.parametrize("option,value", [("max_frames", 0), ("max_frames", -5), ("max_frames", 2.5),
                                          ("stop_threshold", float("nan")), ("stop_threshold", 2.0), ("seed", -1)])
def test_options_are_checked_by_the_predictor_and_the_command(synthesizer, tmp_path, option, value) -> None:
    from lavo_zoo import limits
    from lavo_zoo.errors import InputError
    from lavo_zoo.recipes.tts.cli import synthesize as command
    from tests.helpers import run_command

    words = f"must be {getattr(limits, option.upper()).describe()}"
    with pytest.raises(InputError, match=f"{option} {words}"):
        synthesizer.synthesize("Hello.", **{option: value})
    code, out = run_command(command, [str(tmp_path / "no-checkpoint"), "--text", "Hello.", "--out",
                                      str(tmp_path / "x.wav"), f"--{option.replace('_', '-')}", str(value)])
    assert code == 2 and words in out, out


def test_a_synthesis_that_cannot_fit_is_refused_before_it_starts(synthesizer, monkeypatch) -> None:
    from lavo_zoo.engine import memory
    from lavo_zoo.errors import InputError

    need = synthesizer.memory_estimate(1, 8, 1_000_000)
    assert need > 1_000_000 * (synthesizer.cfg.data.features().n_fft // 2 + 1) * 8  # Griffin-Lim's magnitudes
    monkeypatch.setattr(memory, "available_memory", lambda device: need // 2)
    with pytest.raises(InputError, match="synthesising 1 text.* for up to 1,000,000 frames needs about .* lower "
                                         "max_frames"):
        synthesizer.synthesize("Hello.", max_frames=1_000_000)


def test_a_text_too_long_to_fit_is_refused_before_the_front_end_reads_it(synthesizer, monkeypatch) -> None:
    """Its length in characters is checked first: no minutes of phonemes before the refusal."""
    from lavo_zoo.engine import memory
    from lavo_zoo.errors import InputError
    from lavo_zoo.recipes.tts import text

    text_ = "Printing, in the only sense. " * 1000
    monkeypatch.setattr(memory, "available_memory", lambda device: synthesizer.memory_estimate(1, 1000, 8))
    monkeypatch.setattr(text.TextEncoder, "encode", lambda *a: pytest.fail("the front end ran"))
    with pytest.raises(InputError, match="synthesising 1 text.* of up to 29,000 characters .* needs about .* give "
                                         "shorter or fewer texts"):
        synthesizer.synthesize(text_, max_frames=8)


def test_audio_that_is_not_finite_is_refused(synthesizer) -> None:
    from lavo_zoo.errors import InputError
    from lavo_zoo.recipes.tts.infer import Synthesizer

    broken = Synthesizer(synthesizer.recipe, synthesizer.cfg,
                         synthesizer.recipe.build_model(synthesizer.cfg).eval(), "cpu")
    with torch.no_grad():
        for p in broken.model.postnet.parameters():
            p.fill_(float("nan"))
    with pytest.raises(InputError, match="output for the text 'Hello.' is not finite"):
        broken.synthesize("Hello.", max_frames=8)
