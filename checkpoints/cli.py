"""Click commands ``download``, ``cache ls|verify|rm``, ``info``, ``export`` and ``push`` (loaded lazily by
``lavo_zoo.cli``)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import yaml

from lavo_zoo.atomic import put_file
from lavo_zoo.checkpoints import cache as cache_mod
from lavo_zoo.checkpoints.archive import CARD, is_archive, read_card
from lavo_zoo.checkpoints.download import fetch, folder_lock
from lavo_zoo.checkpoints.hf_format import FORMATS
from lavo_zoo.checkpoints.index import NAME_RE, SOURCE_SCHEMES, default_name, load_index
from lavo_zoo.checkpoints.release import card_path, check_release_name, export_release
from lavo_zoo.checkpoints.resolve import parse_reference, unpack_checkpoint
from lavo_zoo.engine.checkpoint_io import read_meta
from lavo_zoo.engine.memory import format_bytes
from lavo_zoo.errors import CheckpointError, UsageError
from lavo_zoo.options import NonEmptyPath, json_flag, overwrite_option
from lavo_zoo.outputs import ARCHIVE, HF_FOLDER, MODEL_CARD, Outputs, scratch_folder

cache_dir_option = click.option(
    "--cache-dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=None,
    help="Cache root (default: $LAVO_ZOO_CACHE, else the user's cache directory).")
license_option = click.option("--license", "license_", default="Apache-2.0", show_default=True,
                              help="License of the weights (an SPDX identifier such as Apache-2.0, MIT, CC-BY-4.0).")
description_option = click.option("--description", default="", help="One line for `lavo-zoo list checkpoints`.")
format_option = click.option(
    "--format", "format_", type=click.Choice(FORMATS), default="archive", show_default=True,
    help="archive: a .tar.gz of the checkpoint directory and its model card; hf: a Hugging Face transformers model "
         "folder (language models; needs the hf extra).")
results_option = click.option(
    "--results", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
    help="Results JSON of `lavo-zoo eval CKPT --out` to report: the entry's metrics, the model card's results.")


# ------------------------------------------------------------------------------------------------------- download
@click.command(epilog="""\b
Examples:
  lavo-zoo download lm/tiny-lavo@v1                  # a name from `lavo-zoo list checkpoints`
  lavo-zoo download lm/tiny-lavo@v1 --unpack         # print the unpacked checkpoint directory
  lavo-zoo download https://host/x.tar.gz --sha256 3b5d...   # any URL, checked against a hash
  lavo-zoo download 'https://host/x.tar.gz#sha256=3b5d...'
  lavo-zoo download hf://org/repo@a1b2c3d/lm-tiny-lavo-v1.tar.gz   # needs: pip install 'lavo-zoo[hf]'
  LAVO_ZOO_OFFLINE=1 lavo-zoo download lm/tiny-lavo@v1   # cache only, no network""")
@click.argument("name_or_url")
@click.option("--sha256", default=None, metavar="HEX", help="Expected sha256 of the file (index names carry theirs).")
@cache_dir_option
@click.option("--unpack", is_flag=True, help="Unpack a checkpoint archive and print its directory instead.")
def download(name_or_url: str, sha256: str | None, cache_dir: Path | None, unpack: bool) -> None:
    """Download NAME_OR_URL into the cache, verify its sha256 and print the local path.

    Interrupted transfers resume; a file that fails verification is deleted (exit 1). With LAVO_ZOO_OFFLINE=1 (or
    HF_HUB_OFFLINE=1) only the cache is used.
    """
    reference = parse_reference(name_or_url, sha256)
    path = fetch(reference.source, reference.sha256, name=reference.name, cache_dir=cache_dir)
    click.echo(unpack_checkpoint(path, name_or_url, reference.recipe) if unpack else path)


# ---------------------------------------------------------------------------------------------------------- cache
@click.group(epilog="""\b
Examples:
  lavo-zoo cache ls
  lavo-zoo cache verify                 # re-hash every cached file
  lavo-zoo cache rm 'lm/*'              # by index name, source URL or key (globs allowed)
  lavo-zoo cache rm --all --cache-dir /tmp/zoo-cache""")
def cache() -> None:
    """List, verify or remove cached downloads."""


@cache.command("ls", epilog="""\b
Examples:
  lavo-zoo cache ls
  lavo-zoo cache ls 'lm/*' --json""")
