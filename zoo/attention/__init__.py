"""The attention zoo: LAVO and the baselines behind one contract (see :mod:`lavo_zoo.attention.base`).

The registry (``registry``: :func:`register_attention`, :func:`build_attention`, :func:`list_attentions`, and the one
check of a name, a pattern and options, :func:`check_attention`) imports the built-in mechanisms it lists by name
(``registry.BUILTIN_MECHANISMS``) on first use, so a new mechanism is one new file (or package) that decorates its
class with :func:`register_attention`, and one line in that list; the pieces mechanisms share are in ``common``, the
kernels several of them use in ``ops`` (with the dispatch that chooses among them, ``ops/dispatch.py``). Beside each
mechanism sits its slow, loop or dense reference ``naive(attn, x, padding_mask, ...)``, which takes the module and
its inputs (in the mechanism's module, or in the ``naive`` module of its package);
tests/attention/test_naive_references.py compares every registered mechanism with its ``naive``. Third-party packages
add mechanisms through the ``lavo_zoo.plugins.attentions`` entry-point group. Configs select a mechanism with
:class:`AttentionSpec` (``lavo_zoo.attention.spec``), and a hybrid stack's layers with :class:`AttentionSchedule` (one
per stack) or :class:`SiteSchedule` (one per encoder-decoder site; ``lavo_zoo.attention.schedule``).
"""
from __future__ import annotations

from lavo_zoo.attention.base import PATTERNS, Attention, tensor_bytes
from lavo_zoo.attention.registry import (
    ATTENTIONS,
    AttentionInfo,
    attention_class,
    attention_info,
    build_attention,
    check_attention,
    list_attentions,
    register_attention,
)
from lavo_zoo.attention.schedule import AttentionSchedule, SiteSchedule
from lavo_zoo.attention.spec import SITE_PATTERNS, AttentionSpec, SiteAttention

__all__ = ["ATTENTIONS", "PATTERNS", "SITE_PATTERNS", "Attention", "AttentionInfo", "AttentionSchedule",
           "AttentionSpec", "SiteAttention", "SiteSchedule", "attention_class", "attention_info", "build_attention",
           "check_attention", "list_attentions", "register_attention", "tensor_bytes"]
