"""Classification accuracy (LRA, recall): the fraction of examples whose argmax class equals the label, as
Skyformer's and LRA's ``accuracy``, optionally per group (recall: per task, key-to-query distance bucket and position
bucket of the recalled pair, from the recall split files too); per-class accuracy and the confusion matrix go to the
results JSON's ``details``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch

from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, check_finite, input_path
from lavo_zoo.formats.numeric import NPY_MAGIC, is_real, read_npy
from lavo_zoo.formats.text import holds_json_objects, json_rows, read_bytes, read_lines

# the confusion matrix is C x C: class ids beyond this are refused rather than allocated
MAX_CLASSES = 10_000


def _check_id_range(ids, path: Path, unit: str = "row") -> None:
    """A :class:`DataError` naming the first ``unit`` whose class id is negative or >= MAX_CLASSES."""
    import numpy as np

    bad = np.flatnonzero((ids < 0) | (ids >= MAX_CLASSES))
    if len(bad):
        raise DataError(f"{path}, {unit} {int(bad[0]) + 1}: class id {ids[bad[0]]} is out of range; class ids are "
                        f"0..C-1 for C classes (at most {MAX_CLASSES:,})")


def read_class_ids(path: Path, option: str = "--pred", raw: bytes | None = None):
    """Class ids [N] (int64 numpy) from a .npy array (integer ids [N], or real-valued scores [N, C] whose argmax is
    the id) or text with one integer per line (blank lines skipped), told apart by content, not by the file's name;
    NaN or infinite scores, booleans, fractional ids and ids outside 0..MAX_CLASSES-1 are refused naming the row or
    line. ``raw``: the file's bytes, already read (a pipe is read once)."""
    import numpy as np

    if raw is None:
        path = input_path(path, option)
        raw = read_bytes(path)
    if raw.startswith(NPY_MAGIC):
        array = read_npy(path, option, raw)
        if not is_real(array):
            raise DataError(f"{path}: expected integer class ids [N] or real scores [N, C], got {array.dtype} values")
        if array.ndim in (1, 2):
            check_finite(array, path)
        if array.ndim == 2:
            array = array.argmax(-1)
        if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) or np.all(array == np.round(array))):
            raise DataError(f"{path}: expected class ids [N] or scores [N, C], got shape {list(array.shape)} of "
                            f"{array.dtype}")
        _check_id_range(array, path)
        return array.astype(np.int64)
    ids = []
    for number, line in enumerate(read_lines(path, raw), 1):
        if not line.strip():
            continue
        try:
            value = int(line.strip())
        except ValueError:
            raise DataError(f"{path}, line {number}: '{line.strip()[:40]}' is not an integer class id") from None
        if not 0 <= value < MAX_CLASSES:
            raise DataError(f"{path}, line {number}: class id {value} is out of range; class ids are 0..C-1 for C "
                            f"classes (at most {MAX_CLASSES:,})")
        ids.append(value)
    return np.asarray(ids, dtype=np.int64)


def _doubling(value: int) -> str:
    """``value`` (>= 1) as its doubling bucket (h/2, h] for the power of two h >= ``value``: ``1``, ``2``, ``3-4``,
    ``5-8``, ..."""
    high = 1 << (value - 1).bit_length()
    low = high // 2 + 1
    return f"{high}" if low >= high else f"{low}-{high}"


def distance_bucket(distance: int) -> str:
    """The key-to-query distance bucket of ``distance`` (>= 1), doubling: ``dist:1``, ``dist:2``, ``dist:3-4``,
    ``dist:5-8``, ``dist:9-16``, ... (the bucket (h/2, h] for the power of two h >= ``distance``)."""
    if distance < 1:
        raise ValueError(f"a key-to-query distance is >= 1, got {distance}")
    return f"dist:{_doubling(distance)}"


def signed_distance_bucket(distance: int) -> str:
    """The bucket of a key-to-query distance that may be negative (noncausal recall, where a query can stand before
    its pair): ``distance_bucket`` for a key before its query (``dist:5-8``), ``ahead:<lo>-<hi>`` for a key that
    many tokens after its query (``ahead:5-8``: the key lies 5 to 8 tokens ahead)."""
    if distance == 0:
        raise ValueError("a key-to-query distance is not 0: the key and its query are two positions")
    return distance_bucket(distance) if distance > 0 else f"ahead:{_doubling(-distance)}"


