"""Built-in data: the one protocol through which every recipe generates the data it runs on offline.

A recipe that can generate its own data sets ``Recipe.builtin`` to an instance of a :class:`BuiltinData` subclass,
written in the recipe's ``builtin.py``::

    class BuiltinShapes(BuiltinData):
        datasets = ("shapes",)                       # what `lavo-zoo data point_cloud/<name>` takes, default first

        def key(self, data):                         # everything the generated files depend on: the cache key
            return {"dataset": "shapes", "version": 2, "train": data.builtin_size, "seed": data.builtin_seed}

        def write(self, out, data):                  # the generator: the real dataset's on-disk layout in `out`
            return write_shapes(out, data.builtin_size, data.builtin_seed)

The engine builds the rest on those: :meth:`Recipe.data_path` reads ``data.path`` or generates the built-in data once
into the cache (:func:`generated_dataset`), and :meth:`Recipe.write_data` (``lavo-zoo data``) writes it where the
user asks (:func:`write_dataset`), never replacing a file without ``overwrite``.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from lavo_zoo.atomic import swap_folder, temporary_folder
from lavo_zoo.errors import UsageError, ZooError, did_you_mean, os_error_reason
from lavo_zoo.outputs import DATA_FOLDER, Outputs

DATA_PATH_FILE = ".data_path"  # inside a built-in dataset's folder: the data.path relative to it ("." = the folder)


class BuiltinData:
    """The built-in data of one recipe: the dataset names it can generate, the cache key of the files a data section
    describes, and the generator. Subclasses set ``datasets`` and implement :meth:`key` and :meth:`write`;
    :meth:`config` has a default."""

    datasets: ClassVar[tuple[str, ...]] = ()  # the names `lavo-zoo data <recipe>/<name>` takes, the default first
    # the settings that multiply what generating takes (:meth:`footprint`), named when it is refused
    size_settings: ClassVar[tuple[str, ...]] = ("--size (data.builtin_size)",)

    def config(self, data: Any, dataset: str, size: int | None) -> Any:
        """The data section whose built-in data ``lavo-zoo data <recipe>/<dataset> --size N`` writes.

        Args:
            data: the recipe's default data section (an instance of its ``DataConfig``).
            dataset: one of :attr:`datasets`.
            size: ``--size``, in the recipe's unit (books, examples, rows, models per category), or None.

        Returns:
            The data section to generate. The default sets ``builtin_size`` to ``size`` when given.

        Raises:
            UsageError: ``size`` is given but the data section has no ``builtin_size``.
        """
        if size is None:
            return data
        if not hasattr(data, "builtin_size"):
            raise UsageError(f"the built-in dataset '{dataset}' has a fixed size; drop --size")
        return replace(data, builtin_size=size)

    def key(self, data: Any) -> dict[str, Any]:
        """Everything the built-in files of data section ``data`` depend on.

        Args:
            data: a data section with ``path`` unset.

        Returns:
            JSON-able values (generator settings, the generator's version, the Python version where the data comes
            from its standard library): the key of the cache, so that a change generates a fresh copy and a stale
            one is never read. A ``dataset`` entry names the cached folder.
        """
        raise NotImplementedError

    def footprint(self, data: Any) -> tuple[int, int]:
        """What generating data section ``data`` takes, for a generator whose sizes (``--size``, a sequence length)
        are not bounded by the schema: checked before any work (:func:`check_footprint`).

        Args:
            data: a data section with ``path`` unset.

        Returns:
            (bytes of memory the generator holds at its peak, bytes of files it writes); the default (0, 0) checks
            nothing.
        """
        return 0, 0

    def write(self, out: Path, data: Any) -> Path:
        """Generate the built-in data that data section ``data`` describes.

        Args:
            out: an existing, empty folder to write into, in the real dataset's on-disk layout.
            data: a data section with ``path`` unset.

        Returns:
            The path to give as ``data.path``: ``out``, or a file in it.
        """
        raise NotImplementedError


def check_dataset(recipe: str, dataset: str | None, names: tuple[str, ...]) -> str:
    """``dataset`` (default: the first of ``names``) if it is one of ``names``, else a :class:`UsageError`."""
    dataset = dataset or names[0]
    if dataset not in names:
        raise UsageError(f"recipe '{recipe}' has no built-in dataset '{dataset}'{did_you_mean(dataset, names)}; "
                         f"choose one of {', '.join(names)} (lavo-zoo data {recipe}/<dataset>)")
    return dataset


def check_footprint(builtin: BuiltinData, data: Any, target: Path, what: str) -> None:
    """Refuse, before it starts, a generation whose memory or files (:meth:`BuiltinData.footprint`) the machine cannot
    hold: an :class:`~lavo_zoo.errors.InputError` saying ``what`` and naming the sizes to lower.

    Args:
        builtin: the recipe's built-in data.
        data: the data section to generate.
        target: the folder the files go to (or would be created in).
        what: the request, for the message (``the built-in data of recall/mqar``).
    """
    from lavo_zoo.engine.memory import check_fits, format_bytes

    memory, disk = builtin.footprint(data)
    *rest, last = builtin.size_settings
    fix = f"lower {', '.join(rest) + ' or ' if rest else ''}{last}"
    check_fits(memory, "cpu", f"generating {what}", fix)
    folder = next((p for p in (Path(target), *Path(target).parents) if p.exists()), Path("."))
    free = shutil.disk_usage(folder).free
    if disk > free:
        from lavo_zoo.errors import InputError

        raise InputError(f"generating {what} writes about {format_bytes(disk)}, but {folder} has {format_bytes(free)} "
                         f"free; {fix}, or write elsewhere")


def generated_dataset(parent: Path, name: str, key: dict[str, Any], write: Callable[[Path], Path],
                      check: Callable[[], None] | None = None) -> Path:
    """A generated built-in dataset in ``parent/<name>-<hash of key>``, written once; returns the path to give as
    ``data.path`` (the folder, or the file in it that ``write`` returned).

    ``key`` holds everything the generated files depend on (generator settings, a format version, the Python version
    for data taken from the standard library): a change gives another folder, so a stale dataset is never read.
    ``check()``, when given, runs before a dataset is generated (not when it is in the cache). ``write(folder)``
    fills a temporary folder and returns the data path inside it; the folder is then renamed into place, so crashes
    never leave a half-written dataset. Processes that ask for it at once wait for the one that
    writes it (a lock file beside it), so none writes it twice or replaces a dataset another one is reading.

    Args:
        parent: the cache folder the dataset's folder goes in.
        name: the dataset's name, the folder's prefix.
        key: everything the files depend on (above).
        write: fills the folder it is given and returns the data path inside it.
        check: run before generating (e.g. a dependency's presence), or None.
    """
    from filelock import FileLock

    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    root = Path(parent).expanduser() / f"{name}-{digest}"
    if not (root / DATA_PATH_FILE).is_file():
        if check is not None:
            check()
        root.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(root.parent / f".{root.name}.lock"):
            if not (root / DATA_PATH_FILE).is_file():  # nobody wrote it while this process waited
                tmp = None
                try:
                    tmp = temporary_folder(root)
                    made = Path(write(tmp))
                    (tmp / DATA_PATH_FILE).write_text(str(made.relative_to(tmp)))
                    swap_folder(tmp, root)  # replaces a folder of the previous layout, without the marker
                except OSError as e:
                    raise ZooError(f"could not generate the built-in data in the cache {root.parent}: "
                                   f"{os_error_reason(e)}. Point LAVO_ZOO_CACHE (or data.cache_dir) at a writable "
                                   "folder with space, or give data.path") from None
                finally:
                    if tmp is not None:
                        shutil.rmtree(tmp, ignore_errors=True)
    return root / (root / DATA_PATH_FILE).read_text()


def write_dataset(out: Path, write: Callable[[Path], Path], overwrite: bool = False) -> Path:
    """Generate data with ``write`` (as :meth:`BuiltinData.write`) into the folder ``out``; returns the data path.

    ``out`` is a dataset folder of the output policy (:data:`lavo_zoo.outputs.DATA_FOLDER`): the files are generated
    in a staging folder beside it and moved in once complete, beside what else it holds; a name already taken is
    refused before anything moves (with ``overwrite``, replaced only where an earlier ``lavo-zoo data`` wrote that
    file, as its ``data-manifest.json`` records), so a user's own data is never lost, and a failure (a full or
    read-only disk) leaves no partial file, no staging folder and no empty ``out``, with a message naming the folder
    and why.
    """
    out = Path(out)
    with Outputs("data", overwrite) as outputs:
        staging = outputs.folder(out, DATA_FOLDER)
        made = Path(write(staging)).relative_to(staging)
    return out / made
