"""The lm recipe's language models in the Hugging Face ecosystem (needs the ``hf`` extra: transformers).

``import lavo_zoo`` registers :class:`~.configuration.LavoZooLMConfig` and :class:`~.modeling.LavoZooLMForCausalLM`
with ``AutoConfig`` and ``AutoModelForCausalLM`` (when transformers is imported; ``lavo_zoo.hf``), so a folder that
``lavo-zoo export CKPT OUT --format hf`` wrote loads with the Auto classes::

    import lavo_zoo
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model, tokenizer = AutoModelForCausalLM.from_pretrained(OUT), AutoTokenizer.from_pretrained(OUT)

- ``configuration.py``: the config (the recipe's model config, tokenizer name, run config);
- ``modeling.py``: the model, whose weights are the recipe's ``TransformerLM``, and the cache that carries its
  recurrent state / KV cache through ``generate``;
- ``tokenizer.py``: the recipe's tokenizers as ``tokenizer.json``;
- ``folder.py``: checkpoint directory -> transformers folder (export) and back (``lavo-zoo eval``, ``lavo_zoo.load``).

This module is the recipe's transformers plugin (:data:`PLUGIN`, entry-point group ``lavo_zoo.plugins.transformers``);
it imports transformers only when a method is called.
"""
from __future__ import annotations

import re
from pathlib import Path

SUPPORTED = ((5, 24), (6, 0))  # transformers >= 5.24, < 6: the `cache` API this is written for (pyproject's hf extra)


def transformers_version() -> tuple[int, int] | None:
    """(major, minor) of the installed transformers, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = re.match(r"(\d+)\.(\d+)", version("transformers"))
    except PackageNotFoundError:
        return None
    return (int(found[1]), int(found[2])) if found else None


def supported() -> bool:
    """Whether the installed transformers is a version the transformers form supports (:data:`SUPPORTED`)."""
    found = transformers_version()
    return found is not None and SUPPORTED[0] <= found < SUPPORTED[1]


def require_transformers() -> None:
    """A :class:`~lavo_zoo.errors.UsageError` saying what to install unless a supported transformers is."""
    if not supported():
        from importlib.metadata import version

        from lavo_zoo.errors import UsageError

        found = f"transformers {version('transformers')} is installed" if transformers_version() else \
            "transformers is not installed"
        raise UsageError(f"the transformers form of lavo-zoo's language models needs transformers >= 5.24, < 6 "
                         f"({found}): pip install 'lavo-zoo[hf]'")


class LMPlugin:
    """What ``lavo_zoo.hf`` and ``lavo-zoo export/push --format hf`` call for the lm recipe. With another
    transformers than the supported one, nothing is registered (transformers keeps working as it does)."""

    def register_config(self) -> None:
        if not supported():
            return
        from transformers.models.auto.configuration_auto import AutoConfig

        from lavo_zoo.recipes.lm.hf.configuration import MODEL_TYPE, LavoZooLMConfig

        AutoConfig.register(MODEL_TYPE, LavoZooLMConfig, exist_ok=True)

    def register_model(self) -> None:
        if not supported():
            return
        from transformers.models.auto.modeling_auto import AutoModelForCausalLM

        from lavo_zoo.recipes.lm.hf.configuration import LavoZooLMConfig
        from lavo_zoo.recipes.lm.hf.modeling import LavoZooLMForCausalLM

        AutoModelForCausalLM.register(LavoZooLMConfig, LavoZooLMForCausalLM, exist_ok=True)

    def card_use(self) -> str:
        """The model card's Use section (Markdown) for an exported folder."""
        require_transformers()
        from lavo_zoo.recipes.lm.hf.folder import CARD_USE

        return CARD_USE

    def export_folder(self, checkpoint: Path, out: Path, card: str) -> list[Path]:
        require_transformers()
        from lavo_zoo.recipes.lm.hf.folder import export_folder

        return export_folder(checkpoint, out, card)

    def import_folder(self, folder: Path, out: Path) -> Path:
        require_transformers()
        from lavo_zoo.recipes.lm.hf.folder import import_folder

        return import_folder(folder, out)


PLUGIN = LMPlugin()