def position_bucket(position: int) -> str:
    """The bucket of a recalled pair's position in its sequence (its key's, from 0), doubling from the start:
    ``pos:0``, ``pos:1``, ``pos:2-3``, ``pos:4-7``, ``pos:8-15``, ... (the very start finely, a long tail coarsely)."""
    if position < 0:
        raise ValueError(f"a position is >= 0, got {position}")
    if position < 2:
        return f"pos:{position}"
    low = 1 << (position.bit_length() - 1)
    return f"pos:{low}-{2 * low - 1}"


def recall_distance(query: int, source: int, context_len: int | None = None) -> int:
    """The key-to-query distance of a recall answer: ``query - source`` in one sequence (negative where the query
    stands before its pair, noncausal recall); in cross recall (the pair at ``source`` of a context of
    ``context_len`` tokens, the query at ``query`` of the target) the distance were the target to follow the
    context, ``context_len - source + query``."""
    return query - source if context_len is None else context_len - source + query


def recall_groups(task: str, distance: int, position: int) -> tuple[str, str, str]:
    """The evaluator's groups of one recall answer: its task, its distance bucket
    (:func:`signed_distance_bucket`) and its pair's position bucket (:func:`position_bucket`)."""
    return task, signed_distance_bucket(distance), position_bucket(position)


BUCKETS = ("dist:", "ahead:", "pos:")  # recall's bucketed groups, in this order after the named ones


def group_order(name: str) -> tuple:
    """The sort key that puts groups in a readable order: names first, then distance buckets (a key before its
    query, then after it), then position buckets, each by its lower bound (``accuracy@`` before a name is ignored,
    so that metric names sort the same way)."""
    name = name.removeprefix("accuracy@")
    for rank, prefix in enumerate(BUCKETS, 1):
        low = name.removeprefix(prefix).split("-")[0]
        if name.startswith(prefix) and low.isdigit():
            return (rank, int(low), name)
    return (0, 0, name)


# the recall recipe's tasks whose queries may stand before their keys (its noncausal tasks; in every other task of a
# split's one sequence, a source comes before its query)
QUERIES_BEFORE_KEYS = frozenset({"noncausal_mqar"})


def _int_list(row: dict[str, Any], key: str, where: str) -> list[int]:
    value = row.get(key)
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise DataError(f"{where}: '{key}' must be a list of integers, got {str(value)[:60]}")
    return value


