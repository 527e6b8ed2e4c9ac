"""A lavo-zoo language model as a transformers model: :class:`LavoZooLMForCausalLM` holds the lm recipe's own
:class:`~lavo_zoo.recipes.lm.model.TransformerLM` (its weights are that module's, under ``model.``), returns logits
and the loss as transformers' causal LMs do, and generates through :class:`LavoZooLMCache`.

Decoding: with a streaming attention (LAVO, ``sdpa``, ``local``, ...) the cache carries the recurrent state (LAVO:
constant size; softmax: the key/value cache) exactly as ``lavo-zoo generate`` does, and ``generate`` feeds each
step only the token the cache has not seen, so a new token costs the same at any position for LAVO. An attention
that cannot stream is decoded as ``lavo-zoo generate`` decodes it: the cache keeps the token ids and every step
re-runs the whole sequence. Sequences are decoded without padding (a batch of prompts of one length, or one at a
time); right padding is accepted where nothing is decoded (scoring, training), left padding is refused.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast

from lavo_zoo.attention.base import reorder_batch
from lavo_zoo.errors import InputError
from lavo_zoo.nn.transformer import DecoderState
from lavo_zoo.recipes.lm.hf.configuration import LavoZooLMConfig
from lavo_zoo.recipes.lm.model import TransformerLM

# the file an exported folder carries so that `trust_remote_code=True` finds the classes without `import lavo_zoo`
SHIM = "lavo_zoo_lm.py"
SHIM_TEXT = '''"""The classes of this model come from the installed lavo-zoo package (pip install lavo-zoo)."""
from lavo_zoo.recipes.lm.hf.modeling import LavoZooLMConfig, LavoZooLMForCausalLM  # noqa: F401
'''
AUTO_MAP = {"AutoConfig": f"{SHIM[:-3]}.LavoZooLMConfig", "AutoModelForCausalLM": f"{SHIM[:-3]}.LavoZooLMForCausalLM"}


class _LayerState:
    """One layer's attention state (what ``PreLNDecoderBlock`` returns: LAVO's ``LavoState``, a KV cache, ...)."""

    is_compileable = False
    is_sliding = False
    is_croppable = False
    supports_early_init = False

    def __init__(self) -> None:
        self.state: Any = None

    def __repr__(self) -> str:
        return f"_LayerState({type(self.state).__name__})"

    def reorder(self, index: torch.Tensor) -> None:
        self.state = reorder_batch(self.state, index)

    def reset(self) -> None:
        self.state = None

    def offload(self) -> None:
        pass

    def prefetch(self) -> None:
        pass


class LavoZooLMCache(Cache):
    """The decoding state of a :class:`LavoZooLMForCausalLM`: the tokens consumed so far and, for a streaming
    attention, each layer's state (``layers[i].state``); for one that cannot stream, the token ids themselves
    (``prefix`` [B, P]), which every step re-runs. Beam search and batch expansion re-index the batch of every
    tensor in it; it cannot be cropped (assisted decoding is not supported)."""

    def __init__(self, num_layers: int, streaming: bool) -> None:
        super().__init__(layers=[_LayerState() for _ in range(num_layers)])
        self.streaming = streaming
        self.offset = 0                           # tokens consumed so far (the next position)
        self.prefix: torch.Tensor | None = None   # [B, P] token ids (attentions that cannot stream)

    def __repr__(self) -> str:
        return f"LavoZooLMCache(offset={self.offset}, streaming={self.streaming}, layers={self.layers})"

    # the recipe's streaming state
    def lm_state(self) -> DecoderState | None:
        """The :class:`DecoderState` to continue from (None before the first token)."""
        return DecoderState(self.offset, [layer.state for layer in self.layers]) if self.offset else None

    def store(self, state: DecoderState) -> None:
        if len(state.layers) != len(self.layers):
            raise ValueError(f"state of {len(state.layers)} layers for a cache of {len(self.layers)}")
        self.offset = state.offset
        for layer, layer_state in zip(self.layers, state.layers):
            layer.state = layer_state

    # transformers' Cache interface
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.offset

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.offset + query_length, 0

    def has_previous_state(self, layer_idx: int | None = None, state_idx: int | None = None) -> bool:
        return self.offset > 0

    def reset(self) -> None:
        self.offset, self.prefix = 0, None
        for layer in self.layers:
            layer.reset()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        indices = torch.as_tensor(indices, dtype=torch.long)
        for layer in self.layers:
            layer.reorder(indices)
        if self.prefix is not None:
            self.prefix = self.prefix.index_select(0, indices.to(self.prefix.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        batch = self.batch_size
        if batch > 0:
            self.batch_select_indices(torch.arange(batch).repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise NotImplementedError("a lavo-zoo language model's state cannot be rolled back (cropped): decode "
                                      "without assisted generation")

    def activate_past_recording(self) -> None:
        pass

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    @property
    def batch_size(self) -> int:
        if self.prefix is not None:
            return self.prefix.shape[0]
        tensors = [t for layer in self.layers for t in _tensors(layer.state)]
        return tensors[0].shape[0] if tensors else -1

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return self.offset > 0

    @property
    def is_croppable(self) -> bool:
        return False

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * len(self.layers)

    @property
    def is_linear(self) -> list[bool]:
        return [False] * len(self.layers)

    @property
    def is_dummy(self) -> list[bool]:
        return [False] * len(self.layers)


def _tensors(obj: Any) -> list[torch.Tensor]:
    """The tensors inside a layer state (dataclasses, tuples, lists, dicts walked)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if hasattr(obj, "__dataclass_fields__"):
        return [t for name in obj.__dataclass_fields__ for t in _tensors(getattr(obj, name))]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


