"""Which kernels run: the one place that chooses them (once per call), falls back when a chosen one cannot run, and
reports what ran, for every mechanism whose ops have more than one kernel.

Terms. An *op* is one computation with several implementations (LAVO's sliding window, its memory read); each
implementation is a *kernel*: a plain function named after its algorithm (``recompute_window``, ``flex_window``,
``triton_window``), every kernel of an op with the op's signature, its queries first. A :class:`Kernel` declares one
with where it runs; an :class:`Op` lists an op's kernels and its fallback; a :class:`KernelSet` holds a
mechanism's ops, and a layer's ``kernels`` option requests 'auto' or one kernel by name for all of them.

How a mechanism plugs in (worked examples: the window op in ``ops/window/__init__.py``, LAVO's read and decoding
step in ``lavo/ops.py``, its layer in ``lavo/layer.py``; a library's kernels: flash-linear-attention's for the
recurrent ops, each op's folder declaring them in its ``__init__.py`` from its ``fla.py`` (``ops/gated_linear/``,
``ops/delta_rule/``), their layers on ``recurrent.py``):

1. Write each kernel as a function and declare it; a PyTorch kernel that runs everywhere needs only its name::

       CHUNK = Kernel("chunk", chunk_gla)                                     # PyTorch: every device and dtype
       FLA = Kernel("fla", fla_chunk_gla, runs=fla_runs, auto=triton_auto, compiled=True)   # fla's Triton kernel

   ``runs(q)``: whether it can run for these queries here (device, an installed package, the switches, no
   compile failure in this process); a request for it falls back where it cannot. ``dtypes``: the query dtypes it
   takes (default None: every one ``runs`` allows; fla's delta rule: fp16 and bf16), the one declaration of a
   kernel's precisions that the dispatch, the tests and the device check read. ``auto(q)``: whether 'auto'
   takes it (default: never; only on request); for a Triton kernel not yet verified on a GPU, :func:`triton_auto`.
   ``dropout``: whether it applies attention dropout itself (else training with dropout takes the fallback).
   ``fresh``: whether its output is a new tensor that autograd did not save, so that a caller may write into it.
   ``min_queries``: the shortest query length 'auto' takes it for (what a layer reports before its first call).
   ``compiled``: whether it is compiled at run time (Triton, torch.compile), so it may fail to build on a device:
   it then warns once, marks itself off for the process (its ``runs`` says no from then on) and raises
   :class:`KernelUnavailable` (``triton_utils.launch`` does all three for the project's Triton kernels; a library's,
   e.g. fla's, gets them by running its launch under ``with triton_utils.compiling(name):``); the call reruns on
   the fallback. ``applies(*args, **kwargs)``: a call it does not cover takes the fallback (default: every call).
2. Group an op's kernels, in the order 'auto' tries them, with its fallback: a kernel that runs everywhere, dropout
   included, or None for an op that is an optional shortcut (LAVO's fused layer: where none runs, the caller composes
   the call from its other ops). ``shortcut=True`` marks an op that runs on some calls only (LAVO's decoding step and
   fused layer), which what a layer reports before its first call leaves out::

       GLA = KernelSet("gla", attend=Op("gla", (FLA, CHUNK), fallback=CHUNK))

3. In the layer: subclass :class:`HasKernels` before :class:`~lavo_zoo.attention.base.Attention`, set
   ``kernel_set = GLA``, take a ``kernels: str = "auto"`` option stored by ``self.kernels =
   GLA.check(kernels)`` (which refuses an unknown name), and in a call::

       run = self.start_kernels(q)       # the one choice of the call, recorded for kernels_used
                                         # (only=("step",): a call that runs those ops alone chooses only theirs)
       o = run.attend(q, k, v, g)        # the chosen kernel; one that cannot be compiled here reruns on the fallback

   :attr:`HasKernels.kernels_used` then reports the kernels the last call ran ('fla', 'flex+recompute'; before
   any call, those a long sequence would get), and :func:`kernels_used` reads it from any module (the benchmarks).

The choice (:meth:`Op.choose`): 'auto' takes the first kernel, in the op's order, whose ``auto`` holds and which
takes the queries (:meth:`Kernel.takes`: its ``dtypes`` and ``runs``), else the fallback; a name takes that kernel
where it takes them (the fallback where not, or where the op has no kernel of that name); in training with dropout
a kernel without dropout gives way to the fallback.

Triton: :func:`triton_runs` says where the Triton kernels can run, and :func:`triton_by_default` whether 'auto'
takes them (the one statement of that rule; :func:`triton_auto` is the ``auto`` of every Triton kernel).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from lavo_zoo.attention.ops import KernelUnavailable

AUTO = "auto"  # the request that lets the dispatch choose
TRITON_DEFAULT = False  # the switch of triton_by_default's rule


def _everywhere(*args: Any, **kwargs: Any) -> bool:
    return True


def _never(q: torch.Tensor) -> bool:
    return False


# --------------------------------------------------------------------------------------------- where kernels run
def on_cuda(q: torch.Tensor) -> bool:
    """Whether q is a CUDA tensor (a function of its own so that the tests can state the CUDA choices on a CPU)."""
    return q.is_cuda


def triton_runs(q: torch.Tensor) -> bool:
    """Whether the Triton kernels can run for queries q: ``LAVO_ZOO_TRITON`` is not 0, Triton imports, q is a CUDA
    tensor (any device in Triton's interpreter) of fp16 / bf16 / fp32 (fp64 stays on the PyTorch kernels), and no
    Triton kernel failed to compile in this process."""
    if os.environ.get("LAVO_ZOO_TRITON", "") == "0":
        return False
    try:
        from lavo_zoo.attention.ops import triton_utils
    except ImportError:  # no Triton on this platform
        return False
    return triton_utils.usable(q) and not triton_utils.failures()


def triton_by_default() -> bool:
    """Whether 'auto' takes the Triton kernels (LAVO's and flash-linear-attention's) on CUDA. The project's one
    statement of the rule: Triton kernels become the CUDA default only in the commit that records a passing run of
    the device check on a GPU (benchmarks/RESULTS.md, "The device check"), which sets :data:`TRITON_DEFAULT`; until
    then they are verified in Triton's interpreter only and 'auto' takes them with ``LAVO_ZOO_TRITON=1``; after it,
    unless ``LAVO_ZOO_TRITON=0``."""
    switch = os.environ.get("LAVO_ZOO_TRITON", "")
    return switch == "1" or (TRITON_DEFAULT and switch != "0")


def triton_auto(q: torch.Tensor) -> bool:
    """The ``auto`` of a Triton kernel: on CUDA where :func:`triton_by_default` (its ``runs`` is checked too)."""
    return on_cuda(q) and triton_by_default()


# ------------------------------------------------------------------------------------------------ declarations
@dataclass(frozen=True)
class Kernel:
    """One kernel of an op: its name (what a request and the report say), its function and where it runs (the
    module docstring has each field)."""

    name: str
    fn: Callable[..., Any]
    runs: Callable[[torch.Tensor], bool] = _everywhere
    auto: Callable[[torch.Tensor], bool] = _never
    dropout: bool = True
    fresh: bool = False
    min_queries: int = 0
    compiled: bool = False
    applies: Callable[..., bool] = _everywhere
    dtypes: tuple[torch.dtype, ...] | None = None

    def takes(self, q: torch.Tensor) -> bool:
        """Whether it can run for queries q here: one of its ``dtypes`` (any where None) and its ``runs``.

        Args:
            q: the call's queries [B, H, T, d].
        """
        return (self.dtypes is None or q.dtype in self.dtypes) and self.runs(q)


@dataclass(frozen=True)
class Op:
    """The kernels of one op in the order 'auto' tries them, and its fallback (one of them, or None: the op is an
    optional shortcut, and where no kernel of it runs the caller takes its general path). ``shortcut``: the op
    runs only on some calls (a decoding step, a whole call fused), so what a layer reports before any call
    (:meth:`Choice.report`) leaves it out."""

    name: str
    kernels: tuple[Kernel, ...]
    fallback: Kernel | None
    shortcut: bool = False

    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name``.

        Args:
            name: one of this op's kernel names.

        Raises:
            ValueError: the op has no such kernel (the message lists its kernels).
        """
        for k in self.kernels:
            if k.name == name:
                return k
        names = [f"'{k.name}'" for k in self.kernels]
        listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        raise ValueError(f"the {self.name} has the kernels {listed}, got '{name}'")

    def choose(self, q: torch.Tensor, request: str = AUTO, *, dropout: bool = False) -> Kernel | None:
        """The kernel for queries q [B, H, T, d] (module docstring, "The choice").

        Args:
            q: the call's queries (their device, dtype and length decide).
            request: 'auto' or a kernel name (a name the op lacks takes the fallback).
            dropout: whether attention dropout applies (training with p > 0).
        """
        if request == AUTO:
            kernel = next((k for k in self.kernels if k.auto(q) and k.takes(q)), self.fallback)
        else:
            kernel = next((k for k in self.kernels if k.name == request), self.fallback)
            if kernel is not None and not kernel.takes(q):
                kernel = self.fallback
        if kernel is not None and dropout and not kernel.dropout:
            kernel = self.fallback
        return kernel

    def without_auto(self, name: str) -> Op:
        """This op with the kernel ``name`` taken on request only (the ``local`` mechanism's window keeps flex
        where LAVO's 'auto' may take Triton).

        Args:
            name: one of this op's kernel names.
        """
        return replace(self, kernels=tuple(replace(k, auto=_never) if k.name == name else k for k in self.kernels))

    def bind(self, kernel: str | Kernel | Chosen) -> Chosen:
        """A kernel ready to call (with the fallback, as a choice's are).

        Args:
            kernel: a kernel name of this op (checked by :meth:`kernel`), a :class:`Kernel`, or a :class:`Chosen`
                (returned as it is).
        """
        if isinstance(kernel, Chosen):
            return kernel
        return Chosen(self, self.kernel(kernel) if isinstance(kernel, str) else kernel)


class KernelSet:
    """A mechanism's ops, chosen together from one request.

    Args:
        name: the mechanism (or op) the set serves, for messages.
        **ops: op name -> :class:`Op`; a :class:`Choice` has one attribute per op under that name.
    """

    def __init__(self, name: str, **ops: Op) -> None:
        self.name, self.ops = name, dict(ops)
        names = [AUTO]
        for op in self.ops.values():
            names += [k.name for k in op.kernels if k.name not in names]
        self._requests = tuple(names)

    @property
    def requests(self) -> tuple[str, ...]:
        """What a ``kernels`` option may say: 'auto' and every kernel name of the ops, in their order."""
        return self._requests

    def check(self, request: str) -> str:
        """The one check of a ``kernels`` option.

        Args:
            request: 'auto' or a kernel name.

        Returns:
            ``request``.

        Raises:
            ValueError: not one of :attr:`requests` (the message lists them).
        """
        if request not in self.requests:
            raise ValueError(f"kernels must be one of {', '.join(self.requests)}, got '{request}'")
        return request

    def choose(self, q: torch.Tensor, request: str = AUTO, *, dropout: float = 0.0, training: bool = False,
               only: tuple[str, ...] | None = None) -> Choice:
        """The kernels of one call on queries q [B, H, T, d], one per op (:meth:`Op.choose`).

        Args:
            q: the call's queries.
            request: 'auto' or a kernel name (:meth:`check`).
            dropout: attention dropout p (it applies in training with p > 0: a kernel without dropout is passed by).
            training: whether the call is in training.
            only: the ops the call will run, where it knows (a decoding step: choosing the others would cost its
                time for nothing); None: every op.

        Returns:
            A :class:`Choice`: ``choice.<op>(...)`` runs that op's kernel.
        """
        self.check(request)
        drop = bool(dropout) and training
        return Choice({name: Chosen(op, op.choose(q, request, dropout=drop)) for name, op in self.ops.items()
                       if only is None or name in only})

    def preview(self, request: str, like: torch.Tensor, heads: int, head_dim: int, *, dropout: float = 0.0,
                training: bool = False) -> Choice:
        """The choice for a long sequence of queries (at least every kernel's ``min_queries``): what a layer reports
        before its first call.

        Args:
            request: 'auto' or a kernel name.
            like: a tensor on the device and of the dtype the queries would have (a parameter of the layer).
            heads: the queries' H.
            head_dim: the queries' d.
            dropout: as :meth:`choose`.
            training: as :meth:`choose`.
        """
        length = max([1] + [k.min_queries for op in self.ops.values() for k in op.kernels])
        q = like.new_empty(1, heads, length, head_dim)
        return self.choose(q, request, dropout=dropout, training=training)


# --------------------------------------------------------------------------------------------------- one call
class Chosen:
    """The kernel chosen for one op in one call, called like the kernel (queries first). It runs the chosen kernel
    where it still runs and covers the call; else, and where a compiled kernel cannot be built on this device
    (:class:`KernelUnavailable`: it warned once), the op's fallback (an op without one returns None: the caller
    takes its general path). :attr:`kernel` is then the one that ran, and :attr:`ran` says whether the op was called.

    Args:
        op: the op.
        kernel: the kernel chosen for it (None: none, for an op without a fallback).
    """

    def __init__(self, op: Op, kernel: Kernel | None) -> None:
        self.op, self.kernel, self.ran = op, kernel, False

    @property
    def name(self) -> str | None:
        """The kernel's name (None: no kernel of an op without a fallback)."""
        return None if self.kernel is None else self.kernel.name

    @property
    def fresh(self) -> bool:
        """Whether the kernel's output may be overwritten by the caller (:class:`Kernel` ``fresh``)."""
        return self.kernel is not None and self.kernel.fresh

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kernel = self.kernel
        if kernel is not None and not (kernel.takes(args[0]) and kernel.applies(*args, **kwargs)):
            kernel = self.op.fallback  # turned off since the choice (a compile failure earlier in the call)
        if kernel is None:
            return None
        if kernel.compiled:
            try:
                out = kernel.fn(*args, **kwargs)
            except KernelUnavailable:  # cannot be built on this device (warned once, off for the process)
                kernel = self.op.fallback
                if kernel is None:
                    return None
                out = kernel.fn(*args, **kwargs)
        else:
            out = kernel.fn(*args, **kwargs)
        self.kernel, self.ran = kernel, True
        return out


class Choice:
    """The kernels of one call: one :class:`Chosen` per op of the set, as an attribute (``choice.window``).

    Args:
        chosen: op name -> its :class:`Chosen` (what :meth:`KernelSet.choose` builds).
    """

    def __init__(self, chosen: dict[str, Chosen]) -> None:
        self._chosen = chosen
        for name, c in chosen.items():
            setattr(self, name, c)

    def __repr__(self) -> str:
        return f"Choice({', '.join(f'{n}={c.name}' for n, c in self._chosen.items())})"

    @property
    def names(self) -> dict[str, str | None]:
        """{op: the kernel chosen (or, after the call, run) for it}."""
        return {n: c.name for n, c in self._chosen.items()}

    def report(self) -> str:
        """The kernels of the ops the call ran (before it runs any: the chosen ones, shortcuts left out) as one word:
        a name where they are one ('triton', 'recompute'), else the names joined by '+' in the ops' order
        ('flex+recompute')."""
        names = [c.name for c in self._chosen.values() if c.ran]
        names = names or [c.name for c in self._chosen.values() if c.name is not None and not c.op.shortcut]
        return "+".join(dict.fromkeys(names))


# ------------------------------------------------------------------------------------------------- the layer side
class HasKernels:
    """What a layer with kernels gets from the dispatch (mix in before
    :class:`~lavo_zoo.attention.base.Attention`): the choice from its ``kernels`` option, recorded per call, and
    the report of what ran. The layer sets :attr:`kernel_set` and ``self.kernels`` (its option, checked by
    :meth:`KernelSet.check`); ``self.dropout`` (if any) and the training mode enter the choice."""

    kernel_set: ClassVar[KernelSet]
    kernels: str = AUTO
    _last_choice: Choice | None = None

    def choose_kernels(self, q: torch.Tensor, only: tuple[str, ...] | None = None) -> Choice:
        """The kernels a call gets (pure: records nothing).

        Args:
            q: the call's queries [B, H, T, d] (their device, dtype and length decide).
            only: the ops the call runs (:meth:`KernelSet.choose`), or None: every op.
        """
        return self.kernel_set.choose(q, self.kernels, dropout=getattr(self, "dropout", 0.0),
                                      training=self.training, only=only)

    def start_kernels(self, q: torch.Tensor, only: tuple[str, ...] | None = None) -> Choice:
        """The one choice of a call, recorded for :attr:`kernels_used`.

        Args:
            q: the call's queries [B, H, T, d].
            only: the ops the call runs (:meth:`KernelSet.choose`), or None: every op.
        """
        choice = self._last_choice = self.choose_kernels(q, only)
        return choice

    @property
    def kernels_used(self) -> str:
        """The kernels the last call ran ('triton', 'flex+recompute', 'recompute', 'autograd': :meth:`Choice.report`);
        before any call, those a long sequence on the parameters' device and dtype would get."""
        if self._last_choice is not None:
            return self._last_choice.report()
        like = next(self.parameters(), None)
        like = torch.empty(0) if like is None else like
        return self.kernel_set.preview(self.kernels, like, self.num_heads, self.head_dim,
                                       dropout=getattr(self, "dropout", 0.0), training=self.training).report()


def kernels_used(module: Any) -> str | None:
    """The kernels a module ran last (:attr:`HasKernels.kernels_used`), or None for a module without kernels.

    Args:
        module: any module (an attention layer, a model's submodule).
    """
    return module.kernels_used if isinstance(module, HasKernels) else None
