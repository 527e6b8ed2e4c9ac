"""The summarizer (infer.py): a document or a list of them, beam and length within their ranges (the same check as
`lavo-zoo summarize`), a search that cannot fit refused before it starts, and no summary from non-finite scores."""
import math
from pathlib import Path

import pytest
import torch

from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.errors import InputError
from lavo_zoo.recipes.summarization.cli import summarize
from lavo_zoo.recipes.summarization.infer import Summarizer
from tests.helpers import run_command
from tests.recipes.summarization.helpers import SMALL

TEXT = "The river rose overnight. Roads were closed in the valley.\n\nOfficials expect the water to fall by Friday."


@pytest.fixture(scope="module")
def summarizer() -> Summarizer:
    """A tiny model with random weights (the config's sizes and tokenizer are all it reads)."""
    recipe, cfg = resolve_config("summarization/tiny-lavo-noncausal", SMALL)
    cfg = recipe.resolve(cfg)
    torch.manual_seed(0)
    return Summarizer(recipe, cfg, recipe.build_model(cfg).eval(), "cpu", checkpoint="tiny")


@pytest.mark.parametrize("documents,message", [
    (("one", "two"), r"documents must be a document \(str\) or a list of them, got tuple of 2; give a list"),
    (b"bytes", "got bytes"),
    (5, "got int"),
    (["fine", 5], r"documents\[1\] must be a document \(a str, or a list of article texts\), got int"),
    ([["an article", 3]], r"documents\[0\] must be a document"),
])
def test_other_inputs_are_refused(summarizer: Summarizer, documents, message) -> None:
    with pytest.raises(InputError, match=message):
        summarizer.summarize(documents)


def test_a_document_a_list_of_them_and_none(summarizer: Summarizer) -> None:
    one = summarizer.summarize(TEXT, beam=2)
    assert isinstance(one, str) and summarizer.summarize([TEXT], beam=2) == [one]
    assert summarizer.summarize([]) == []


@pytest.mark.parametrize("option,value,words", [
    ("beam", 0, "beam must be an integer from 1 to 128, got 0"),
    ("beam", 10001, "beam must be an integer from 1 to 128, got 10001"),
    ("max_length", 0, "max_length must be an integer from 1 to 24, got 0"),
    ("max_length", 25, r"max_length must be an integer from 1 to 24, got 25 \(the longest summary this model"),
    ("batch_size", 0, "batch_size must be an integer from 1 to 4096, got 0"),
])
def test_options_are_checked(summarizer: Summarizer, option, value, words) -> None:
    with pytest.raises(InputError, match=words):
        summarizer.summarize(TEXT, **{option: value})
    assert summarizer.summarize(TEXT, max_length=24)  # at the model's limit: fine


def test_the_command_refuses_an_unbounded_beam_before_loading_anything(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text(TEXT)
    code, out = run_command(summarize, [str(tmp_path / "no-checkpoint"), "--input", str(tmp_path / "in.txt"),
                                        "--beam", "10001"])
    assert code == 2 and "Invalid value for '--beam': must be an integer from 1 to 128, got 10001" in out


def test_a_search_that_cannot_fit_is_refused_before_it_starts(summarizer: Summarizer, monkeypatch) -> None:
    from lavo_zoo.engine import memory

    wide = summarizer.memory_estimate(1, 64, summarizer.cfg.model.max_target_positions)
    assert wide >= 64 * summarizer.cfg.model.vocab_size * 4  # at least the scores of every hypothesis
    monkeypatch.setattr(memory, "available_memory", lambda device: wide // 2)
    with pytest.raises(InputError, match="a beam of 64 over batches of 1 documents needs about .* lower beam or "
                                         "batch_size"):
        summarizer.summarize(TEXT, beam=64)
    assert summarizer.summarize(TEXT, beam=2)  # a narrower beam fits


def test_non_finite_scores_are_refused(summarizer: Summarizer) -> None:
    recipe, cfg = summarizer.recipe, summarizer.cfg
    broken = Summarizer(recipe, cfg, recipe.build_model(cfg).eval(), "cpu")
    with torch.no_grad():
        for p in broken.model.parameters():
            p.fill_(math.nan)
    with pytest.raises(InputError, match="output for document 0 is not finite"):
        broken.summarize(TEXT, beam=2)