def read_recall_files(pred: Path, ref: Path, pred_lines: list[str] | None = None, ref_lines: list[str] | None = None
                      ) -> tuple[list[int], list[int], list[tuple[str, str]]]:
    """(predicted ids, true ids, :func:`recall_groups` of each) of every answer of a recall split: ``ref`` is the
    split's JSON lines (``lavo-zoo data recall``: task, tokens, queries, sources, answers per example, and the
    ``context`` a cross-recall target reads), ``pred`` one JSON object per example in the same order with its
    ``answers`` (``lavo-zoo answer`` writes it; a ``queries`` list, where given, must be the reference's).
    Mismatched or malformed lines are a DataError naming the line; a split's example given as a prediction (it holds
    the true answers) is a UsageError.

    Args:
        pred: the predictions file.
        ref: the split's file.
        pred_lines: ``pred``'s lines, already read, or None (read here).
        ref_lines: ``ref``'s lines, already read, or None (read here).
    """
    refs = list(json_rows(read_lines(input_path(ref, "--ref")) if ref_lines is None else ref_lines, ref))
    preds = list(json_rows(read_lines(input_path(pred, "--pred")) if pred_lines is None else pred_lines, pred))
    if len(preds) != len(refs) or not refs:
        raise DataError(f"--pred {pred} holds {len(preds)} examples and --ref {ref} {len(refs)}; they must hold the "
                        "same number, at least one, in the same order")
    predicted, true, groups = [], [], []
    for (p_line, p_row), (r_line, r_row) in zip(preds, refs):
        r_where, p_where = f"{ref}, line {r_line}", f"{pred}, line {p_line}"
        if not isinstance(r_row, dict) or not isinstance(r_row.get("task"), str):
            raise DataError(f"{r_where}: expected a recall example, a JSON object with 'task', 'queries', 'sources' "
                            "and 'answers' (lavo-zoo data recall writes them)")
        if not isinstance(p_row, dict):
            raise DataError(f"{p_where}: expected a JSON object with 'answers' (lavo-zoo answer writes them)")
        if "tokens" in p_row or "sources" in p_row or "context" in p_row:
            raise UsageError(f"--pred {p_where} is an example of a recall split (its 'tokens' and true 'answers'), "
                             "not a model's answers: scoring it would only compare the split with itself. Give what "
                             "`lavo-zoo answer CKPT --data SPLIT --out answers.jsonl` writes")
        queries, sources = _int_list(r_row, "queries", r_where), _int_list(r_row, "sources", r_where)
        answers, guesses = _int_list(r_row, "answers", r_where), _int_list(p_row, "answers", p_where)
        context_len = len(_int_list(r_row, "context", r_where)) if "context" in r_row else None
        either_side = r_row["task"] in QUERIES_BEFORE_KEYS or context_len is not None
        if not len(queries) == len(sources) == len(answers) or any(
                s < 0 or (s >= q if not either_side else context_len is None and s == q)
                for q, s in zip(queries, sources)):
            raise DataError(f"{r_where}: 'queries', 'sources' and 'answers' must be as many, each source before its "
                            "query (another position in noncausal recall, a position of the context in cross recall)")
        if len(guesses) != len(answers) or p_row.get("queries", queries) != queries:
            raise DataError(f"{p_where}: {len(guesses)} answers for the {len(answers)} queries of {r_where}; the "
                            "predictions must follow the reference line by line")
        predicted += guesses
        true += answers
        groups += [recall_groups(r_row["task"], recall_distance(q, s, context_len), s)
                   for q, s in zip(queries, sources)]
    return predicted, true, groups


