"""The transformers config of a lavo-zoo language model: the lm recipe's model config, its tokenizer's name and the
run config it was trained with, as ``config.json`` holds them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformers import PreTrainedConfig

from lavo_zoo.config import from_dict, to_dict

if TYPE_CHECKING:
    from lavo_zoo.recipes.lm.model import ModelConfig

MODEL_TYPE = "lavo_zoo_lm"


class LavoZooLMConfig(PreTrainedConfig):
    """``model``: the recipe's :class:`~lavo_zoo.recipes.lm.model.ModelConfig` as a mapping (``attention: {name:
    lavo, num_bases: 32, window_size: 16}``, ``vocab_size`` filled in); ``tokenizer``: ``gpt2`` or ``bytes``;
    ``lavo_zoo``: where the weights come from, ``{"recipe": "lm", "config": the run config without its model
    section, "step": N, "weights_sha256": the lavo-zoo checkpoint's}``, from which ``lavo-zoo eval`` rebuilds the
    run. ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size`` and ``vocab_size``
    read the model config, under the names other tools look for."""

    model_type = MODEL_TYPE

    model: dict | None = None
    tokenizer: str = "gpt2"
    lavo_zoo: dict | None = None
    use_cache: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    tie_word_embeddings: bool = False  # the recipe's model ties its head to the embedding itself (one tensor)

    def model_config(self) -> ModelConfig:
        """The recipe's model config, validated (a :class:`~lavo_zoo.errors.ConfigError` names a bad key)."""
        from lavo_zoo.recipes.lm.model import ModelConfig  # here: registering the config imports no model code

        if not self.model:
            raise ValueError(f"{type(self).__name__} has no 'model' (the lm recipe's model config); build it with "
                             "LavoZooLMConfig.from_run_config(cfg) or load one from an exported folder")
        return from_dict(ModelConfig, self.model, source="config.json", prefix="model.")

    @classmethod
    def from_run_config(cls, cfg: Any, **extra: Any) -> LavoZooLMConfig:
        """The config of a resolved lm run config (``LMConfig``; ``model.vocab_size`` set); ``extra`` goes into
        ``lavo_zoo`` (``step``, ``weights_sha256``)."""
        data = to_dict(cfg)
        model = data.pop("model")
        from lavo_zoo.nn.tokenizers import get_tokenizer

        eod = get_tokenizer(cfg.data.tokenizer).eod  # every document ends with it: also the start of one
        return cls(model=model, tokenizer=cfg.data.tokenizer, lavo_zoo={"recipe": "lm", "config": data, **extra},
                   bos_token_id=eod, eos_token_id=eod, pad_token_id=eod)

    def run_config(self) -> dict[str, Any]:
        """The lavo-zoo run config (a mapping for ``config.yaml``): the recorded one with this model config."""
        recorded = dict((self.lavo_zoo or {}).get("config") or {"recipe": "lm", "data": {"tokenizer": self.tokenizer}})
        return {**recorded, "model": dict(self.model or {})}

    # the names other tools read
    @property
    def vocab_size(self) -> int:
        return int((self.model or {}).get("vocab_size", 0))

    @property
    def hidden_size(self) -> int:
        return int((self.model or {}).get("embed_dim", 0))

    @property
    def num_hidden_layers(self) -> int:
        return int((self.model or {}).get("num_layers", 0))

    @property
    def num_attention_heads(self) -> int:
        return int((self.model or {}).get("num_heads", 0))

    @property
    def intermediate_size(self) -> int:
        return int((self.model or {}).get("ffn_dim", 0))
