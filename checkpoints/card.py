"""Model cards: the ``README.md`` every exported checkpoint carries, inside its archive and beside it, and that
``lavo-zoo push`` uploads as the repository's card.

The front matter is Hugging Face metadata (``library_name``, ``license``, ``tags`` and a ``model-index`` with the
recipe's task, the dataset named by the config, the split and every metric of the results JSON given to
``export --results``). The body says what the model is (the recipe, the attention of every site with its options,
layer by layer for a hybrid, and what each layer keeps while decoding), its config (verbatim, in a fenced YAML block),
the command that trained it and the one that scored it, the git commit, the hardware, the seed, the licence, and its
intended use and limits.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from lavo_zoo.engine.checkpoint_io import CONFIG, read_config
from lavo_zoo.engine.evaluate import check_pin
from lavo_zoo.errors import UsageError, ZooError

LIBRARY = "lavo-zoo"
# licence identifiers the Hugging Face Hub knows (others are given as `license: other` with their name)
HF_LICENSES = ("apache-2.0", "mit", "bsd-2-clause", "bsd-3-clause", "cc0-1.0", "cc-by-4.0", "cc-by-sa-4.0",
               "cc-by-nc-4.0", "cc-by-nc-sa-4.0", "cc-by-nd-4.0", "cc-by-nc-nd-4.0", "gpl-2.0", "gpl-3.0",
               "lgpl-3.0", "agpl-3.0", "mpl-2.0", "bsl-1.0", "unlicense", "openrail", "openrail++")
GENERIC_LIMITS = ("This is a research checkpoint of a small-scale model zoo, made to compare attention mechanisms "
                  "under one training budget, not a model for production use. Its metrics are comparable only with "
                  "models trained and scored on the same data, with the same budget and the same evaluation "
                  "settings.")


# ----------------------------------------------------------------------------------------------- results JSON
EVAL_KEYS = ("recipe", "checkpoint_sha256", "split", "metrics")  # what every `lavo-zoo eval --out` JSON holds


def load_results(path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The results JSON of ``lavo-zoo eval --out`` at ``path``, checked to be an evaluation of exactly the checkpoint
    whose meta.json is ``meta`` (its recipe and the sha256 of its weights) with a finite value for every metric.

    Raises:
        UsageError: the file is unreadable or malformed, is a ``lavo-zoo score`` output (which scored files, not this
            checkpoint), lacks what an evaluation records, scored another recipe or other weights, or holds a
            metric that is missing, not a number, NaN or infinite, or was changed since the evaluation wrote it (its
            pin, :func:`~lavo_zoo.engine.evaluate.check_pin`); each message says how to get the right file.
    """
    evaluate = "evaluate this checkpoint (`lavo-zoo eval CKPT --split test --out results.json`) and give that file"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--results {path}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:
        raise UsageError(f"--results {path} is not JSON ({e}); {evaluate}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--results {path} is not a results JSON of `lavo-zoo eval --out` (it holds a "
                         f"{type(data).__name__}); {evaluate}")
    if "metric" in data and "pred" in data:
        raise UsageError(f"--results {path} is the output of `lavo-zoo score {data['metric']}`, which scored "
                         "prediction files, not this checkpoint; a release reports an evaluation of its own weights: "
                         f"{evaluate}")
    missing = [key for key in EVAL_KEYS if key not in data]
    if missing:
        raise UsageError(f"--results {path} lacks {', '.join(missing)}, which every `lavo-zoo eval --out` results "
                         f"JSON records, so nothing shows which weights it scored; {evaluate}")
    untrusted = check_pin(data)
    if untrusted:
        raise UsageError(f"--results {path} {untrusted}; a release publishes only what was measured: {evaluate}")
    if data["recipe"] != meta.get("recipe"):
        raise UsageError(f"--results {path} scored a '{data['recipe']}' checkpoint, not this '{meta.get('recipe')}' "
                         f"one; {evaluate}")
    if data["checkpoint_sha256"] != meta.get("weights_sha256"):
        raise UsageError(f"--results {path} scored other weights (sha256 {data['checkpoint_sha256']}) than this "
                         f"checkpoint's ({meta.get('weights_sha256')}); {evaluate}")
    if not isinstance(data["split"], str) or not isinstance(data["metrics"], dict) or not data["metrics"]:
        raise UsageError(f"--results {path}: 'split' must be a split name and 'metrics' a non-empty mapping, as "
                         f"`lavo-zoo eval --out` writes them; {evaluate}")
    for name, metric in data["metrics"].items():
        value = metric.get("value") if isinstance(metric, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not isinstance(
                metric.get("higher_is_better"), bool):
            raise UsageError(f"--results {path}: metric '{name}' is {metric!r}, not {{\"value\": <number>, "
                             f"\"higher_is_better\": <true|false>}} as `lavo-zoo eval --out` writes it; {evaluate}")
        if not math.isfinite(value):
            raise UsageError(f"--results {path}: metric '{name}' is {value}; a release does not publish a "
                             "non-finite result. Find why the evaluation gave it (a diverged model, a too short "
                             "split), then evaluate again (`lavo-zoo eval CKPT --out results.json`)")
    return data


def scoring_command(name: str, results: dict[str, Any]) -> str:
    """The command that reproduces the metrics of ``results`` (a results JSON of ``lavo-zoo eval``) on the released
    checkpoint ``name``: ``lavo-zoo eval NAME [OVERRIDES] --split SPLIT [--max-batches N]``, with the overrides the
    evaluation ran with (its ``overrides``; in a results JSON written before they were recorded, those of its
    ``command``), so that the index entry cites what measured its metrics."""
    overrides, max_batches = results.get("overrides"), results.get("max_batches")
    if not isinstance(overrides, list):  # an earlier results JSON: read them back from the command line it records
        words = shlex.split(results["command"]) if isinstance(results.get("command"), str) else []
        overrides = [w for w in words[3:] if "=" in w and not w.startswith("-")]
        if "--max-batches" in words[:-1]:
            max_batches = words[words.index("--max-batches") + 1]
    words = ["lavo-zoo", "eval", name, *map(str, overrides), "--split", str(results["split"])]
    return shlex.join(words + (["--max-batches", str(max_batches)] if max_batches is not None else []))


def result_metrics(results: dict[str, Any]) -> list[tuple[str, float, bool | None]]:
    """(name, value, higher_is_better or None) of every numeric metric of a results JSON, nested names joined by
    ``/``, in the results' order."""
    found: list[tuple[str, float, bool | None]] = []

    def walk(tree: dict[str, Any], prefix: str) -> None:
        for key, value in tree.items():
            if isinstance(value, dict) and "value" in value:
                better = value.get("higher_is_better")
                value, better = value["value"], better if isinstance(better, bool) else None
            else:
                better = None
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}/")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                found.append((f"{prefix}{key}", value, better))

    walk(results.get("metrics") or {}, "")
    return found