class LavoZooLMPreTrainedModel(PreTrainedModel):
    config_class = LavoZooLMConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules: ClassVar[list[str]] = ["PreLNDecoderBlock"]
    _is_stateful = True  # a recurrent state: no assisted decoding

    def _init_weights(self, module: torch.nn.Module) -> None:
        """A new model keeps the recipe's own initialisation (``TransformerLM``'s, fairseq's); a module whose weights a
        loaded folder lacks (transformers reports them as newly initialised) gets its default initialisation."""
        if getattr(self, "_built", False) and hasattr(module, "reset_parameters") and any(
                not getattr(p, "_is_hf_initialized", False) for p in module.parameters(recurse=False)):
            module.reset_parameters()


class LavoZooLMForCausalLM(LavoZooLMPreTrainedModel, GenerationMixin):
    """The lm recipe's decoder as a transformers causal LM. ``model`` is the recipe's ``TransformerLM``, built from
    ``config.model`` (or given as ``lm``, e.g. a trained one)."""

    def __init__(self, config: LavoZooLMConfig, lm: TransformerLM | None = None) -> None:
        super().__init__(config)
        self.model = lm if lm is not None else TransformerLM(config.model_config())
        self.post_init()
        self._built = True  # from here on _init_weights initialises what from_pretrained did not load

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # it brings its own cache (LavoZooLMCache), made by prepare_inputs_for_generation

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> None:
        return None  # the head is the input embedding itself (TransformerLM.logits), not a separate layer

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """transformers' ``save_pretrained``, plus the two-line file its ``config.auto_map`` points at."""
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True) and (getattr(self.config, "auto_map", None) or {}) == AUTO_MAP:
            (Path(save_directory) / SHIM).write_text(SHIM_TEXT, encoding="utf-8")

    def new_cache(self) -> LavoZooLMCache:
        """An empty cache for this model."""
        return LavoZooLMCache(len(self.model.blocks), self.model.streaming)

    def forward(self, input_ids: torch.LongTensor | None = None, attention_mask: torch.Tensor | None = None,
                labels: torch.LongTensor | None = None, cache: Cache | None = None, use_cache: bool | None = None,
                logits_to_keep: int = 0, inputs_embeds: torch.Tensor | None = None,
                past_key_values: Cache | None = None, return_dict: bool | None = None,
                output_hidden_states: bool | None = None, output_attentions: bool | None = None,
                **kwargs: Any) -> CausalLMOutputWithPast | tuple:
        """input_ids [B, T] (the tokens ``cache`` has not seen) -> logits [B, T, V] (the last ``logits_to_keep``
        positions when it is > 0), with ``labels`` [B, T] the mean next-token cross-entropy (shifted here; -100 is
        ignored), and with ``use_cache`` (or a ``cache`` given) the :class:`LavoZooLMCache` after these tokens.

        ``attention_mask`` [B, T'] may only mark right padding (real tokens first), and none at all while decoding
        with a cache; ``kwargs`` passes ``num_items_in_batch`` (``Trainer``) to the loss.

        Args:
            input_ids: [B, T] the tokens ``cache`` has not seen.
            attention_mask: [B, T'] 1 = real token (right padding only), or None.
            labels: [B, T] the targets (shifted here; -100 ignored), or None (no loss).
            cache: the :class:`LavoZooLMCache` of the tokens before, or None.
            use_cache: return the cache after these tokens (None: when a cache is given).
            logits_to_keep: return the logits of the last this many positions only (0: all).
            inputs_embeds: refused (the model takes token ids).
            past_key_values: transformers' name for ``cache`` (used when ``cache`` is None).
            return_dict: False returns a tuple; True or None, a ``CausalLMOutputWithPast``.
            output_hidden_states: refused when true (the model does not return them).
            output_attentions: refused when true (linear attention has no attention matrix).
            **kwargs: ``num_items_in_batch`` for the loss; any other that is not None is a TypeError.
        """
        cache = cache if cache is not None else past_key_values
        if inputs_embeds is not None:
            raise ValueError("LavoZooLMForCausalLM takes input_ids, not inputs_embeds")
        if output_hidden_states or output_attentions:
            raise ValueError("LavoZooLMForCausalLM does not return hidden states or attention weights")
        unknown = sorted(k for k, v in kwargs.items() if v is not None and k != "num_items_in_batch")
        if unknown:
            raise TypeError(f"LavoZooLMForCausalLM.forward got unexpected arguments: {', '.join(unknown)}")
        _check_ids(input_ids, self.config.vocab_size)
        if cache is not None and not isinstance(cache, LavoZooLMCache):
            raise TypeError(f"cache must be a LavoZooLMCache (model.new_cache()), got {type(cache).__name__}")
        use_cache = cache is not None if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = self.new_cache()
        _check_mask(attention_mask, input_ids, decoding=cache is not None)

        if cache is None:  # one pass over the whole sequence
            h, _ = self.model.features(input_ids)  # [B, T, D]
        elif cache.streaming:
            h, state = self.model.features(input_ids, state=cache.lm_state(), return_state=True)
            cache.store(state)
        else:  # re-run the whole sequence, as `lavo-zoo generate` does for an attention that cannot stream
            cache.prefix = input_ids if cache.prefix is None else torch.cat([cache.prefix, input_ids], 1)  # [B, P]
            h, _ = self.model.features(cache.prefix)
            h = h[:, -input_ids.shape[1]:]
            cache.offset = cache.prefix.shape[1]
        logits = self.model.logits(h[:, -logits_to_keep:] if logits_to_keep > 0 else h)  # [B, T, V]
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=logits.shape[-1],
                                      num_items_in_batch=kwargs.get("num_items_in_batch"))
        out = CausalLMOutputWithPast(loss=loss, logits=logits, cache=cache if use_cache else None)
        return out if return_dict is not False else out.to_tuple()

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, cache: Cache | None = None,
                                      past_key_values: Cache | None = None,
                                      attention_mask: torch.Tensor | None = None,
                                      inputs_embeds: torch.Tensor | None = None, use_cache: bool = True,
                                      **kwargs: Any) -> dict[str, Any]:
        """The inputs of one decoding step: the tokens the cache has not seen yet (the whole prompt first, then one
        new token per step), a fresh :class:`LavoZooLMCache` at the start.

        Its arguments are stated on `LavoZooLMForCausalLM.forward` (``input_ids`` here: every token so far).
        """
        if inputs_embeds is not None:
            raise ValueError("LavoZooLMForCausalLM generates from input_ids, not inputs_embeds")
        _check_ids(input_ids, self.config.vocab_size)
        cache = cache if cache is not None else past_key_values
        if use_cache and cache is None:
            cache = self.new_cache()
        seen = cache.get_seq_length() if cache is not None else 0
        if seen >= input_ids.shape[1]:
            raise ValueError(f"the cache has seen {seen} tokens, the sequence has only {input_ids.shape[1]}: pass "
                             "the whole sequence (prompt and generated tokens), or a fresh cache")
        inputs = {"input_ids": input_ids[:, seen:].to(self.device), "cache": cache, "use_cache": use_cache,
                  "attention_mask": attention_mask}
        if kwargs.get("logits_to_keep") is not None:
            inputs["logits_to_keep"] = kwargs["logits_to_keep"]
        return inputs


