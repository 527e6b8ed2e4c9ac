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