# ------------------------------------------------------------------------------------------------------- card
def build_card(checkpoint: Path, meta: dict[str, Any], *, name: str, license: str,
               results: dict[str, Any] | None = None, transformers_use: str | None = None) -> str:
    """The model card (Markdown with YAML front matter) of checkpoint directory ``checkpoint`` released as index
    entry ``name`` under ``license``; ``results``: a results JSON (:func:`load_results`) whose metrics it reports.
    ``transformers_use``: the card of the checkpoint exported as a transformers folder (``export --format hf``):
    ``library_name: transformers``, and this Markdown (from the recipe's transformers plugin) as its Use section.

    Args:
        checkpoint: the checkpoint directory (its config.yaml is read).
        meta: the checkpoint's meta.json.
        name: the index entry's name.
        license: the weights' license (an SPDX id).
        results: a results JSON whose metrics the card reports, or None.
        transformers_use: the Use section of a transformers folder's card, or None (an archive's card).
    """
    transformers = transformers_use is not None
    config_text = (checkpoint / CONFIG).read_text(encoding="utf-8", errors="replace")
    try:
        config = yaml.safe_load(config_text)
    except yaml.YAMLError:
        config = None
    config = config if isinstance(config, dict) else {}
    recipe, cfg = _recipe_and_config(checkpoint, meta)
    task_type, task_name = getattr(recipe, "task", None) or ("other", "Other")
    if cfg is not None:  # the validated config: defaults filled in (the attention of a config that names none)
        dataset = recipe.dataset_name(cfg.data)
        sites = layer_sites(getattr(cfg, "model", None))
    else:
        path = (config.get("data") or {}).get("path")
        dataset = Path(str(path)).name if path else "built-in data"
        sites = attention_sites((config.get("model") or {}).get("attention"))
    metrics = result_metrics(results) if results else []
    split = (results or {}).get("split")
    front: dict[str, Any] = {"library_name": "transformers" if transformers else LIBRARY,
                             **({"pipeline_tag": task_type} if transformers else {}), **_license_fields(license),
                             "tags": _unique(["lavo", LIBRARY, str(meta.get("recipe")), task_type,
                                              *(site[1] for site in sites)])}
    if metrics:
        front["model-index"] = [{"name": name, "results": [{
            "task": {"type": task_type, "name": task_name},
            "dataset": {"type": _slug(dataset), "name": dataset, **({"split": split} if split else {})},
            "metrics": [{"type": metric, "name": metric, "value": value} for metric, value, _ in metrics]}]}]
    parts = [
        "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=120) + "---",
        _summary(name, meta, recipe, task_name, dataset),
        _model_section(sites),
        _results_section(name, meta, results, metrics, split),
        ("## Config\n\nThe lavo-zoo config it was trained with (`config.json` holds it, under `model` and "
         "`lavo_zoo`), from which `lavo-zoo eval` rebuilds the model:\n\n" if transformers else
         "## Config\n\nThe checkpoint's `config.yaml`, from which `lavo-zoo eval` rebuilds the model:\n\n")
        + _fenced(config_text, "yaml"),
        _provenance_section(meta, results),
        transformers_use if transformers else _use_section(name),
        (f"## Licence\n\nThe weights are released under {license}. lavo-zoo's code is Apache-2.0. Data given as "
         "`data.path` keeps its own licence and terms."),
        "## Intended use and limitations\n\n" + GENERIC_LIMITS
        + (f" {recipe.limits}" if getattr(recipe, "limits", "") else ""),
    ]
    return "\n\n".join(parts) + "\n"