@click.argument("pattern", required=False)
@cache_dir_option
@json_flag
def cache_ls(pattern: str | None, cache_dir: Path | None, as_json: bool) -> None:
    """List cached downloads (PATTERN: a glob on index name, source or key)."""
    rows = [e.summary() for e in cache_mod.list_entries(cache_dir, pattern)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"cache {cache_mod.cache_root(cache_dir)}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    if rows:  # the columns named once, so that no field is guessed at
        click.echo(f"  {'key (folder)':<40} {'state':<8} {'on disk':>10}  {'sha256':<12}  index name (or source)")
    for r in rows:
        unpacked = ", unpacked" if r["unpacked"] else ""
        click.echo(f"  {r['key']:<40} {r['state']:<8} {format_bytes(r['size']):>10}  {r['sha256'][:12] or '-':<12}  "
                   f"{r['name'] or r['source']}{unpacked}")


@cache.command("verify", epilog="""\b
Examples:
  lavo-zoo cache verify
  lavo-zoo cache verify 'lm/tiny-lavo@*'""")
@click.argument("pattern", required=False)
@cache_dir_option
def cache_verify(pattern: str | None, cache_dir: Path | None) -> None:
    """Re-hash cached files against the sha256 recorded when they were verified; exit 1 if any differ."""
    entries = [e for e in cache_mod.list_entries(cache_dir, pattern) if e.state == "complete"]
    bad = []
    for entry in entries:
        problem = cache_mod.verify_entry(entry)
        click.echo(f"{'BAD' if problem else 'ok':<4} {entry.record.get('name') or entry.record.get('source')}"
                   + (f": {problem}" if problem else ""))
        if problem:
            bad.append(entry.key)
    if bad:
        raise CheckpointError(f"{len(bad)} of {len(entries)} cached files failed verification; remove them with "
                              f"`lavo-zoo cache rm {' '.join(bad)}` and download again")
    click.echo(f"{len(entries)} cached file(s) verified")


@cache.command("rm", epilog="""\b
Examples:
  lavo-zoo cache rm lm/tiny-lavo@v1
  lavo-zoo cache rm 'https://host/*'
  lavo-zoo cache rm --all""")
@click.argument("patterns", nargs=-1)
@click.option("--all", "remove_all", is_flag=True, help="Remove every cached download.")
@cache_dir_option
def cache_rm(patterns: tuple[str, ...], remove_all: bool, cache_dir: Path | None) -> None:
    """Remove cached downloads matching PATTERNS (globs on index name, source or key), or --all."""
    if not patterns and not remove_all:
        raise UsageError("give one or more patterns (see `lavo-zoo cache ls`) or --all")
    entries = cache_mod.list_entries(cache_dir)
    chosen = entries if remove_all else [e for e in entries if any(e.matches(p) for p in patterns)]
    if not chosen and not remove_all:
        raise UsageError(f"nothing in the cache {cache_mod.cache_root(cache_dir)} matches {' '.join(patterns)}")
    for entry in chosen:
        label = entry.record.get("name") or entry.record.get("source") or entry.key
        with folder_lock(entry.folder, label):  # not while another process writes it
            cache_mod.remove_entry(entry)
        click.echo(f"removed {label}")


# ----------------------------------------------------------------------------------------------------------- info
@click.command(epilog="""\b
Examples:
  lavo-zoo info lm/tiny-lavo@v1                      # the index entry, and its model card once downloaded
  lavo-zoo info lm/tiny-lavo@v1 --json               # the same as JSON (the card as a string, or null)
  lavo-zoo download lm/tiny-lavo@v1 && lavo-zoo info lm/tiny-lavo@v1""")
@click.argument("name")
@cache_dir_option
@json_flag
def info(name: str, cache_dir: Path | None, as_json: bool) -> None:
    """Show one entry of the checkpoint index, whether it is cached and, when it is, its model card.

    The card (the README.md inside the archive) is read from the cached archive without unpacking it.
    """
    entry = load_index().get(name)
    folder = cache_mod.entry_dir(entry.source, cache_dir)
    cached = cache_mod.CacheEntry(folder, cache_mod.read_record(folder))
    is_cached = cached.file is not None and cached.record.get("sha256") == entry.sha256
    card, problem = None, None
    if is_cached and is_archive(cached.file):
        try:
            card = read_card(cached.file)
        except CheckpointError as e:  # the entry is still worth showing; `cache verify` finds a damaged file
            problem = str(e)
    data = {**entry.to_dict(), "cached": str(cached.file) if is_cached else None, "card": card}
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        if key == "card":
            continue
        if key == "size":
            value = f"{value} ({format_bytes(value)})"
        elif key == "metrics":
            value = ", ".join(f"{k}={v}" for k, v in _flatten(value).items()) or "-"
        elif key == "cached":
            value = value or f"no (lavo-zoo download {name})"
        click.echo(f"{key + ':':<13}{value}")
    if card is not None:
        click.echo(f"\nmodel card ({CARD} in {cached.file.name}):\n\n{card.rstrip()}")
    elif problem is not None:
        click.echo(f"card:        unreadable: {problem}")
    elif is_cached:
        click.echo(f"card:        none ({cached.file.name} holds no {CARD}: exported before model cards)")
    else:
        click.echo(f"card:        in the archive: `lavo-zoo download {name}`, then `lavo-zoo info {name}` shows it")


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"val": {"ppl": 3}} -> {"val/ppl": 3}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}{key}/") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