def _check_ids(input_ids: torch.Tensor | None, vocab_size: int) -> None:
    """Refuse what the embedding cannot read, naming ``input_ids``: not a [batch, length] integer tensor, no token (an
    empty prompt), or an id outside the model's vocabulary (a tokenizer that is not the model's)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.is_floating_point():
        raise InputError("input_ids must be a [batch, length] tensor of token ids")
    if input_ids.shape[1] == 0:
        raise InputError("input_ids holds no token (an empty prompt): give at least one; a new document starts after "
                         "the end-of-document token (tokenizer.eos_token_id), as `lavo-zoo generate --prompt ''` does")
    if input_ids.numel() and vocab_size and not bool(((input_ids >= 0) & (input_ids < vocab_size)).all()):
        raise InputError(f"input_ids holds ids {int(input_ids.min())}..{int(input_ids.max())}, but the model's "
                         f"vocabulary is 0..{vocab_size - 1}: the tokenizer is not this model's (use "
                         "AutoTokenizer.from_pretrained on the model's own folder)")


def _check_mask(mask: torch.Tensor | None, input_ids: torch.Tensor, decoding: bool) -> None:
    """Refuse what the model cannot honour: padding while decoding, padding before a real token."""
    if mask is None:
        return
    if mask.ndim != 2 or mask.shape[0] != input_ids.shape[0] or mask.shape[1] < input_ids.shape[1]:
        raise ValueError(f"attention_mask must be [batch, length >= {input_ids.shape[1]}] (1 = real token), got "
                         f"{list(mask.shape)}")
    real = mask.bool()
    if bool(real.all()):
        return
    if decoding:
        raise ValueError("LavoZooLMForCausalLM decodes without padding: generate prompts of one length together, "
                         "or one prompt at a time (the attention_mask has zeros)")
    if bool((real[:, 1:] & ~real[:, :-1]).any()):
        raise ValueError("attention_mask marks padding before a real token; only right padding is supported (pad "
                         "after the text: tokenizer.padding_side = 'right')")