def layer_sites(model: Any) -> list[tuple[str, str, dict[str, Any], str, str]]:
    """(config key, mechanism, options set, which layers, what each keeps while decoding) of every attention of a
    validated model config, layer by layer for a hybrid (:func:`~lavo_zoo.attention.schedule.describe_layers`)."""
    from lavo_zoo.attention.schedule import describe_layers

    return [(g.key, g.spec.name, {k: v for k, v in g.spec.to_config().items() if k != "name"}, g.where, g.state)
            for g in describe_layers(model)]


def attention_sites(attention: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(site, mechanism, options set) of a config's ``model.attention``: a bare name, ``{name, options...}`` or a
    mapping of sites (encoder-decoder models) to either."""
    def one(value: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(value, dict):
            return str(value.get("name", "?")), {k: v for k, v in value.items() if k != "name"}
        return str(value), {}

    if attention is None:
        return []
    if isinstance(attention, dict) and "name" not in attention and all(isinstance(v, (dict, str))
                                                                       for v in attention.values()):
        return [(f"model.attention.{site}", *one(value)) for site, value in attention.items()]
    return [("model.attention", *one(attention))]


# ------------------------------------------------------------------------------------------------ sections
def _recipe_and_config(checkpoint: Path, meta: dict[str, Any]) -> tuple[Any, Any]:
    """(recipe, validated config) of the checkpoint; the config is None when this version of the recipe does not
    read it, the recipe too when this installation does not have it."""
    try:
        return read_config(checkpoint)
    except ZooError:
        pass
    try:
        from lavo_zoo.engine.recipe import get_recipe

        return get_recipe(str(meta.get("recipe"))), None
    except ZooError:
        return None, None


def _summary(name: str, meta: dict[str, Any], recipe: Any, task_name: str, dataset: str) -> str:
    description = getattr(recipe, "description", "")
    params = meta.get("num_parameters")
    size = f", {params:,} parameters" if isinstance(params, int) else ""
    return (f"# {name}\n\nA checkpoint of lavo-zoo's `{meta.get('recipe')}` recipe"
            + (f" ({description})" if description else "")
            + f" for {task_name.lower()}, trained on {dataset} for {meta.get('step', '?')} optimiser steps{size}. "
            "lavo-zoo is the reference implementation of LAVO linear attention (orthogonal memory, context "
            "dissection, embedded position encoding) with its baselines and a seven-domain model zoo.")


def _model_section(sites: list[tuple]) -> str:
    """The attention of every site, layer by layer for a hybrid: (key, mechanism, options[, layers, state]) rows
    (:func:`layer_sites`; :func:`attention_sites` where this version cannot read the config)."""
    lines = ["## Model", "", ("| attention site | mechanism | options set | other options (defaults) | layers | "
                              "what each layer keeps while decoding |"), "|---|---|---|---|---|---|"]
    notes = {}
    for site, mechanism, options, *more in sites:
        where, state = (more + ["", ""])[:2]
        defaults, description = _attention_defaults(mechanism)
        if description:
            notes[mechanism] = description
        others = {k: v for k, v in defaults.items() if k not in options}
        lines.append(f"| `{site}` | `{mechanism}` | {_options(options) or '-'} | {_options(others) or '-'} | "
                     f"{where or '-'} | {state or '-'} |")
    if not sites:
        lines.append("| - | (no `model.attention` in the config) | - | - | - | - |")
    lines += ["", *(f"- `{mechanism}`: {text}" for mechanism, text in notes.items())]
    return "\n".join(lines).rstrip()


def _attention_defaults(mechanism: str) -> tuple[dict[str, Any], str]:
    """(the mechanism's options with their defaults, its description); empty where it is not installed."""
    try:
        from lavo_zoo.attention import attention_info

        info = attention_info(mechanism)
        return dict(info.options), info.description
    except ZooError:
        return {}, ""


def _results_section(name: str, meta: dict[str, Any], results: dict[str, Any] | None,
                     metrics: list[tuple[str, float, bool | None]], split: str | None) -> str:
    if not metrics:
        logged = ", ".join(f"{k}={_number(v)}" for k, v, _ in result_metrics({"metrics": meta.get("metrics") or {}}))
        return ("## Results\n\nNo evaluation results were given when this checkpoint was exported (`lavo-zoo export "
                f"--results`). Training logged at step {meta.get('step', '?')}: {logged or 'nothing'}. Measure them "
                f"with `lavo-zoo eval {name} --split test --out results.json`.")
    where = f"the `{split}` split" if split else "the given predictions"
    samples = results.get("num_samples")
    lines = ["## Results", "",
             f"Scored on {where}" + (f" ({samples} samples)" if isinstance(samples, int) else "")
             + (f", on {results['device']}" if results.get("device") else "") + ":", "",
             "| metric | value | better |", "|---|---|---|"]
    lines += [f"| {metric} | {_number(value)} | {'-' if better is None else ('higher' if better else 'lower')} |"
              for metric, value, better in metrics]
    return "\n".join(lines)


def _provenance_section(meta: dict[str, Any], results: dict[str, Any] | None) -> str:
    trained = meta.get("command")
    scored = (results or {}).get("command")
    revision = meta.get("git_revision")
    if revision and str(revision).endswith("-dirty"):
        code = f"git commit `{str(revision).removesuffix('-dirty')}`, with uncommitted changes in the working tree"
    else:
        code = f"git commit `{revision}`" if revision else "git commit not recorded (not trained from a checkout)"
    version = (meta.get("versions") or {}).get("lavo_zoo")
    seed = meta.get("seed")
    lines = ["## How it was made", "",
             "Trained with:", "", _fenced(trained, "sh") if trained else "(not recorded: the checkpoint was written "
             "before lavo-zoo recorded the command, or not by `lavo-zoo train`)", ""]
    if results is not None:
        lines += ["Scored with:", "", _fenced(scored, "sh") if scored else "(not recorded in the results JSON)", ""]
    lines += [f"- code: lavo-zoo{f' {version}' if version else ''}, {code}",
              f"- hardware: {_hardware(meta.get('machine'))}",
              f"- seed: {seed if seed is not None else 'not recorded'}",
              f"- saved: {meta.get('created', 'not recorded')}, after {meta.get('step', '?')} steps",
              f"- weights sha256: `{meta.get('weights_sha256')}`"]
    return "\n".join(lines)


def _hardware(machine: Any) -> str:
    if not isinstance(machine, dict):
        return "not recorded"
    parts = [f"GPU {machine['gpu']}" if machine.get("gpu") else "CPU only",
             f"CPU {machine.get('cpu', '?')} ({machine.get('logical_cores', '?')} logical cores)",
             f"{machine.get('torch_threads', '?')} torch thread(s)"]
    versions = [f"{k} {machine[k]}" for k in ("torch", "python") if machine.get(k)]
    return "; ".join(parts + versions)


def _use_section(name: str) -> str:
    return ("## Use\n\nFetch it once (verified against its sha256, then cached), score it, show this card:\n\n"
            + _fenced(f"lavo-zoo download {name} --unpack\nlavo-zoo eval {name} --split test\nlavo-zoo info {name}",
                      "sh")
            + "\n\n`lavo-zoo eval` rebuilds the model from the checkpoint's own config; the unpacked folder is an "
            "ordinary checkpoint directory (`model.safetensors`, `config.yaml`, `meta.json`).")


# ------------------------------------------------------------------------------------------------- helpers
def _license_fields(license: str) -> dict[str, str]:
    slug = license.strip().lower()
    return {"license": slug} if slug in HF_LICENSES else {"license": "other", "license_name": _slug(license)}


def _fenced(text: str, language: str) -> str:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items()).replace("|", "\\|")


def _number(value: float) -> str:
    return str(value) if not isinstance(value, float) or math.isnan(value) else f"{value:.6g}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._]+", "-", text.lower()).strip("-") or "data"


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i and i != "None"))
