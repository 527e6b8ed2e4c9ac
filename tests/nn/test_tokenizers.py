import pytest

from lavo_zoo.errors import UsageError
from lavo_zoo.nn.tokenizers import get_tokenizer

TEXT = "Hello world! Ünïcödé text, numbers 12345 and  spaces\n\nnew paragraph <|endoftext|> end."


def test_gpt2_matches_published_ids():
    tok = get_tokenizer("gpt2")
    assert tok.vocab_size == 50257 and tok.eod == 50256
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode(" the quick brown fox") == [262, 2068, 7586, 21831]


@pytest.mark.parametrize("name", ["gpt2", "bytes"])
def test_round_trip(name):
    tok = get_tokenizer(name)
    ids = tok.encode(TEXT)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == TEXT
    doc = tok.encode_document(TEXT)
    assert doc[-1] == tok.eod and doc[:-1].tolist() == ids
    assert tok.eod not in ids  # the document separator never occurs inside text


def test_unknown_tokenizer_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown tokenizer 'gpt3'"):
        get_tokenizer("gpt3")
