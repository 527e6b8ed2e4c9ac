"""The built-in spoken corpus: sentences of the Python documentation that ships with the interpreter, spoken by
espeak-ng (:mod:`.espeak`) into the LJSpeech layout (what ``lavo-zoo data tts`` writes and a config without
``data.path`` reads)."""
from __future__ import annotations

import hashlib
import logging
import platform
import re
import sysconfig
from pathlib import Path

import numpy as np

from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.recipes.tts.audio import write_wav
from lavo_zoo.recipes.tts.data import DataConfig

log = logging.getLogger(__name__)


class BuiltinSpokenCorpus(BuiltinData):
    """``pydocs``: ``data.builtin_size`` sentences of this Python's documentation (0: all, about 3,400)."""

    datasets = ("pydocs",)

    def key(self, data: DataConfig) -> dict:
        return {"dataset": f"pydocs-n{data.builtin_size or 'all'}", "python": platform.python_version(),
                "size": data.builtin_size, "format": 1}

    def write(self, out: Path, data: DataConfig) -> Path:
        """The corpus in the LJSpeech layout."""
        return write_spoken_corpus(out, data.builtin_size)


def corpus_sentences() -> list[str]:
    """Plain English sentences (4+ words, letters and light punctuation only) from this Python's documentation:
    the triple-quoted strings (docstrings) of its standard-library modules and its ``pydoc`` topics, de-duplicated,
    in a fixed shuffled order."""
    from pydoc_data.topics import topics

    docs = list(topics.values())
    triple = re.compile(r'"""(.*?)"""', re.DOTALL)
    for source in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        docs += triple.findall(source.read_text(encoding="utf-8", errors="replace"))
    text = re.sub(r"\s+", " ", " ".join(docs))
    plain = re.compile(r"[A-Z][A-Za-z ,;:'\-]{15,110}[a-z][.!?]")
    sentences = {s for s in re.split(r"(?<=[.!?])\s+", text) if plain.fullmatch(s) and len(s.split()) >= 4}
    return sorted(sentences, key=lambda s: hashlib.sha256(s.encode()).hexdigest())


def write_spoken_corpus(out: Path, size: int = 0) -> Path:
    """Speak the first ``size`` corpus sentences (0: all) into ``out`` in the LJSpeech layout; returns ``out``."""
    from lavo_zoo.recipes.tts.espeak import SAMPLE_RATE, espeak

    log.info("speaking the built-in corpus (%s sentences)", size or "all")
    sentences = corpus_sentences()
    sentences = sentences[:size] if size else sentences
    engine = espeak()
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, sentence in enumerate(sentences, 1):
        uid = f"PY{i:05d}"
        wave = engine.speak(sentence).astype(np.float32) / 32768.0
        write_wav(out / "wavs" / f"{uid}.wav", wave, SAMPLE_RATE)
        rows.append(f"{uid}|{sentence}|{sentence}\n")
    (out / "metadata.csv").write_text("".join(rows), encoding="utf-8")
    return out
