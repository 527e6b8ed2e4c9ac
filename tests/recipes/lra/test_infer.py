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


def _classifier(task: str):
    from lavo_zoo.recipes.lra.infer import Classifier

    recipe, cfg = tiny(task)
    cfg = recipe.resolve(cfg)
    torch.manual_seed(0)
    return Classifier(recipe, cfg, recipe.build_model(cfg).eval(), "cpu", checkpoint="tiny")


def test_one_text_is_scored_as_one_input_not_one_per_character() -> None:
    classifier = _classifier("text")
    one = classifier.scores("a great movie")
    assert one.shape == (classifier.cfg.model.num_classes,)
    np.testing.assert_allclose(one, classifier.scores(["a great movie"])[0], atol=1e-6)
    np.testing.assert_allclose(classifier.scores(b"a great movie"), one, atol=1e-6)
    assert classifier.classify("a great movie") == int(one.argmax())
    assert classifier.classify(["a great movie", "dull"]) == classifier.scores(["a great movie", "dull"]).argmax(
        -1).tolist()
    assert classifier.classify([]) == [] and classifier.scores([]).shape == (0, classifier.cfg.model.num_classes)


@pytest.mark.parametrize("task,inputs,message", [
    ("text", ("a", "b"), r"inputs must be a text \(str or bytes\) or a list of them, got tuple of 2; give a list"),
    ("text", np.array(["a", "b"]), r"got ndarray of shape \[2\]; give a list"),
    ("text", torch.tensor([1, 2]), r"got Tensor of shape \[2\]"),
    ("text", 5, "got int"),
    ("text", ["fine", 5], r"inputs\[1\] must be a text"),
    ("text", [""], "holds no text"),
    ("listops", b"[MAX 1 2 ]", r"a ListOps expression \(str\)"),
    ("retrieval", ["one text", "another"], r"inputs\[0\] must be a pair of texts"),
    ("image", np.zeros((16, 16), np.uint8), "takes 32x32 images .* got 16x16"),
    ("image", np.full((32, 32), 0.5), r"integer gray levels 0..255, got values 0.5..0.5 .* multiply by 255"),
    ("image", np.zeros((4, 32, 32), np.uint8), r"got ndarray of shape \[4, 32, 32\]; give a list"),
])
def test_inputs_of_other_types_are_refused_with_what_the_task_takes(task, inputs, message) -> None:
    from lavo_zoo.errors import InputError

    with pytest.raises(InputError, match=message):
        _classifier(task).classify(inputs)


def test_batch_size_and_non_finite_scores_are_refused() -> None:
    from lavo_zoo.errors import InputError

    classifier = _classifier("text")
    for size in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="batch_size must be an integer from 1 to 4096"):
            classifier.scores(["a"], batch_size=size)
    with torch.no_grad():
        classifier.model.classifier[-1].bias.fill_(float("nan"))
    with pytest.raises(InputError, match="output for inputs 0..1 is not finite"):
        classifier.scores(["a", "b"])
