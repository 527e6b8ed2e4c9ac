"""lavo_zoo: LAVO (linear attention via orthogonal memory), its baselines and a multi-domain model zoo.

    import lavo_zoo
    model = lavo_zoo.load("runs/tiny-lavo")        # the domain's predictor: generate / forecast / synthesize / ...

Importing it also registers the language models' transformers classes with transformers' Auto classes, once
transformers is imported (``lavo_zoo.hf``; nothing is imported now).
"""
from typing import Any

from lavo_zoo.hf import install_auto_registration
from lavo_zoo.version import __version__

install_auto_registration()


def __getattr__(name: str) -> Any:
    """``lavo_zoo.load`` is imported on first use, so that ``import lavo_zoo`` (and the CLI's --help) stays light."""
    if name == "load":
        from lavo_zoo.checkpoints.load import load_predictor
        return load_predictor
    raise AttributeError(f"module 'lavo_zoo' has no attribute {name!r}")


__all__ = ["__version__", "load"]
