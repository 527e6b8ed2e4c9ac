"""LRA inference: class scores of batches of (one or two) token sequences (:func:`class_logits`, the recipe's
evaluation), and :class:`Classifier`, what ``lavo_zoo.load`` returns for an ``lra`` checkpoint: it tokenizes raw
inputs the way the task's release data is tokenized."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from lavo_zoo import limits
from lavo_zoo.engine.predictor import Predictor, as_batch, describe
from lavo_zoo.errors import DataError, InputError
from lavo_zoo.recipes.lra.data import collate, image, listops
from lavo_zoo.recipes.lra.data.common import encode_bytes


def class_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits [B, C] of a collated batch: tokens [B, L], mask [B, L] (True = real), and for Retrieval tokens2 and
    mask2, the second document of each pair."""
    return model(batch["tokens"], batch["mask"], batch.get("tokens2"), batch.get("mask2"))


ITEMS = {"listops": "a ListOps expression (str)", "text": "a text (str or bytes)",
         "retrieval": "a pair of texts (a tuple of two str or bytes)",
         "image": "an image (a numpy array [H, W] of gray levels or [H, W, 3] RGB)"}
ITEMS["pathfinder"] = ITEMS["image"]


def is_input(value: Any, task: str) -> bool:
    """Whether ``value`` is one raw input of ``task`` (see :data:`ITEMS`), as opposed to a list of them."""
    if task == "listops":
        return isinstance(value, str)
    if task == "text":
        return isinstance(value, (str, bytes))
    if task == "retrieval":
        return isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, (str, bytes)) for v in value)
    return isinstance(value, np.ndarray) and (value.ndim == 2 or (value.ndim == 3 and value.shape[-1] == 3))


def pixels(picture: np.ndarray, task: str, side: int) -> np.ndarray:
    """Gray-level tokens [side * side] of an image: [side, side] gray levels 0..255, or [side, side, 3] RGB
    converted as the task's data is (Image: TensorFlow's rgb_to_grayscale, as LRA reads CIFAR-10); an image of
    another size, or values that are not integer levels 0..255 (a picture scaled to 0..1), are refused."""
    array = np.asarray(picture)
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] != 3):
        raise InputError(f"an image is [H, W] (gray) or [H, W, 3] (RGB), got shape {list(array.shape)}")
    if array.shape[:2] != (side, side):
        raise InputError(f"the {task} task takes {side}x{side} images (as the model was trained on), got "
                         f"{array.shape[0]}x{array.shape[1]}; resize it first")
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise InputError(f"an image holds numbers (gray levels 0..255), got {array.dtype}")
    if not np.isfinite(array).all() or array.min() < 0 or array.max() > 255 or (array != np.round(array)).any():
        raise InputError(f"an image holds integer gray levels 0..255, got values {array.min()}..{array.max()}"
                         + (" (scaled to 0..1? multiply by 255)" if array.max() <= 1 else ""))
    if array.ndim == 3:
        rgb = array.astype(np.uint8).reshape(-1, 3).T[None]  # [1, 3, H*W]
        return image.grayscale(rgb)[0].astype(np.int64)
    return array.reshape(-1).astype(np.int64)


class Classifier(Predictor):
    """A trained LRA classifier: ``classify`` (class ids) and ``scores`` (class probabilities) of raw inputs of its
    task: ListOps expressions (str), texts (str or bytes), Retrieval pairs of texts, or images (Image, Pathfinder)."""

    def memory_estimate(self, inputs: int) -> int:
        """Estimated bytes of classifying ``inputs`` inputs at once: per input the widest activations (the
        feed-forward layer's and the attention's projections) over its tokens (a Retrieval pair's two texts), twice
        (the forward's and what it keeps)."""
        m = self.cfg.model
        per_input = self.cfg.data.length() * (2 if self.cfg.data.task == "retrieval" else 1) * (
            m.ffn_dim + 4 * m.embed_dim) * 4
        return inputs * per_input * 2

    def tokens(self, item: Any) -> tuple[np.ndarray, ...]:
        """The token sequence(s) of one input, as the task's release data is tokenized.

        Args:
            item: one input of the checkpoint's task: a ListOps expression, a text (str or bytes), a Retrieval pair
                of texts, or an image ([H, W] gray levels or [H, W, 3] RGB, the size of the task's images) for Image
                and Pathfinder.

        Returns:
            One int64 array [L] (two for Retrieval), cut to the model's length.

        Raises:
            InputError: the input cannot be read as the task's kind of input, or holds no token.
        """
        task, length = self.cfg.data.task, self.cfg.data.length()
        if not is_input(item, task):
            raise InputError(f"a {task} input is {ITEMS[task]}, got {describe(item)}")
        try:
            if task == "listops":
                seqs = (listops.tokenize(item, length, "the input"),)
            elif task == "text":
                seqs = (encode_bytes(item, length),)
            elif task == "retrieval":
                seqs = (encode_bytes(item[0], length), encode_bytes(item[1], length))
            else:
                side = image.SIDE if task == "image" else self.cfg.data.image_size
                seqs = (pixels(item, task, side)[:length],)
        except DataError as e:
            raise InputError(f"cannot read a {task} input from {describe(item)}: {e}") from None
        if any(len(seq) == 0 for seq in seqs):
            raise InputError(f"a {task} input holds no text to classify, got {describe(item)}")
        return seqs

    @torch.no_grad()
    def scores(self, inputs: Any, batch_size: int = 32) -> np.ndarray:
        """Class probabilities of raw inputs.

        Args:
            inputs: one input of the task (see :meth:`tokens`), or a list of them.
            batch_size: inputs per forward pass.

        Returns:
            Probabilities [C] (float32) of one input, or [N, C], one row per input, for a list.

        Raises:
            InputError: ``inputs`` is not one input or a list of them, an input cannot be read, ``batch_size`` is
                outside its range, a batch would not fit in memory, or the model's scores are not finite.
        """
        task = self.cfg.data.task
        items, single = as_batch(inputs, lambda v: is_input(v, task), "inputs", ITEMS[task])
        batch_size = limits.BATCH_SIZE.check(batch_size)
        self.check_fits(self.memory_estimate(min(batch_size, len(items))),
                        f"classifying batches of {min(batch_size, len(items))} inputs", "lower batch_size")
        out = []
        for start in range(0, len(items), batch_size):
            samples = []
            for item in items[start:start + batch_size]:
                seqs = self.tokens(item)
                sample: dict[str, Any] = {"tokens": torch.from_numpy(seqs[0]), "label": 0}
                if len(seqs) > 1:
                    sample["tokens2"] = torch.from_numpy(seqs[1])
                samples.append(sample)
            batch = {k: v.to(self.device) for k, v in collate(samples).items()}
            probs = torch.softmax(class_logits(self.model, batch).float(), -1)  # [b, C]
            self.check_finite(probs, f"inputs {start}..{start + len(samples) - 1}")
            out.append(probs.cpu().numpy())
        probs = np.concatenate(out) if out else np.zeros((0, self.cfg.model.num_classes), np.float32)
        return probs[0] if single else probs

    def classify(self, inputs: Any, batch_size: int = 32) -> int | list[int]:
        """The predicted class.

        Args:
            inputs: one input of the task (see :meth:`tokens`), or a list of them.
            batch_size: inputs per forward pass.

        Returns:
            The class id of the most probable class, or a list of them for a list.
        """
        probs = self.scores(inputs, batch_size)
        return int(probs.argmax(-1)) if probs.ndim == 1 else probs.argmax(-1).tolist()