# --------------------------------------------------------------------------------------------------------- export
@click.command(epilog="""\b
Examples:
  lavo-zoo export runs/tiny/checkpoints/last dist/lm-tiny-lavo-v1.tar.gz --name lm/tiny-lavo@v1 \\
      --source https://github.com/ORG/lavo-zoo/releases/download/v1/lm-tiny-lavo-v1.tar.gz --results test.json
      # writes dist/lm-tiny-lavo-v1.tar.gz and its card dist/lm-tiny-lavo-v1.README.md
  lavo-zoo export runs/tiny/checkpoints/last dist/lm-tiny-lavo --format hf --results test.json
      # a transformers folder: AutoModelForCausalLM.from_pretrained("dist/lm-tiny-lavo") after `import lavo_zoo`
  lavo-zoo export runs/tiny/checkpoints/step-2000 out.tar.gz --with-train-state   # resumable archive""")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@format_option
@click.option("--with-train-state", is_flag=True, help="Include train_state.pt (left out by default).")
@click.option("--name", default=None, help="Index name <domain>/<config>@<tag> (default: <recipe>/<OUT stem>@v1).")
@click.option("--source", default=None, help="Where OUT will be published: https://... or hf://org/repo@rev/path.")
@license_option
@description_option
@results_option
@overwrite_option
def export(checkpoint: Path, out: Path, format_: str, with_train_state: bool, name: str | None, source: str | None,
           license_: str, description: str, results: Path | None, overwrite: bool) -> None:
    """Pack CHECKPOINT (a checkpoint directory) as OUT (.tar.gz) with its model card, and print its sha256, size
    and an index entry; with --format hf, write it as OUT, a transformers model folder.

    The weights are checked against meta.json's weights_sha256 first. The model card (Hugging Face metadata, the
    config, the commands that trained and scored the model, commit, hardware, seed, licence, limits) goes into the
    archive as README.md and beside it as <OUT stem>.README.md. Paste the printed entry under `checkpoints:` in
    checkpoints/index.yaml once OUT is published at --source.

    --format hf (language models; needs the hf extra) writes config.json, model.safetensors, the tokenizer files,
    generation_config.json and the model card (README.md, library_name: transformers) into the folder OUT, which
    AutoModelForCausalLM / AutoTokenizer.from_pretrained load after `import lavo_zoo`, and which `lavo-zoo eval`
    and lavo_zoo.load read too.
    """
    if format_ == "hf":
        _refuse_archive_options("export", with_train_state=with_train_state, source=source, description=description)
        _export_hf(checkpoint, out, name, license_, results, overwrite)
        return
    if source and not source.startswith(SOURCE_SCHEMES):
        raise UsageError(f"--source must be an https:// URL or hf://org/repo@revision/path, got '{source}'")
    card_file = card_path(out)
    # a published archive's sha256 is in some index: never replaced without --overwrite, nor anything else ever
    with Outputs("export", overwrite, inputs={"CHECKPOINT": checkpoint, "--results": results}) as outputs:
        staged = outputs.file(out, ARCHIVE, "OUT")
        staged_card = outputs.file(card_file, MODEL_CARD, "OUT's model card")
        entry, card = export_release(checkpoint, staged, name=name, source=source, license_=license_,
                                     description=description, results=results, with_train_state=with_train_state)
        put_file(staged_card, card)
    click.echo(f"wrote {out} and its model card {card_file} (also inside the archive as {CARD})\n"
               f"sha256 {entry['sha256']}\nsize   {entry['size']} ({format_bytes(entry['size'])})\n\n"
               "index entry (append under `checkpoints:` in checkpoints/index.yaml once published):\n")
    click.echo(yaml.safe_dump([entry], sort_keys=False, width=120).rstrip())


