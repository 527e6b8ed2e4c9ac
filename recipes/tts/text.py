"""Text front end: normalised characters (default) or IPA phonemes from espeak-ng, as id sequences.

Both vocabularies are fixed (so a checkpoint never needs the training data to rebuild its embedding): ids 0..3 are
``<pad>``, ``<eos>`` (appended to every source, as fairseq's TTS dictionary), ``<unk>`` and the word separator
(space); then the symbols. Characters: the normalised text is lower-cased, curly quotes and dashes made ASCII,
anything outside the symbol set becomes a space, runs of spaces collapse.
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


def normalise(text: str) -> str:
    """Lower-cased ASCII-ish text with only the character vocabulary's symbols and single spaces."""
    text = unicodedata.normalize("NFKD", text.translate(_REPLACE)).encode("ascii", "ignore").decode().lower()
    text = "".join(c if c in CHARACTERS else " " for c in text)
    return re.sub(r" +", " ", text).strip()


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
        return len(self.symbols)

    def symbols_of(self, text: str) -> str:
        """The symbol string the ids spell: normalised characters, or espeak-ng's IPA of the text."""
        if self.front_end == "chars":
            return normalise(text)
        from lavo_zoo.recipes.tts.espeak import espeak

        return re.sub(r" +", " ", espeak().phonemize(text)).strip()

    def encode(self, text: str) -> list[int]:
        return [self.index.get(c, UNK) for c in self.symbols_of(text)] + [EOS]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.symbols[i] for i in ids if i not in (PAD, EOS))


@lru_cache(maxsize=2)
def text_encoder(front_end: str = "chars") -> TextEncoder:
    return TextEncoder(front_end)
