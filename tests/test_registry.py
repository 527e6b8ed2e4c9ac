"""Registries (``lavo_zoo.registry``): lookup errors, glob listing, lazy targets. A third-party attention found
through its entry point is tested in tests/attention/test_registry.py."""
import pytest

from lavo_zoo.errors import UsageError
from lavo_zoo.registry import Registry


def test_lookup_error_suggests_closest_name():
    reg = Registry("widget", "lavo_zoo.test_widgets")
    reg.register("alpha", 1)
    reg.register("beta", 2)
    assert reg.get("alpha") == 1 and reg.names("b*") == ["beta"]
    with pytest.raises(UsageError, match="unknown widget 'alpah' \\(did you mean 'alpha'\\?\\); known: alpha, beta"):
        reg.get("alpah")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("alpha", 3)


def test_lazy_string_target_is_imported_on_first_use():
    reg = Registry("widget", "lavo_zoo.test_widgets")
    reg.register("dumps", "json:dumps")
    import json
    assert reg.get("dumps") is json.dumps


def test_a_plugin_that_raises_or_exits_is_named_with_its_entry_point(tmp_path, monkeypatch):
    """A plugin whose module raises or exits on import broke `list` without naming the plugin or its entry point;
    `list` now shows it as a row saying so and lists the others, and using it is an error naming its package."""
    from lavo_zoo.errors import PluginError
    from lavo_zoo.registry import Registry
    from tests.helpers import broken_plugins, run_cli

    broken_plugins(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for group, name, why in (("lavo_zoo.plugins.attentions", "bad_attn", "RuntimeError: boom at import"),
                             ("lavo_zoo.plugins.recipes", "bad_recipe", r"it exits \(3\)")):
        registry = Registry("thing", group)
        with pytest.raises(PluginError, match=rf"the plugin '{name}' \(entry point {name} = .* in group {group}, "
                                              rf"declared by the package badplug 0.1\) cannot be loaded: {why}\. "
                                              r"Repair it .* or remove it \(pip uninstall badplug\)"):
            registry.get(name)
    listed = run_cli("list", env={"PYTHONPATH": str(tmp_path)})
    assert listed.returncode == 0, listed.stderr
    for name in ("bad_attn", "bad_recipe"):
        line = next(line for line in listed.stdout.splitlines() if line.strip().startswith(name))
        assert "cannot be loaded" in line and "pip uninstall badplug" in line
    assert "  lavo " in listed.stdout and "  lm " in listed.stdout  # the others are listed
    # a recipe plugin whose commands module raises broke every command (the CLI imports them all): left out, said once
    helped = run_cli("--help", env={"PYTHONPATH": str(tmp_path)})
    assert helped.returncode == 0 and "generate" in helped.stdout
    assert helped.stderr.count("warning: the commands of the plugin 'bad_commands'") == 1
    assert "ImportError: the commands module is broken" in helped.stderr