def _export_hf(checkpoint: Path, out: Path, name: str | None, license_: str, results: Path | None,
               overwrite: bool) -> None:
    from lavo_zoo.checkpoints.hf_format import export_hf

    with Outputs("export", overwrite, inputs={"CHECKPOINT": checkpoint, "--results": results},
                 command_line=f"lavo-zoo export {checkpoint} {out} --format hf") as outputs:
        staged = outputs.folder(out, HF_FOLDER, "OUT")
        names = [f.name for f in export_hf(checkpoint, staged, name=name, license_=license_, results=results,
                                           named_after=out)]
    click.echo(f"wrote the transformers folder {out} (model card: {out / CARD}):")
    for file in names:
        click.echo(f"  {file:<28} {format_bytes((out / file).stat().st_size):>10}")
    click.echo(f"\nload it with:\n  import lavo_zoo\n  from transformers import AutoModelForCausalLM, AutoTokenizer\n"
               f'  model = AutoModelForCausalLM.from_pretrained("{out}")\n'
               f'  tokenizer = AutoTokenizer.from_pretrained("{out}")')


def _refuse_archive_options(command: str, **given: Any) -> None:
    """--format hf writes no archive: the options that only an archive has are refused, naming them."""
    used = [f"--{k.replace('_', '-')}" for k, v in given.items() if v]
    if used:
        raise UsageError(f"{' '.join(used)}: only for archives; `{command} --format hf` writes a transformers folder "
                         "(drop them, or export an archive)")


# ----------------------------------------------------------------------------------------------------------- push
@click.command(epilog="""\b
Examples:
  lavo-zoo push runs/tiny/checkpoints/best hf://ORG/lavo-lm-tiny --name lm/tiny-lavo@v1 --results test.json
  lavo-zoo push runs/tiny/checkpoints/best hf://ORG/lavo-lm-tiny@v2 --private   # branch v2 of a private repo
  HF_TOKEN=hf_... HF_ENDPOINT=https://hub.example.org lavo-zoo push CKPT hf://ORG/REPO   # another Hub
  lavo-zoo push runs/tiny/checkpoints/best hf://ORG/lavo-lm-tiny-hf --format hf --results test.json
      # a transformers model repository: AutoModelForCausalLM.from_pretrained("ORG/lavo-lm-tiny-hf")
  (needs: pip install 'lavo-zoo[hf]', and `hf auth login` or HF_TOKEN)""")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("repo", metavar="hf://ORG/REPO[@BRANCH]")
@format_option
@click.option("--name", default=None, help="Index name <domain>/<config>@<tag> (default: <recipe>/<REPO>@v1).")
@click.option("--filename", default=None, metavar="NAME.tar.gz",
              help="The archive's name in the repository (default: the index name, e.g. lm-tiny-lavo-v1.tar.gz).")
