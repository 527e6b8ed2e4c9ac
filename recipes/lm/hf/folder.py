"""A checkpoint of the lm recipe as a transformers model folder, and back.

The folder (``lavo-zoo export CKPT OUT --format hf``)::

    config.json              LavoZooLMConfig: the model config, the tokenizer's name, the run config, auto_map
    generation_config.json   the document boundary as bos / eos / pad
    model.safetensors        the recipe's TransformerLM under ``model.``
    tokenizer.json           the recipe's tokenizer (tokenizer.py), with tokenizer_config.json
    lavo_zoo_lm.py           two lines importing the classes from the installed lavo-zoo (for trust_remote_code)
    README.md                the model card

``import lavo_zoo`` registers the classes with the Auto classes, so ``AutoModelForCausalLM.from_pretrained(OUT)``
needs nothing else; without importing lavo-zoo, ``trust_remote_code=True`` loads them through ``lavo_zoo_lm.py``.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from lavo_zoo.errors import CheckpointError
from lavo_zoo.recipes.lm.hf.configuration import LavoZooLMConfig
from lavo_zoo.recipes.lm.hf.modeling import AUTO_MAP, LavoZooLMForCausalLM

CARD_USE = """## Use

With lavo-zoo installed (`pip install 'lavo-zoo[hf]'`), from this repository or folder:

```python
import lavo_zoo  # registers the lavo-zoo model classes with transformers' Auto classes
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained("REPO_OR_FOLDER")
tokenizer = AutoTokenizer.from_pretrained("REPO_OR_FOLDER")
ids = tokenizer("def read(self", return_tensors="pt").input_ids
print(tokenizer.decode(model.generate(ids, max_new_tokens=40)[0]))
```

Without `import lavo_zoo`, `from_pretrained(..., trust_remote_code=True)` finds the classes through `lavo_zoo_lm.py`,
two lines that import them from the installed lavo-zoo. `generate` carries the attention's recurrent state (LAVO's
is of constant size) or key/value cache from step to step, and gives the tokens `lavo-zoo generate` gives. The
folder is also read as a lavo-zoo checkpoint: `lavo-zoo eval FOLDER`, `lavo_zoo.load(FOLDER)`."""


def to_transformers(model: torch.nn.Module, cfg: Any, **provenance: Any) -> LavoZooLMForCausalLM:
    """The transformers model around a trained ``TransformerLM`` and its resolved run config (``LMConfig``);
    ``provenance`` (``step``, ``weights_sha256``) is recorded in ``config.lavo_zoo``."""
    config = LavoZooLMConfig.from_run_config(cfg, **provenance)
    config.auto_map = dict(AUTO_MAP)
    return LavoZooLMForCausalLM(config, lm=model).eval()


def export_folder(checkpoint: Path, out: Path, card: str) -> list[Path]:
    """Write checkpoint directory ``checkpoint`` (verified against its meta.json) as a transformers model folder
    ``out`` (an existing, empty directory) with the model card ``card``; returns the files written."""
    from lavo_zoo.engine.checkpoint_io import load_model
    from lavo_zoo.recipes.lm.hf.tokenizer import transformers_tokenizer

    recipe, cfg, model, meta = load_model(checkpoint, "cpu")
    if recipe.name != "lm":
        raise CheckpointError(f"{checkpoint} is a '{recipe.name}' checkpoint; the lm transformers format takes lm "
                              "checkpoints only")
    hf = to_transformers(model, cfg, step=meta.get("step"), weights_sha256=meta.get("weights_sha256"))
    with _no_progress_bars():
        hf.save_pretrained(out)
    transformers_tokenizer(cfg.data.tokenizer).save_pretrained(out)
    (out / "README.md").write_text(card, encoding="utf-8")
    return sorted(p for p in out.iterdir() if p.is_file())


def import_folder(folder: Path, out: Path) -> Path:
    """A lavo-zoo checkpoint directory written under ``out`` from transformers folder ``folder`` (an export, or what
    ``save_pretrained`` / ``Trainer`` wrote after training it further), weights in fp32; returns its path."""
    from safetensors import SafetensorError

    from lavo_zoo.engine.checkpoint_io import save_checkpoint
    from lavo_zoo.engine.configs import config_from_dict
    from lavo_zoo.errors import ConfigError

    try:
        with _no_progress_bars():
            hf, report = LavoZooLMForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError, ConfigError) as e:
        raise CheckpointError(f"{folder} is not a readable transformers folder of a lavo-zoo language model: "
                              f"{type(e).__name__}: {e}") from e
    wrong = {what: sorted(map(str, report.get(key) or ())) for what, key in (
        ("missing", "missing_keys"), ("unexpected", "unexpected_keys"), ("of another shape", "mismatched_keys"))}
    if any(wrong.values()):
        detail = "; ".join(f"{what}: {', '.join(keys[:4])}" for what, keys in wrong.items() if keys)
        raise CheckpointError(f"the weights in {folder} do not match the model its config.json describes ({detail})")
    try:
        recipe, cfg = config_from_dict(hf.config.run_config(), source=str(folder / "config.json"))
    except ConfigError as e:
        raise CheckpointError(f"{folder / 'config.json'} does not hold a run config of this lavo-zoo: {e}") from None
    recorded = hf.config.lavo_zoo or {}
    provenance = {"source": f"transformers folder {folder}",
                  "source_weights_sha256": recorded.get("weights_sha256")}
    return save_checkpoint(out, int(recorded.get("step") or 0), hf.model, cfg, recipe.name, name="checkpoint",
                           provenance=provenance)


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off (a tiny model's one-shard save or load needs none), as they were after."""
    from transformers.utils import logging

    was = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            logging.enable_progress_bar()
