"""ListOps (Nangia & Bowman 2018) as LRA ships it: ``basic_{train,val,test}.tsv`` with the header ``Source	Target``,
and the LRA generator (``lra_benchmarks/data/listops.py``) re-implemented without TensorFlow.

A source is a bracketed tree of MIN / MAX / MED / SM (sum mod 10) over digits, written with LRA's parentheses:
``( ( ( [MAX 2 ) 9 ) ] )``; its value (0..9) is the target. Tokens as LRA: the parentheses are dropped and the
rest split on whitespace (operators, digits, and the closing bracket ``]``, which later LRA code keeps as 'X').
"""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data.common import Example, check_label, require_file

MIN, MAX, MED, SUM_MOD, END = "[MIN", "[MAX", "[MED", "[SM", "]"
OPERATORS = (MIN, MAX, MED, SUM_MOD)
VALUES = range(10)
VALUE_P = 0.25  # probability that an inner node (depth < max_depth) is an operator
VOCAB = ("<pad>", *(str(v) for v in VALUES), *OPERATORS, END)  # id 0 pads
TOKEN_IDS = {tok: i for i, tok in enumerate(VOCAB)}
NUM_CLASSES = 10
FILES = {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}


@dataclass
class ListOpsGenerator:
    """The LRA generator's settings (its defaults: depth 10, 10 arguments, 500 < length < 2000 tokens)."""

    max_depth: int = 10
    max_args: int = 10
    min_length: int = 500  # exclusive bounds, as LRA (length counts operators, digits and closing brackets)
    max_length: int = 2000


def generate_tree(rng: random.Random, depth: int, max_depth: int, max_args: int) -> tuple[Any, int]:
    """(tree, length) as LRA's ``generate_tree``: a digit, or ``((..((op, a1), a2).., an), END)``.

    Args:
        rng: the generator.
        depth: the depth of the node being generated (0: the root).
        max_depth: at this depth every node is a digit.
        max_args: an operator takes at most this many arguments.
    """
    r = rng.random() if depth < max_depth else 1.0
    if r > VALUE_P:
        return rng.choice(VALUES), 1
    length = 2
    values = []
    for _ in range(rng.randint(2, max_args)):
        sub, sub_length = generate_tree(rng, depth + 1, max_depth, max_args)
        values.append(sub)
        length += sub_length
    tree: Any = (rng.choice(OPERATORS), values[0])
    for value in values[1:]:
        tree = (tree, value)
    return (tree, END), length


def to_string(tree: Any) -> str:
    """A ListOps expression tree in the release's bracketed text form."""
    if isinstance(tree, (str, int)):
        return str(tree)
    return f"( {to_string(tree[0])} {to_string(tree[1])} )"


def to_value(tree: Any) -> Any:
    """The value of ``tree`` as LRA's ``to_value`` (MED = int(np.median), SM = sum mod 10)."""
    if not isinstance(tree, tuple):
        return tree
    left, right = to_value(tree[0]), to_value(tree[1])
    if left in OPERATORS:
        return left, [right]
    if right == END:
        op, args = left
        if op == MIN:
            return min(args)
        if op == MAX:
            return max(args)
        if op == MED:
            return int(np.median(args))
        return sum(args) % 10
    return left[0], left[1] + [right]


def generate(num_samples: int, settings: ListOpsGenerator, seed: int) -> list[tuple[str, int]]:
    """``num_samples`` distinct (source, value) pairs with min_length < length < max_length."""
    if settings.min_length + 1 >= settings.max_length or settings.max_args < 2 or settings.max_depth < 1:
        raise DataError(f"ListOps generator settings {settings} leave no possible tree; need min_length + 1 < "
                        "max_length, max_args >= 2 and max_depth >= 1")
    rng = random.Random(seed)
    trees: dict[Any, None] = {}  # insertion-ordered set: deduplicated across all splits, as LRA
    attempts = 0
    while len(trees) < num_samples:
        attempts += 1
        if attempts > 2000 * num_samples + 100_000:
            raise DataError(f"ListOps generator found only {len(trees)} of {num_samples} distinct trees with "
                            f"{settings.min_length} < length < {settings.max_length}; widen the length range")
        tree, length = generate_tree(rng, 1, settings.max_depth, settings.max_args)
        if settings.min_length < length < settings.max_length:
            trees.setdefault(tree)
    return [(to_string(t), int(to_value(t))) for t in trees]


def write_split(path: Path, rows: list[tuple[str, int]]) -> None:
    """Write ``rows`` (expression, answer) as the release's tab-separated file with its header."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows(rows)


def write_dataset(out: Path, sizes: dict[str, int], settings: ListOpsGenerator, seed: int) -> None:
    """``out/basic_{train,val,test}.tsv`` as LRA writes them.

    Args:
        out: the folder to write into.
        sizes: examples per split (``train``, ``val``, ``test``).
        settings: the generator's settings.
        seed: the generator's seed.
    """
    rows = generate(sum(sizes.values()), settings, seed)
    start = 0
    for split, n in sizes.items():
        write_split(out / FILES[split], rows[start:start + n])
        start += n


def tokenize(source: str, max_length: int, where: str) -> np.ndarray:
    """LRA's ListOps tokens of ``source`` (parentheses dropped), truncated to ``max_length``: [L] int64."""
    tokens = source.replace("(", " ").replace(")", " ").split()
    unknown = [t for t in tokens if t not in TOKEN_IDS or t == VOCAB[0]]
    if unknown:
        raise DataError(f"{where}: unknown ListOps token '{unknown[0]}'; sources hold digits 0-9, "
                        f"{', '.join(OPERATORS)}, ']' and parentheses")
    if not tokens:
        raise DataError(f"{where}: the Source field is empty")
    return np.array([TOKEN_IDS[t] for t in tokens[:max_length]], dtype=np.int64)


def load_split(root: Path, split: str, max_length: int) -> list[Example]:
    """Examples of ``root/basic_<split>.tsv``; malformed rows and labels outside 0..9 are refused with the line."""
    path = require_file(root / FILES[split], f"the ListOps {split} split")
    examples = []
    with path.open(newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header != ["Source", "Target"]:
            raise DataError(f"{path}: line 1 must be the header 'Source<TAB>Target', got {header!r}")
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            if len(row) != 2:
                raise DataError(f"{where}: malformed row with {len(row)} field(s); each row is Source<TAB>Target")
            examples.append(Example((tokenize(row[0], max_length, where),), check_label(row[1], NUM_CLASSES, where)))
    if not examples:
        raise DataError(f"{path}: the split is empty (no rows after the header)")
    return examples