@register_evaluator("accuracy")
class Accuracy(Evaluator):
    """``accuracy`` over every example. ``update(predictions, targets)``: logits / scores [N, C] (argmax is the
    prediction) or predicted class ids [N], against true class ids [N]; or, to score groups too, targets
    ``{"ids": [N], "groups": N sequences of group names}``, each example counted in every group it names:
    ``accuracy@<group>`` per group (the recall recipe's tasks and ``dist:<lo>-<hi>`` key-to-query distance
    buckets, ``ahead:<lo>-<hi>`` where the key stands after its query, ``pos:<lo>-<hi>`` position buckets of the
    recalled pair). ``num_samples`` counts examples (answers, for recall).

    :meth:`details`: with ``confusion`` (the default), ``per_class_accuracy`` (correct / examples of each true class;
    None for a class with none) and ``confusion_matrix`` (rows = true class, columns = predicted class), over
    ``num_classes`` classes (default: grown to cover every class seen); ``groups``: correct and examples per group.
    Without ``confusion`` (a vocabulary of thousands of classes) only the counts are kept.
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"accuracy": True}
    files = ("--pred: predicted class ids, one integer per line, or .npy ids [N] / scores [N, C] (argmax); "
             "--ref: the true class ids, as many. Recall: --pred JSON lines of {\"answers\": [...]} (lavo-zoo "
             "answer), --ref the split's .jsonl (per task and distance bucket too)")

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> Accuracy:
        if ref is None:
            raise UsageError("score accuracy needs --ref, the true class ids (recall: the split's .jsonl)")
        pred, ref = input_path(pred, "--pred"), input_path(ref, "--ref")
        raw_pred, raw_ref = read_bytes(pred), read_bytes(ref)  # once each: a path may be a pipe
        json_lines = None
        if not raw_pred.startswith(NPY_MAGIC) and not raw_ref.startswith(NPY_MAGIC):
            lines = read_lines(pred, raw_pred), read_lines(ref, raw_ref)
            if any(holds_json_objects(side) for side in lines):  # by content: a .txt or a pipe is read as it is
                json_lines = lines
        if json_lines is not None:
            predicted, true, groups = read_recall_files(pred, ref, *json_lines)
            evaluator = cls(confusion=False)
            try:
                evaluator.update(torch.tensor(predicted), {"ids": torch.tensor(true), "groups": groups})
            except ValueError as e:  # negative ids
                raise DataError(f"{pred} / {ref}: {e}") from None
            return evaluator
        predicted, true = read_class_ids(pred, "--pred", raw_pred), read_class_ids(ref, "--ref", raw_ref)
        if predicted.shape != true.shape or not len(true):
            raise DataError(f"--pred {pred} holds {len(predicted)} class ids and --ref {ref} {len(true)}; they must "
                            "hold the same number, at least one")
        evaluator = cls()
        try:
            evaluator.update(torch.from_numpy(predicted), torch.from_numpy(true))
        except ValueError as e:  # negative ids
            raise DataError(f"{pred} / {ref}: {e}") from None
        return evaluator

    def __init__(self, num_classes: int | None = None, confusion: bool = True) -> None:
        self.num_classes = num_classes
        self.confusion_kept = confusion
        super().__init__()

    def reset(self) -> None:
        self.num_samples = 0
        self.correct = 0
        self.groups: dict[str, list[int]] = {}  # group -> [correct, examples]
        self.confusion = torch.zeros(self.num_classes or 0, self.num_classes or 0, dtype=torch.long)  # [true, pred]

    def update(self, predictions: torch.Tensor, targets: torch.Tensor | dict[str, Any]) -> None:
        groups = None
        if isinstance(targets, dict):
            targets, groups = targets["ids"], targets["groups"]
        pred = predictions.detach()
        if pred.dim() == 2:
            pred = pred.argmax(-1)
        pred, true = pred.reshape(-1).long().cpu(), targets.detach().reshape(-1).long().cpu()
        if pred.shape != true.shape:
            raise ValueError(f"{pred.numel()} predictions for {true.numel()} targets")
        if groups is not None and len(groups) != true.numel():
            raise ValueError(f"{len(groups)} group labels for {true.numel()} targets")
        if true.numel() and (min(int(true.min()), int(pred.min())) < 0):
            raise ValueError("class ids must be >= 0")
        needed = max(int(true.max()) + 1, int(pred.max()) + 1) if true.numel() else 0
        if needed > MAX_CLASSES:
            raise ValueError(f"class id {needed - 1} is out of range: at most {MAX_CLASSES:,} classes")
        if self.num_classes is not None and needed > self.num_classes:
            raise ValueError(f"class id {needed - 1} is outside the evaluator's {self.num_classes} classes")
        hits = pred == true
        self.correct += int(hits.sum())
        self.num_samples += true.numel()
        if groups is not None:
            for names, hit in zip(groups, hits.tolist()):
                for name in names:
                    counts = self.groups.setdefault(str(name), [0, 0])
                    counts[0] += hit
                    counts[1] += 1
        if not self.confusion_kept:
            return
        if needed > self.confusion.shape[0]:
            grown = torch.zeros(needed, needed, dtype=torch.long)
            k = self.confusion.shape[0]
            grown[:k, :k] = self.confusion
            self.confusion = grown
        k = self.confusion.shape[0]
        self.confusion += torch.bincount(true * k + pred, minlength=k * k).view(k, k)

    def compute(self) -> dict[str, float]:
        if self.num_samples == 0:
            raise ValueError("Accuracy.compute() called before any update()")
        out = {"accuracy": self.correct / self.num_samples}
        for name in sorted(self.groups, key=group_order):
            correct, examples = self.groups[name]
            out[f"accuracy@{name}"] = correct / examples
        return out

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.groups:
            out["groups"] = {name: {"correct": self.groups[name][0], "examples": self.groups[name][1]}
                             for name in sorted(self.groups, key=group_order)}
        if not self.confusion_kept:
            return out
        per_class = self.confusion.sum(1)
        out.update({"per_class_accuracy": {str(c): (float(self.confusion[c, c]) / int(n) if n else None)
                                           for c, n in enumerate(per_class.tolist())},
                    "confusion_matrix": self.confusion.tolist()})
        present = [c for c, n in enumerate(per_class.tolist()) if n]
        if len(present) == 1:
            out["note"] = (f"every one of the {self.num_samples} examples is of class {present[0]}: the accuracy says "
                           "how often the model predicts that class, not how well it tells the classes apart")
        return out