@license_option
@description_option
@results_option
@click.option("--private", is_flag=True, help="Create the repository private (an existing one keeps its visibility).")
@click.option("--message", default=None, help="Commit message (default: 'lavo-zoo push <name>').")
@cache_dir_option
def push(checkpoint: Path, repo: str, format_: str, name: str | None, filename: str | None, license_: str,
         description: str, results: Path | None, private: bool, message: str | None, cache_dir: Path | None) -> None:
    """Export CHECKPOINT and upload it to a Hugging Face repository, verify the upload, print its index entry.

    The archive and its model card (as the repository's README.md) go up in one commit to BRANCH (default main;
    the repository and the branch are created where missing). The archive is then downloaded back through the
    hf:// path of `lavo-zoo download`, which checks its sha256 (it stays in the cache), and the index entry is
    printed with the source pinned to that commit: hf://ORG/REPO@<commit>/<archive>. The endpoint is HF_ENDPOINT
    (default the public Hub), the token HF_TOKEN or the one `hf auth login` saved.

    With --format hf the repository gets the transformers folder of `export --format hf` instead (its files in one
    commit, each downloaded back and checked), which AutoModelForCausalLM.from_pretrained("ORG/REPO") loads after
    `import lavo_zoo`; no index entry is printed (the index lists archives).
    """
    from lavo_zoo.checkpoints.push import ARCHIVE_RE, hub_api, parse_repo, upload, verify

    repo_id, branch = parse_repo(repo)
    if format_ == "hf":
        _refuse_archive_options("push", filename=filename, description=description)
        _push_hf(checkpoint, repo_id, branch, name, license_, results, private, message, cache_dir)
        return
    if filename is not None and not ARCHIVE_RE.match(filename):
        raise UsageError(f"--filename must be a plain file name ending in .tar.gz or .tgz, got '{filename}'")
    recipe = str(read_meta(checkpoint).get("recipe") or "unknown")
    name = name or default_name(recipe, repo_id.split("/")[1], "the repository")
    check_release_name(name, recipe)
    api = hub_api()  # before any work: huggingface_hub installed, not offline
    filename = filename or re.sub(r"[^A-Za-z0-9_.-]+", "-", name) + ".tar.gz"  # lm/tiny@v1 -> lm-tiny-v1.tar.gz
    with scratch_folder("the upload") as tmp:
        archive, card = tmp / filename, tmp / CARD
        entry, text = export_release(checkpoint, archive, name=name, source=None, license_=license_,
                                     description=description, results=results)
        put_file(card, text)
        click.echo(f"uploading {filename} ({format_bytes(entry['size'])}) and its model card to hf://{repo_id}@{branch}"
                   " ...", err=True)
        commit = upload(api, repo_id, branch, {filename: archive, CARD: card},
                        message or f"lavo-zoo push {entry['name']}", private=private)
        source, cached = verify(repo_id, commit, filename, entry["sha256"], entry["name"], cache_dir)
    entry["source"] = source
    click.echo(f"uploaded {filename} and {CARD} to hf://{repo_id}@{branch} as commit {commit}\n"
               f"verified: downloaded back, sha256 {entry['sha256']} matches (cached at {cached})\n\n"
               "index entry (append under `checkpoints:` in checkpoints/index.yaml):\n")
    click.echo(yaml.safe_dump([entry], sort_keys=False, width=120).rstrip())


def _push_hf(checkpoint: Path, repo_id: str, branch: str, name: str | None, license_: str, results: Path | None,
             private: bool, message: str | None, cache_dir: Path | None) -> None:
    from lavo_zoo.checkpoints.cache import sha256_file
    from lavo_zoo.checkpoints.hf_format import export_hf
    from lavo_zoo.checkpoints.push import hub_api, upload, verify

    if name is not None and not NAME_RE.match(name):
        raise UsageError(f"--name must look like <domain>/<config>@<tag>, got '{name}'")
    api = hub_api()  # before any work: huggingface_hub installed, not offline
    name = name or default_name(str(read_meta(checkpoint).get("recipe") or "unknown"), repo_id.split("/")[1],
                                "the repository")
    with scratch_folder("the upload") as tmp:
        folder = tmp / "model"
        folder.mkdir()
        files = export_hf(checkpoint, folder, name=name, license_=license_, results=results)
        size = sum(f.stat().st_size for f in files)
        click.echo(f"uploading the transformers folder ({len(files)} files, {format_bytes(size)}) to "
                   f"hf://{repo_id}@{branch} ...", err=True)
        commit = upload(api, repo_id, branch, {f.name: f for f in files}, message or f"lavo-zoo push {name} (hf)",
                        private=private)
        for file in files:  # every file downloaded back at the commit and checked against what was uploaded
            verify(repo_id, commit, file.name, sha256_file(file), f"{name} {file.name}", cache_dir)
    click.echo(f"uploaded {', '.join(f.name for f in files)} to hf://{repo_id}@{branch} as commit {commit}\n"
               f"verified: every file downloaded back at that commit matches its sha256\n\n"
               f"load it with:\n  import lavo_zoo\n  from transformers import AutoModelForCausalLM, AutoTokenizer\n"
               f'  model = AutoModelForCausalLM.from_pretrained("{repo_id}", revision="{commit}")\n'
               f'  tokenizer = AutoTokenizer.from_pretrained("{repo_id}", revision="{commit}")')
