"""The classifier (infer.py): raw inputs of each task read as the release data is read."""
from pathlib import Path

import numpy as np
import pytest
import torch

from lavo_zoo.engine.trainer import Trainer
from tests.recipes.lra.helpers import tiny


@pytest.mark.parametrize("task", ["listops", "image", "retrieval"])
def test_the_classifier_reads_raw_inputs_as_the_release_data_is_read(tmp_path: Path, task: str) -> None:
    """``lavo_zoo.load`` of a run classifies raw test inputs (expressions, RGB pictures, pairs of texts) with the
    same probabilities as the recipe's evaluation of the tokenized test split."""
    import csv

    import lavo_zoo
    from lavo_zoo.recipes.lra.data import image, listops
    from lavo_zoo.recipes.lra.infer import class_logits

    recipe, cfg = tiny(task)
    Trainer(recipe, cfg, tmp_path / "run", device="cpu").fit()
    classifier = lavo_zoo.load(tmp_path / "run", device="cpu")
    root = recipe.data_path(cfg.data)
    if task == "listops":
        with (root / listops.FILES["test"]).open(newline="") as f:
            raw = [row[0] for row in list(csv.reader(f, delimiter="\t"))[1:]]
    elif task == "image":
        records = np.fromfile(image.batches_root(root) / image.TEST_FILE, np.uint8).reshape(-1, image.RECORD)
        raw = [r[1:].reshape(3, image.SIDE, image.SIDE).transpose(1, 2, 0) for r in records]  # [H, W, 3] RGB
    else:
        lines = (root / "new_aan_pairs.test.tsv").read_text(encoding="utf-8").splitlines()
        raw = [tuple(line.split("\t")[3:5]) for line in lines]
    dataset = recipe.build_dataset(cfg, "test")
    assert len(raw) == len(dataset)
    expected = torch.softmax(class_logits(classifier.model, recipe.collate([dataset[i] for i in range(len(raw))])),
                             -1).detach().numpy()
    np.testing.assert_allclose(classifier.scores(raw, batch_size=5), expected, atol=1e-5)
    assert classifier.classify(raw[:3]) == expected[:3].argmax(-1).tolist()
    assert classifier.classify(raw[0]) == int(expected[0].argmax())
