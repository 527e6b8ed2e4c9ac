"""The LRA recipe's own commands (``COMMANDS``, mounted as ``lavo-zoo <name>``): none yet. Accuracy of saved
predictions is ``lavo-zoo score accuracy`` (the ``accuracy`` evaluator)."""
from __future__ import annotations

COMMANDS: list = []
