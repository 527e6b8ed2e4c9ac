"""What the Triton kernels share (the sliding window's ``ops/window/triton.py`` and LAVO's read ``lavo/triton.py``):
whether they can run on a tensor, tile sizes, the dot products' precision, the masked score, the launch layout, the
launch itself with its compile-failure fallback, and the dropout mask.

- Launch (:func:`launch`): every kernel runs on a one-axis grid of programs (:func:`grid`: batch x heads x blocks,
  up to 2^31 - 1, where CUDA's y and z axes stop at 65,535), and its offsets are 64-bit (row indices are int64
  before they multiply a stride, so T x D >= 2^31 does not overflow). A kernel that fails to compile on this device
  (Triton's CompilationError, OutOfResources, a ptxas error) is marked failed for the process with one warning
  naming it and the reason, and :class:`~lavo_zoo.attention.ops.KernelUnavailable` is raised: the dispatch reruns
  the call on the op's fallback (a backward pass computes its gradients on the PyTorch kernels itself), and
  :func:`lavo_zoo.attention.ops.dispatch.triton_runs` says no from then on (:func:`failures`). A library's Triton
  kernel (fla's) gets the same by launching under :func:`compiling`.
- Tiles (:func:`band_tile`, :func:`autotuned`): a program of ``block`` queries walks its band of ``block + span``
  keys in tiles sized so that the keys it scans exceed the band by less than one tile (a 16-key window: 80 keys per
  64 queries, not 128); on a GPU the block size and warps are autotuned per kernel (``triton.autotune`` over a few
  configurations, the sequence length not specialised), in Triton's interpreter one fixed configuration runs.
- Dropout (:func:`dropout_factor`): the keep-mask is ``tl.rand(seed, offset)`` of each element's flat offset
  (bh T + t) W + j in a [B H, T, W] layout per call (W slots per query: the window's 2w - 1 relative key offsets,
  the read's r bases), so forward and backward draw the same mask from the call's seed; :func:`dropout_mask`
  materialises it (what the tests compare the kernels with).

Importing this module imports Triton (an ImportError where it is missing: :func:`lavo_zoo.attention.ops.dispatch.
triton_runs` treats that as "the kernels do not run here"). ``INTERPRETED`` is read when this module is first
imported, which is when the kernels are decorated: with ``TRITON_INTERPRET=1`` set before that, they run in Triton's
interpreter on CPU tensors (what the tests do); otherwise they need CUDA tensors.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources, PTXASError

from lavo_zoo.attention.ops import KernelUnavailable

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read by @triton.jit at decoration, i.e. at import
DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # fp64 stays on the PyTorch kernels
NEG = tl.constexpr(-1.0e30)  # a masked score: finite, so rows without a real key stay finite (constexpr: a compiled
# kernel may read a global only when it is a tl.constexpr; the interpreter does not check)


def usable(t: torch.Tensor) -> bool:
    """Whether the kernels can run on tensors like t: CUDA (or any device in the interpreter), fp16/bf16/fp32, not
    empty."""
    return (t.is_cuda or INTERPRETED) and t.dtype in DTYPES and t.numel() > 0


def precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision for operands of this dtype: fp32 products ('ieee') for fp32 inputs unless torch
    allows TF32 matmuls (``torch.set_float32_matmul_precision('high')``), as cuBLAS does; half inputs multiply in
    their own dtype (the flag is ignored for them)."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


def block_dim(n: int) -> int:
    """A power-of-two tile extent >= n and >= 16 (tl.dot's minimum)."""
    return max(16, triton.next_power_of_2(n))


def strides(t: torch.Tensor) -> tuple[int, ...]:
    """Every stride of t but the last (the kernels take unit column strides: :func:`rowmajor`); [B, H, T, d] ->
    (batch, head, time) strides."""
    return tuple(t.stride()[:-1])


def rowmajor(t: torch.Tensor) -> torch.Tensor:
    """t with unit stride along its last axis (the kernels' column stride): t itself when it has one, else a copy."""
    return t if t.stride(-1) == 1 else t.contiguous()


# ------------------------------------------------------------------------------------------------- tiles
TILES = (16, 32, 64)  # tile extents a band may be walked in (tl.dot's minimum is 16)


def band_tile(block: int, span: int) -> int:
    """The tile extent for a program of ``block`` rows whose band is ``block + span`` rows of the other side (span =
    w - 1 causal, 2 (w - 1) noncausal): the one of :data:`TILES` that scans the fewest rows, cdiv(block + span,
    tile) x tile, the larger on ties (fewer, fuller tile products)."""
    return min(TILES, key=lambda tile: (scanned(block, span, tile), -tile))


def scanned(block: int, span: int, tile: int) -> int:
    """Rows a program of ``block`` rows scans to cover its band of ``block + span`` in tiles of ``tile``."""
    return triton.cdiv(block + span, tile) * tile


def autotuned(blocks: tuple[int, ...], warps: tuple[int, ...], key: list[str], span_of=None):
    """Decorator for a @triton.jit kernel with the constexpr BM (rows per program) and, where it walks a band, BN
    (its tile extent): on a GPU ``triton.autotune`` over the ``blocks`` x ``warps`` configurations, keyed on
    ``key``, each band kernel's with the exact-skipping tile of :func:`band_tile` (``span_of(args)`` gives the
    band's span from the launch's arguments); in Triton's interpreter one fixed configuration (no benchmarking
    there): the first block and warps, the smallest tile.

    Args:
        blocks: the BM values to try.
        warps: the warp counts to try.
        key: the launch arguments whose values key the tuning cache.
        span_of: for a band kernel, the band's span from the launch's named arguments; None: no BN.
    """
    def config(block: int, num_warps: int, tile: int | None = None) -> triton.Config:
        return triton.Config({"BM": block} | ({} if span_of is None else {"BN": tile or block}), num_warps=num_warps)

    def prune(configs, named_args, **kwargs):
        span = span_of({**named_args, **kwargs})
        return [config(c.kwargs["BM"], c.num_warps, band_tile(c.kwargs["BM"], span)) for c in configs]

    def wrap(kernel):
        chosen = [config(block, w) for block in blocks for w in warps]
        if INTERPRETED:
            chosen = [config(blocks[0], warps[0], TILES[0])]
        return triton.autotune(configs=chosen, key=key,
                               prune_configs_by={"early_config_prune": prune} if span_of else None)(kernel)
    return wrap


# ------------------------------------------------------------------------------------------------- the launch
GRID_LIMIT = 2**31 - 1  # programs on a CUDA grid's x axis (its y and z axes stop at 65,535)
_failures: dict[str, str] = {}  # kernel name -> why it could not be compiled, in this process


def failures() -> dict[str, str]:
    """The Triton kernels that failed to compile in this process, with the reason (empty: none)."""
    return dict(_failures)


def grid(programs: int, what: str) -> tuple[int]:
    """The one-axis launch grid of ``programs`` programs (batch x heads x blocks of ``what``), or a ValueError that
    says what to shrink where it exceeds the grid's limit."""
    if programs > GRID_LIMIT:
        raise ValueError(f"{what}: {programs} Triton programs exceed the launch grid's limit of {GRID_LIMIT}; split "
                         "the batch or the sequence into smaller calls")
    return (programs,)


def _gist(message: str) -> str:
    """The first and last lines of a compiler's message (Triton's put the place first, e.g. 'at 15:24:', and the
    reason last), at most 300 characters each."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[0][:300] if len(lines) == 1 else f"{lines[0][:300]} ... {lines[-1][:300]}"


def _compile_failure(e: BaseException) -> bool:
    """Whether an exception from a launch says the kernel cannot be compiled for this device (not a bug in the
    call, not an out-of-memory error)."""
    if isinstance(e, (CompilationError, OutOfResources, PTXASError)):
        return True
    return isinstance(e, RuntimeError) and not isinstance(e, torch.OutOfMemoryError) and "ptxas" in str(e).lower()


@contextlib.contextmanager
def compiling(name: str, *, smaller_fits: bool = False) -> Iterator[None]:
    """Run the launch of the Triton kernel ``name`` (the project's own through :func:`launch`, or a library's, e.g.
    fla's, in an op's kernel function) so that a failure to compile it on this device warns once (naming it and the
    reason), is recorded (:func:`failures`: the Triton kernels are then off for the process in the dispatch) and
    raises :class:`~lavo_zoo.attention.ops.KernelUnavailable`, on which the dispatch reruns the call on the op's
    fallback; a later launch of that kernel raises at once. Other errors (a bug in the call, a full device)
    propagate unchanged.

    Args:
        name: the kernel's name in the warning and in :func:`failures`.
        smaller_fits: the caller has a smaller configuration to try: a configuration that needs more shared memory
            than the device has (OutOfResources) raises as it is, recording nothing.
    """
    if name in _failures:
        raise KernelUnavailable(f"{name}: {_failures[name]}")
    try:
        yield
    except Exception as e:
        if not _compile_failure(e) or (smaller_fits and isinstance(e, OutOfResources)):
            raise
        reason = f"{type(e).__name__}: {_gist(str(e))}"
        _failures[name] = reason
        warnings.warn(f"the Triton kernel {name} could not be compiled on this device ({reason}); the Triton "
                      "kernels are off for the rest of this process and the call runs on the PyTorch kernels "
                      "(set LAVO_ZOO_TRITON=0 to skip the attempt)", RuntimeWarning, stacklevel=4)
        raise KernelUnavailable(f"{name}: {reason}") from e


def launch(name: str, kernel, programs, *args, config: dict | None = None, smaller_fits: bool = False,
           **kwargs) -> None:
    """``kernel[programs](*args, **kwargs)`` under :func:`compiling` (``name``: the kernel's name there).

    Args:
        name: the kernel's name in the warning and in :func:`failures`.
        kernel: a ``@triton.jit`` (or autotuned) kernel.
        programs: the grid, or a function of the meta-parameters (an autotuned kernel's block size) that gives it.
        *args: the kernel's positional arguments.
        **kwargs: the kernel's keyword arguments.
        config: meta-parameters fixed by the caller (e.g. tests' small tiles), which bypass an autotuned kernel's
            tuning.
        smaller_fits: as in :func:`compiling`: OutOfResources raises as it is (the caller retries smaller).
    """
    if config is not None:
        if isinstance(kernel, triton.runtime.Autotuner):
            kernel = kernel.fn
        kwargs = {**kwargs, **config}
        if callable(programs):
            programs = programs(config)
    with compiling(name, smaller_fits=smaller_fits):
        kernel[programs](*args, **kwargs)


# ------------------------------------------------------------------------------------------------- dropout
@triton.jit
def dropout_factor(seed, offset, p):
    """The dropout factor of the elements at flat ``offset`` (int64 tensor) of the call with ``seed``: 1 / (1 - p)
    where kept (probability 1 - p), 0 where dropped. The same (seed, offset) gives the same factor in forward and
    backward."""
    return tl.where(tl.rand(seed, offset) >= p, 1.0 / (1.0 - p), 0.0)


@triton.jit
def _dropout_mask(OUT, seed, N, p, BLOCK: tl.constexpr):
    offset = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(OUT + offset, dropout_factor(seed, offset, p), mask=offset < N)


def dropout_mask(seed: int, shape: tuple[int, ...], p: float, device: torch.device | str) -> torch.Tensor:
    """The dropout factors the kernels use for a call with this seed and p, materialised: [*shape] fp32 where shape
    is [B, H, T, W] (the window: W = 2w - 1 relative key offsets s - t + w - 1; the read: W = r bases).

    Args:
        seed: the call's seed (:func:`~lavo_zoo.attention.ops.dropout.new_seed`).
        shape: [B, H, T, W], the kernel's layout of the mask.
        p: the dropout probability, in [0, 1).
        device: where the mask is made (the Triton kernel draws the factors there).
    """
    out = torch.empty(shape, dtype=torch.float32, device=device)
    block = 1024
    launch("dropout_mask", _dropout_mask, grid(triton.cdiv(out.numel(), block), "dropout_mask"), out, seed,
           out.numel(), p, BLOCK=block)
    return out
