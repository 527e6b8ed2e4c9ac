"""The text front ends (text.py): normalised characters with numbers spelled out, espeak-ng phonemes."""
import pytest

from lavo_zoo.recipes.tts.espeak import espeak


def test_numbers_are_spelled_out_and_unspeakable_characters_named() -> None:
    from lavo_zoo.recipes.tts.text import dropped_characters, normalise, number_words

    assert [number_words(n) for n in (0, 13, 40, 105, 1905, 2_000_001)] == [
        "zero", "thirteen", "forty", "one hundred five", "one thousand nine hundred five", "two million one"]
    assert normalise("In 1905, 3.5% of 1,000 men.") == \
        "in one thousand nine hundred five, three point five of one thousand men."
    assert dropped_characters("Café 42% ☃") == ["%", "☃"]  # the accent is stripped, not dropped
    assert normalise("☃☃☃") == "" and dropped_characters("☃☃☃") == ["☃"]


def test_text_front_ends() -> None:
    from lavo_zoo.recipes.tts.text import EOS, UNK, TextEncoder

    chars = TextEncoder("chars")
    ids = chars.encode("Hello, “World” — Café 42!")
    assert ids[-1] == EOS and UNK not in ids
    assert chars.decode(ids) == 'hello, "world" - cafe forty two!'  # numbers are spelled out
    phonemes = TextEncoder("phonemes")
    long = "Printing, in the only sense with which we are at present concerned, differs from most arts."
    for sentence in ("The quick brown fox jumps over the lazy dog.", long):
        ids = phonemes.encode(sentence)
        assert UNK not in ids and ids[-1] == EOS  # every symbol espeak-ng emits is in the vocabulary
        assert phonemes.decode(ids) == espeak().phonemize(sentence)
    with pytest.raises(ValueError, match="chars, phonemes"):
        TextEncoder("words")
