"""espeak-ng through ctypes, from the library and data the ``espeakng-loader`` wheel ships (no system install).

Two things the recipe needs: speech (``speak``: 22,050 Hz mono int16 samples) for the built-in corpus, and IPA
phonemes (``phonemize``) for the phoneme front end. espeak-ng is GPL-3.0; it is loaded and called at run time only
(nothing of it is copied into this project), and the audio it generates is not covered by its licence.

The library keeps global state and is not thread-safe: one :class:`ESpeak` per process (``espeak()``), calls
serialised by a lock. It is initialised in synchronous mode, so ``espeak_Synth`` returns only when every sample has
been handed to the synth callback.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from lavo_zoo.atomic import replace_link
from lavo_zoo.errors import ZooError

SAMPLE_RATE = 22_050
AUDIO_OUTPUT_SYNCHRONOUS = 2
ESPEAK_CHARS_UTF8 = 1
ESPEAK_RATE = 1  # espeak_PARAMETER
PHONEMES_IPA = 0x02  # espeak_TextToPhonemes phonememode bit 1: IPA as UTF-8
EE_OK = 0
MAX_DATA_PATH = 150  # espeak-ng truncates longer data paths (~159 characters) and then fails to find its data

SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class ESpeakError(ZooError):
    """The espeak-ng library could not be loaded, initialised or asked for speech."""


def short_data_path(data_path: Path) -> Path:
    """``data_path`` itself when short, else a symlink to it in a short temporary folder (espeak-ng's limit)."""
    if len(str(data_path)) <= MAX_DATA_PATH:
        return data_path
    tag = hashlib.sha256(str(data_path).encode()).hexdigest()[:10]
    link = Path(tempfile.gettempdir()) / f"espeak-{os.getuid() if hasattr(os, 'getuid') else 0}-{tag}"
    if not link.is_symlink():
        replace_link(link, data_path)
    if len(str(link)) > MAX_DATA_PATH:
        raise ESpeakError(f"the temporary folder {tempfile.gettempdir()} is too long a path for espeak-ng's data "
                          f"(limit {MAX_DATA_PATH} characters); set TMPDIR to a short folder such as /tmp")
    return link


class ESpeak:
    """One initialised espeak-ng (voice ``voice``, ``rate`` words per minute)."""

    def __init__(self, voice: str = "en-us", rate: int = 175) -> None:
        try:
            import espeakng_loader
        except ImportError as e:
            raise ESpeakError("the espeakng-loader package is missing; install it with "
                              "`pip install espeakng-loader`") from e
        lib_path, data_path = Path(espeakng_loader.get_library_path()), Path(espeakng_loader.get_data_path())
        try:
            lib = ctypes.CDLL(str(lib_path))
        except OSError as e:
            raise ESpeakError(f"cannot load espeak-ng from {lib_path}: {e}") from e
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [SYNTH_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                     ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        path = short_data_path(data_path)
        rate_hz = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, str(path).encode(), 0)
        if rate_hz != SAMPLE_RATE:
            raise ESpeakError(f"espeak-ng did not initialise from data {path} (returned {rate_hz}, "
                              f"expected a sample rate of {SAMPLE_RATE})")
        self.lib = lib
        self.lock = threading.Lock()
        self.chunks: list[np.ndarray] = []
        self.callback = SYNTH_CALLBACK(self._collect)  # kept referenced: the library holds the pointer
        lib.espeak_SetSynthCallback(self.callback)
        if lib.espeak_SetVoiceByName(voice.encode()) != EE_OK:
            raise ESpeakError(f"espeak-ng has no voice '{voice}' in {data_path}")
        lib.espeak_SetParameter(ESPEAK_RATE, rate, 0)

    def _collect(self, wav: ctypes.POINTER(ctypes.c_short), num_samples: int, events: int) -> int:
        if num_samples > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        return 0  # 0 = continue

    def speak(self, text: str) -> np.ndarray:
        """``text`` spoken: int16 samples at 22,050 Hz, shape [N]."""
        data = text.encode("utf-8")
        with self.lock:
            self.chunks = []
            err = self.lib.espeak_Synth(data, len(data) + 1, 0, 0, 0, ESPEAK_CHARS_UTF8, None, None)
            chunks, self.chunks = self.chunks, []
        if err != EE_OK:
            raise ESpeakError(f"espeak-ng failed to speak {text[:60]!r} (error {err})")
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)

    def phonemize(self, text: str) -> str:
        """IPA phonemes of ``text``, clauses joined by spaces (stress marks kept, punctuation dropped)."""
        data = ctypes.c_char_p(text.encode("utf-8"))
        pointer = ctypes.pointer(data)
        parts = []
        with self.lock:
            while pointer.contents.value:
                out = self.lib.espeak_TextToPhonemes(pointer, ESPEAK_CHARS_UTF8, PHONEMES_IPA)
                if out:
                    parts.append(out.decode("utf-8").strip())
        return " ".join(p for p in parts if p)


@lru_cache(maxsize=1)
def espeak() -> ESpeak:
    """The process's espeak-ng (initialised on first use)."""
    return ESpeak()
