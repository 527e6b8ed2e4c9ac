"""Generation and the perplexity loops (infer.py), and the ``generate`` command and Python API that call them."""
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lavo_zoo.evaluators.perplexity import PerplexityTable
from lavo_zoo.recipes.lm.cli import generate
from lavo_zoo.recipes.lm.infer import bucket_edges, generate_ids, stream_perplexity
from tests.recipes.lm.helpers import CAUSAL_ATTENTIONS, IDS, tiny_config, tiny_model


def test_generate_command_continues_the_prompt_from_a_checkpoint(tmp_path):
    from lavo_zoo.engine.checkpoint_io import save_checkpoint

    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4})
    model = recipe.build_model(cfg).eval()
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, model, cfg, "lm")
    result = CliRunner().invoke(generate, [str(ckpt), "--prompt", "Once", "--temperature", "0",
                                           "--max-new-tokens", "12"])
    assert result.exit_code == 0, result.output
    expected = generate_ids(model, list(b"Once"), 12, temperature=0, stop=0)
    assert result.output.startswith("Once" + bytes(i for i in expected if i).decode("utf-8", errors="replace"))


def test_generate_help_ends_with_examples():
    result = CliRunner().invoke(generate, ["--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output and result.output.rstrip().splitlines()[-1].strip().startswith("lavo-zoo")


def test_the_python_api_is_what_the_command_prints(tmp_path):
    """``lavo_zoo.load`` returns the LanguageModel the command uses: the same greedy continuation, one per prompt of a
    list, and the same with the recurrent state carried as with the sequence re-run every step."""
    import lavo_zoo
    from lavo_zoo.engine.checkpoint_io import save_checkpoint

    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4})
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, recipe.build_model(cfg).eval(), cfg, "lm")
    lm = lavo_zoo.load(ckpt, device="cpu")
    one = lm.generate("Once", max_new_tokens=12, temperature=0)
    assert lm.generate(["Once", "Twice"], max_new_tokens=12, temperature=0)[0] == one
    assert lm.generate("Once", max_new_tokens=12, temperature=0, stream_state=False) == one
    result = CliRunner().invoke(generate, [str(ckpt), "--prompt", "Once", "--temperature", "0",
                                           "--max-new-tokens", "12"])
    assert result.exit_code == 0 and result.output.startswith("Once" + one), result.output
    sampled = [lm.generate("Once", max_new_tokens=12, temperature=1.0, seed=3) for _ in range(2)]
    assert sampled[0] == sampled[1]  # a seed fixes the sample


@pytest.mark.parametrize("attention,options", CAUSAL_ATTENTIONS[:2], ids=IDS[:2])
def test_streaming_evaluation_equals_parallel_evaluation(attention, options):
    _, _, model = tiny_model(attention, options)
    tokens = np.random.default_rng(0).integers(0, 256, 301).astype(np.uint8)
    table = PerplexityTable()
    stream_perplexity(model, tokens, table, chunk=37, bucket_start=32)
    ids = torch.from_numpy(tokens.astype(np.int64))[None]  # [1, 301]
    with torch.no_grad():
        nll = model(ids[:, :-1], ids[:, 1:])[0]  # [300]
    metrics = table.compute()
    assert table.num_samples == 300
    assert metrics["ppl@stream"] == pytest.approx(math.exp(nll.double().mean()), rel=1e-5)
    for lo, hi in [(0, 32), (32, 64), (64, 128), (128, 256), (256, 512)]:
        assert metrics[f"ppl@ctx:{lo + 1}-{hi}"] == pytest.approx(math.exp(nll[lo:hi].double().mean()), rel=1e-5)


@pytest.mark.parametrize("attention,options", CAUSAL_ATTENTIONS, ids=IDS)
def test_generation_with_state_equals_greedy_full_reruns(attention, options):
    _, _, model = tiny_model(attention, options)
    prompt = list(b"Once upon a time")
    with_state = generate_ids(model, prompt, 24, temperature=0, use_state=True)
    reruns = generate_ids(model, prompt, 24, temperature=0, use_state=False)
    assert with_state == reruns and len(with_state) == 24


@pytest.mark.parametrize("attention,options", [("lavo", {"num_bases": 4, "window_size": 4}), ("sdpa", {})])
def test_a_long_prompt_runs_in_chunks_with_the_state_and_gives_the_same_tokens(attention, options, monkeypatch):
    """The prompt is fed PREFILL_CHUNK tokens at a time through the carried state (its length multiplies no
    activation): the tokens are those of full re-runs."""
    from lavo_zoo.recipes.lm import infer

    _, _, model = tiny_model(attention, options)
    monkeypatch.setattr(infer, "PREFILL_CHUNK", 7)
    prompt = list(b"Once upon a time, in a land far away, ")  # 38 tokens: 5 whole chunks and a part
    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda idx, *a, **k: calls.append(idx.shape[1]) or forward(idx, *a, **k))
    with_state = generate_ids(model, prompt, 12, temperature=0, use_state=True)
    assert max(calls) == 7 and sum(calls) == len(prompt) + 11
    assert with_state == generate_ids(model, prompt, 12, temperature=0, use_state=False)


