"""LRA inference: class scores of batches of (one or two) token sequences (:func:`class_logits`, the recipe's
evaluation), and :class:`Classifier`, what ``lavo_zoo.load`` returns for an ``lra`` checkpoint: it tokenizes raw
inputs the way the task's release data is tokenized."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.errors import DataError, InputError
from lavo_zoo.recipes.lra.data import collate, image, listops
from lavo_zoo.recipes.lra.data.common import encode_bytes


def class_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits [B, C] of a collated batch: tokens [B, L], mask [B, L] (True = real), and for Retrieval tokens2 and
    mask2, the second document of each pair."""
    return model(batch["tokens"], batch["mask"], batch.get("tokens2"), batch.get("mask2"))


def pixels(picture: Any, task: str) -> np.ndarray:
    """Gray-level tokens [H * W] of an image: [H, W] gray levels 0..255, or [H, W, 3] RGB converted as the task's
    data is (Image: TensorFlow's rgb_to_grayscale, as LRA reads CIFAR-10)."""
    array = np.asarray(picture)
    if array.ndim == 3 and array.shape[-1] == 3:
        rgb = array.reshape(-1, 3).T[None]  # [1, 3, H*W]
        return image.grayscale(rgb)[0].astype(np.int64)
    if array.ndim != 2:
        raise InputError(f"a {task} input is an image [H, W] (gray) or [H, W, 3] (RGB), got shape {list(array.shape)}")
    if array.min() < 0 or array.max() > 255:
        raise InputError(f"a {task} image holds gray levels 0..255, got values {array.min()}..{array.max()}")
    return array.reshape(-1).astype(np.int64)


class Classifier(Predictor):
    """A trained LRA classifier: ``classify`` (class ids) and ``scores`` (class probabilities) of raw inputs of its
    task: ListOps expressions (str), texts (str or bytes), Retrieval pairs of texts, or images (Image, Pathfinder)."""

    def tokens(self, item: Any) -> tuple[np.ndarray, ...]:
        """The token sequence(s) of one input, as the task's release data is tokenized.

        Args:
            item: one input of the checkpoint's task: a ListOps expression, a text (str or bytes), a Retrieval pair
                of texts, or an image ([H, W] gray levels or [H, W, 3] RGB) for Image and Pathfinder.

        Returns:
            One int64 array [L] (two for Retrieval), cut to the model's length.

        Raises:
            InputError: the input cannot be read as the task's kind of input.
        """
        task, length = self.cfg.data.task, self.cfg.data.length()
        try:
            if task == "listops":
                return (listops.tokenize(str(item), length, "the input"),)
            if task == "text":
                return (encode_bytes(item, length),)
            if task == "retrieval":
                first, second = item
                return encode_bytes(first, length), encode_bytes(second, length)
            return (pixels(item, task)[:length],)
        except (DataError, TypeError, ValueError) as e:
            raise InputError(f"cannot read a {task} input from {str(item)[:60]!r}: {e}") from None

    @torch.no_grad()
    def scores(self, inputs: Sequence[Any], batch_size: int = 32) -> np.ndarray:
        """Class probabilities of raw inputs.

        Args:
            inputs: a list of inputs of the task (see :meth:`tokens`).
            batch_size: inputs per forward pass.

        Returns:
            Probabilities [N, C] (float32), one row per input.
        """
        out = []
        for start in range(0, len(inputs), batch_size):
            samples = []
            for item in inputs[start:start + batch_size]:
                seqs = self.tokens(item)
                sample: dict[str, Any] = {"tokens": torch.from_numpy(seqs[0]), "label": 0}
                if len(seqs) > 1:
                    sample["tokens2"] = torch.from_numpy(seqs[1])
                samples.append(sample)
            batch = {k: v.to(self.device) for k, v in collate(samples).items()}
            out.append(torch.softmax(class_logits(self.model, batch).float(), -1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.cfg.model.num_classes), np.float32)

    def classify(self, inputs: Any) -> int | list[int]:
        """The predicted class.

        Args:
            inputs: one input of the task (see :meth:`tokens`), or a list of them.

        Returns:
            The class id of the most probable class, or a list of them for a list.
        """
        single = not isinstance(inputs, list)
        probs = self.scores([inputs] if single else inputs)
        ids = probs.argmax(-1).tolist()
        return ids[0] if single else ids
