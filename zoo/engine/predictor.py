"""A trained model ready for new inputs: what :func:`lavo_zoo.load` returns. Each recipe's ``infer.py`` subclasses
:class:`Predictor` with its domain's calls (``generate``, ``forecast``, ``synthesize``, ``summarize``,
``complete``, ``classify``), and the recipe names the class (``Recipe.predictor``). A predictor needs only the
checkpoint: the model is rebuilt from the checkpoint's own config, and every size and statistic it needs was stored
there when the model was trained."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Predictor:
    """A trained model with its recipe and config; subclasses add the domain's calls."""

    def __init__(self, recipe: Any, cfg: Any, model: nn.Module, device: torch.device | str = "cpu",
                 checkpoint: str | None = None) -> None:
        """Built by :func:`lavo_zoo.load` (users call that, not this).

        Args:
            recipe: the checkpoint's recipe (a :class:`~lavo_zoo.engine.recipe.Recipe`).
            cfg: the checkpoint's resolved config.
            model: the model with the checkpoint's weights (put in eval mode).
            device: where the model is.
            checkpoint: the reference it was loaded from (for messages and ``repr``).
        """
        self.recipe, self.cfg, self.model = recipe, cfg, model.eval()
        self.device = torch.device(device)
        self.checkpoint = checkpoint

    def to(self, device: torch.device | str) -> Predictor:
        """Move the model to ``device`` (cpu, cuda, cuda:N); returns the predictor itself."""
        self.device = torch.device(device)
        self.model.to(self.device)
        return self

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(recipe={self.recipe.name!r}, checkpoint={self.checkpoint!r}, "
                f"device={str(self.device)!r})")