def test_sampling_is_reproducible_with_a_seed():
    _, _, model = tiny_model("vanilla", {})
    a = generate_ids(model, [1, 2, 3], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7)
    b = generate_ids(model, [1, 2, 3], 10, temperature=1.0, top_k=20, top_p=0.9, seed=7)
    assert a == b


def test_bucket_edges_double():
    assert bucket_edges(32, 300) == [0, 32, 64, 128, 256, 512]


def _language_model(attention: str = "lavo", options: dict | None = None):
    from lavo_zoo.recipes.lm.infer import LanguageModel

    recipe, cfg, model = tiny_model(attention, options if options is not None else {"num_bases": 8, "window_size": 4})
    return LanguageModel(recipe, cfg, model, "cpu", checkpoint="tiny")


@pytest.mark.parametrize("prompt", [b"Once", ("Once", "Twice"), np.array(["Once"]), torch.tensor([1, 2]), 5, None,
                                    ["Once", 3]], ids=["bytes", "tuple", "array", "tensor", "int", "None", "mixed"])
def test_generate_takes_a_text_or_a_list_of_texts_and_refuses_the_rest(prompt) -> None:
    from lavo_zoo.errors import InputError

    lm = _language_model()
    with pytest.raises(InputError, match=r"prompt(\[1\])? must be a text \(str\)"):
        lm.generate(prompt, max_new_tokens=2)
    assert lm.generate(["Once"], max_new_tokens=2, temperature=0) == [lm.generate("Once", max_new_tokens=2,
                                                                                  temperature=0)]
    assert lm.generate([], max_new_tokens=2) == []


@pytest.mark.parametrize("option,value", [("max_new_tokens", 0), ("max_new_tokens", -1), ("temperature", -1.0),
                                          ("temperature", math.nan), ("top_k", -5), ("top_p", 0.0),
                                          ("top_p", 1.5), ("seed", -1)])
def test_generate_checks_each_option_as_the_command_does(tmp_path, option, value) -> None:
    """The predictor refuses what `lavo-zoo generate` refuses, with the same words (the one check of limits)."""
    from lavo_zoo import limits
    from lavo_zoo.engine.checkpoint_io import save_checkpoint
    from lavo_zoo.errors import InputError

    lm = _language_model()
    words = f"must be {getattr(limits, option.upper()).describe()}"
    with pytest.raises(InputError, match=f"{option} {words}"):
        lm.generate("Once", **{"max_new_tokens": 2, option: value})
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, lm.model, lm.cfg, "lm")
    result = CliRunner().invoke(generate, [str(ckpt), "--prompt", "Once", f"--{option.replace('_', '-')}",
                                           str(value)])
    assert result.exit_code == 2 and words in result.output, result.output


def test_a_decoding_state_that_grows_past_memory_is_refused_before_generating(monkeypatch) -> None:
    """A KV cache grows with every token: its growth is measured and a generation whose cache would not fit is
    refused; LAVO's state stops growing once its window is full, so the same request is not refused."""
    from lavo_zoo.engine import memory
    from lavo_zoo.errors import InputError

    monkeypatch.setattr(memory, "available_memory", lambda device: 50_000_000)
    sdpa = _language_model("sdpa", {})  # 2 layers x keys and values x 32 floats: 512 bytes a token
    with pytest.raises(InputError, match="generating up to 1,000,004 tokens .* needs about 512 MB .* lower "
                                         "max_new_tokens"):
        sdpa.generate("Once", max_new_tokens=1_000_000)
    _language_model()._check_state_fits(1_000_004)  # LAVO: a bounded state, nothing to refuse
    # a hybrid: only its sdpa layer's cache grows (256 bytes a token); the refusal names that layer
    from lavo_zoo.recipes.lm.infer import LanguageModel

    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4}, model={"attention_schedule": "lavo+sdpa"})
    hybrid = LanguageModel(recipe, cfg, recipe.build_model(cfg).eval(), "cpu", checkpoint="tiny")
    assert [(s.attention, s.per_token) for s in hybrid.layer_states()] == [("lavo", 0), ("sdpa", 256)]
    with pytest.raises(InputError, match=r"needs about 256 MB .*the state of layer 1 \(sdpa\) grows with every"):
        hybrid.generate("Once", max_new_tokens=1_000_000)


def test_non_finite_scores_are_refused() -> None:
    from lavo_zoo.errors import InputError

    lm = _language_model()
    with torch.no_grad():
        next(lm.model.parameters()).fill_(math.nan)
    with pytest.raises(InputError, match="not finite"):
        lm.generate("Once", max_new_tokens=2)


def test_a_prompt_with_a_lone_surrogate_is_an_input_error_naming_it() -> None:
    from lavo_zoo.errors import InputError

    lm = _language_model()
    with pytest.raises(InputError, match=r"prompt\[1\] holds '\\udcff' at position 2, a character that has no UTF-8"):
        lm.generate(["fine", "ab\udcffc"], max_new_tokens=2)
