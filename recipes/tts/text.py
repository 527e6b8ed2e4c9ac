"""Text front end: normalised characters (default) or IPA phonemes from espeak-ng, as id sequences.

Both vocabularies are fixed (so a checkpoint never needs the training data to rebuild its embedding): ids 0..3 are
``<pad>``, ``<eos>`` (appended to every source, as fairseq's TTS dictionary), ``<unk>`` and the word separator
(space); then the symbols. Characters: numbers are spelled out in English words (as LJSpeech's normalised
transcripts), the text is lower-cased, curly quotes and dashes made ASCII, anything else outside the symbol set
becomes a space (:func:`dropped_characters` names it), runs of spaces collapse.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

PAD, EOS, UNK, SPACE = 0, 1, 2, 3
SPECIALS = ("<pad>", "<eos>", "<unk>", " ")
PUNCTUATION = "!'(),-.:;?\""
CHARACTERS = "abcdefghijklmnopqrstuvwxyz" + PUNCTUATION
# every character espeak-ng's English voices emit in IPA mode (stress, length and tie marks included)
IPA = ("aɐɑɒæbβçdðeəɚɛɜɝfɡɣhɪiɨjklɫɬmnɲŋoɔøœpɹɾrsʃtθuʊʌvwʍxzʒʔˈˌːˑ̃ᵻʲ̩ʰ͡" + PUNCTUATION)
FRONT_ENDS = ("chars", "phonemes")
_REPLACE = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})


_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"), (100, "hundred"))


def number_words(n: int) -> str:
    """A non-negative integer in English words: 1905 -> 'one thousand nine hundred five'."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    for value, word in _SCALES:
        if n >= value:
            rest = n % value
            return f"{number_words(n // value)} {word}" + ("" if rest == 0 else " " + number_words(rest))
    raise AssertionError(n)


def spell_numbers(text: str) -> str:
    """Digits as English words ('3.5' -> 'three point five', '1,000' -> 'one thousand'); very long digit runs are
    read digit by digit."""
    def words(match: re.Match) -> str:
        whole, _, fraction = match.group(0).replace(",", "").partition(".")
        spoken = number_words(int(whole)) if len(whole) <= 15 else " ".join(_ONES[int(d)] for d in whole)
        if fraction:
            spoken += " point " + " ".join(_ONES[int(d)] for d in fraction)
        return spoken
    text = re.sub(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])", " ", text)  # '4th' -> '4 th', 'x2' -> 'x 2'
    return re.sub(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?", words, text)


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", spell_numbers(text).translate(_REPLACE)).encode("ascii", "ignore").decode()


def normalise(text: str) -> str:
    """Lower-cased ASCII-ish text with only the character vocabulary's symbols and single spaces."""
    text = "".join(c if c in CHARACTERS else " " for c in _ascii(text).lower())
    return re.sub(r" +", " ", text).strip()


def dropped_characters(text: str) -> list[str]:
    """The characters of ``text`` the character front end cannot speak and leaves out (besides spaces; accents are
    stripped, not dropped), in order of first appearance."""
    out: list[str] = []
    for c in spell_numbers(text).translate(_REPLACE):
        base = unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode().lower()
        if not c.isspace() and c not in out and (not base or any(b not in CHARACTERS for b in base)):
            out.append(c)
    return out


class TextEncoder:
    """Text -> ids [S] ending with ``EOS``, for front end ``chars`` or ``phonemes``."""

    def __init__(self, front_end: str = "chars") -> None:
        if front_end not in FRONT_ENDS:
            raise ValueError(f"unknown text front end '{front_end}'; choose one of {', '.join(FRONT_ENDS)}")
        self.front_end = front_end
        self.symbols = SPECIALS + tuple(CHARACTERS if front_end == "chars" else IPA)
        self.index = {s: i for i, s in enumerate(self.symbols)}

    @property
    def vocab_size(self) -> int:
        """Symbols, padding and end of sentence included."""
        return len(self.symbols)

    def symbols_of(self, text: str) -> str:
        """The symbol string the ids spell: normalised characters, or espeak-ng's IPA of the text."""
        if self.front_end == "chars":
            return normalise(text)
        from lavo_zoo.recipes.tts.espeak import espeak

        return re.sub(r" +", " ", espeak().phonemize(text)).strip()

    def encode(self, text: str) -> list[int]:
        """The symbol ids of ``text``, end of sentence last (unknown symbols as ``UNK``)."""
        return [self.index.get(c, UNK) for c in self.symbols_of(text)] + [EOS]

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (padding and end of sentence dropped)."""
        return "".join(self.symbols[i] for i in ids if i not in (PAD, EOS))


@lru_cache(maxsize=2)
def text_encoder(front_end: str = "chars") -> TextEncoder:
    """The text front end ``front_end`` (``chars`` | ``phonemes``), made once."""
    return TextEncoder(front_end)
