"""Compile LAVO's Triton kernels for a CUDA GPU on a machine without one: the check of the device check that needs
no device.

Triton's interpreter (the test suite's way of running the kernels on the CPU) executes a kernel's Python without
compiling it, so it accepts what the compiler refuses (a global that is not a ``tl.constexpr``, say) and cannot say
how much shared memory a configuration needs. This script runs LAVO layers (causal, noncausal and cross, fp32 and
bf16, dropout and padding, the decoding step) on the CPU with Triton's launches replaced by its ahead-of-time
compilation for the chosen architecture (``--arch``, default 90: the H100 and H200): every configuration each
launch would try is compiled to a cubin with the bundled ptxas, and a configuration that needs more shared memory
than ``--shared-limit`` bytes (the H100's and H200's 232,448 by default) is refused as the device refuses it
(OutOfResources), so that an autotuned kernel skips it and a fixed one tries its smaller block. Nothing runs on a
GPU and the numbers computed are meaningless: only the compilation is checked.

    python benchmarks/gpu/compile_kernels.py [--arch 90] [--shared-limit 232448] [--quick] [--front-end] [--json F]

Every kernel's Triton IR is also checked for a product's result that is transposed (``tl.trans`` of a value
computed from a ``tl.dot``), which the pinned Triton can miscompile on Hopper (docs/lavo.md, "No product's result
is transposed"; benchmarks/RESULTS.md has the device run that points to it).

Prints one line per kernel (configurations compiled, the largest shared memory one of them needs, the smallest);
exits 1 when a kernel failed to compile (:func:`lavo_zoo.attention.ops.triton_utils.failures`), transposes a
product's result, or a layer fell back to its PyTorch kernels. Takes about 10 minutes on two cores with an empty
Triton cache (``--quick``, the fp32 layers with d = 128 and the decoding step: 4); ``--front-end`` (what the test
suite runs) stops at Triton's IR, in seconds, and has no shared memory figures.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# every (pattern, head dim, dtype, dropout) a layer is run in; d = 128 in fp32 needs the most shared memory
LAYERS = [("causal", 128, "float32", 0.0), ("noncausal", 128, "float32", 0.0), ("cross", 128, "float32", 0.0),
          ("causal", 64, "bfloat16", 0.1), ("noncausal", 64, "bfloat16", 0.1), ("cross", 32, "float16", 0.1)]
QUICK = [("causal", 128, "float32", 0.0), ("noncausal", 128, "float32", 0.0)]


class CompileOnlyDriver:
    """Triton's active driver, for a GPU that is not there: device 0, stream 0, the target architecture."""

    def __init__(self, arch: int) -> None:
        from triton.backends.compiler import GPUTarget
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        return self.target


def triton_ir(src, target, options):
    """Triton's front end: the kernel's Python to Triton IR, its helpers inlined (the ``ttir`` stage; where a kernel
    the compiler refuses fails, which the interpreter never does)."""
    from triton._C.libtriton import ir
    from triton.compiler.compiler import make_backend

    backend = make_backend(target)
    options = backend.parse_options(dict(options or {}, **src.parse_options()))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                         context)
    return backend.make_ttir(module, {}, options, target.arch)


def transposed_products(module) -> list[str]:
    """The source lines (``path:line``) where a kernel's Triton IR transposes a value computed from a product's
    result (``tt.trans`` of anything a ``tt.dot`` flows into, through a loop's carried values too); transposing a
    loaded tile is fine."""
    ops: list = []
    module.walk(ops.append)
    owner = {op.get_region(i).id(): op for op in ops for i in range(op.get_num_regions())}
    deps: dict[int, set[int]] = defaultdict(set)   # value -> the values it is computed from
    derived: set[int] = set()                      # values computed from a product
    for op in ops:
        operands = [op.get_operand(i).id() for i in range(op.get_num_operands())]
        for i in range(op.get_num_results()):
            deps[op.get_result(i).id()].update(operands)
            if op.get_name() == "tt.dot":
                derived.add(op.get_result(i).id())
        if op.get_name() != "scf.yield":
            continue
        block = op.get_block()
        parent = owner[block.get_parent().id()]
        for i, value in enumerate(operands):       # a region's results (and a loop's carried values) come from here
            if i < parent.get_num_results():
                deps[parent.get_result(i).id()].add(value)
            if parent.get_name() == "scf.for":     # body arguments: the induction variable, then one per value
                carried = block.arg(i + 1).id()
                deps[carried].update((value, parent.get_operand(3 + i).id()))
    changed = True
    while changed:
        grown = {v for v, sources in deps.items() if v not in derived and sources & derived}
        derived |= grown
        changed = bool(grown)
    return sorted({_source_line(op) for op in ops
                   if op.get_name() == "tt.trans" and op.get_operand(0).id() in derived})


def _source_line(op) -> str:
    """``path:line`` of the innermost source position of an operation's location, the path from the repository."""
    import re

    found = re.search(r'"([^"]+)":(\d+):\d+', str(op.get_result(0).get_loc()))
    if not found:
        return "?"
    path = found.group(1)
    root = str(ROOT) + "/"
    return f"{path.removeprefix(root)}:{found.group(2)}"


def checking(compile_fn, transposed: dict[str, list[str]], current: list[str]):
    """In place of ``triton.compiler.compile``: the Triton IR check (findings under the launch's name, ``current[0]``),
    then ``compile_fn`` (the real compilation), or with None a stand-in kernel whose shared memory is unknown (0)."""
    from types import SimpleNamespace

    def compile(src, target=None, options=None, _env_vars=None):
        found = transposed_products(triton_ir(src, target, options))
        if found:
            transposed[current[0]] = sorted(set(transposed.get(current[0], [])) | set(found))
        if compile_fn is None:
            return SimpleNamespace(metadata=SimpleNamespace(shared=0))
        return compile_fn(src, target=target, options=options, _env_vars=_env_vars)
    return compile


def install(arch: int, shared_limit: int, front_end: bool = False) -> tuple[dict[str, list[int]],
                                                                          dict[str, list[str]]]:
    """Make Triton compile for ``arch`` without a GPU and replace the project's launches by compilation (the front
    end alone with ``front_end``), each kernel's Triton IR checked (:func:`transposed_products`); returns the records
    it fills: kernel name -> the shared memory (bytes) of each configuration compiled, and kernel name -> the source
    lines that transpose a product's result."""
    import torch
    import triton
    import triton.compiler
    from triton.runtime.errors import OutOfResources

    from lavo_zoo.attention.lavo import triton as read_kernels
    from lavo_zoo.attention.lavo import triton_memory as memory_kernels
    from lavo_zoo.attention.ops import triton_utils
    from lavo_zoo.attention.ops.window import triton as window_kernels

    triton.runtime.driver.set_active(CompileOnlyDriver(arch))
    transposed: dict[str, list[str]] = {}
    current = [""]                                 # the launch being compiled
    triton.compiler.compile = checking(None if front_end else triton.compiler.compile, transposed, current)
    shared: dict[str, list[int]] = defaultdict(list)
    triton_utils.usable = lambda t: t.dtype in triton_utils.DTYPES and t.numel() > 0   # CPU tensors stand in

    def compile_launch(name: str, kernel, programs, *args, config: dict | None = None, smaller_fits: bool = False,
                       **kwargs) -> None:
        if config is not None:
            if isinstance(kernel, triton.runtime.Autotuner):
                kernel = kernel.fn
            kwargs = {**kwargs, **config}
        current[0] = name
        with triton_utils.compiling(name, smaller_fits=smaller_fits):
            compiled = kernel.warmup(*args, grid=(1,), **kwargs)
            compiled = compiled if isinstance(compiled, list) else [compiled]
            sizes = [k.metadata.shared for k in compiled]
            shared[name].extend(sizes)
            if min(sizes) > shared_limit:   # every configuration too large: the device refuses the launch
                raise OutOfResources(min(sizes), shared_limit, "shared memory")

    for kernels in (window_kernels, read_kernels, memory_kernels):   # every module that launches the project's kernels
        kernels.launch = compile_launch
    torch.manual_seed(0)
    return shared, transposed


def run_layers(layers: list[tuple[str, int, str, float]], decode: bool) -> list[str]:
    """Forward and backward of each layer (and the decoding step) on the Triton kernels; the layers that did not
    run on them."""
    import torch

    from lavo_zoo.attention import build_attention

    fell_back = []
    for pattern, d, dtype_name, dropout in layers:
        dtype = getattr(torch, dtype_name)
        heads, B, T = 2, 2, 80
        layer = build_attention("lavo", heads * d, heads, pattern=pattern, kernels="triton", dropout=dropout,
                                num_bases=min(64, d)).to(dtype).train()
        x = torch.randn(B, T, heads * d, dtype=dtype, requires_grad=True)
        mask = torch.ones(B, T, dtype=torch.bool)
        mask[1, T // 2:] = False
        if pattern == "cross":
            out = layer(x, context=torch.randn(B, T + 7, heads * d, dtype=dtype, requires_grad=True),
                        context_mask=mask.repeat(1, 2)[:, :T + 7])
        else:
            out = layer(x, mask)
        out.float().sum().backward()
        if layer.kernels_used != "triton":
            fell_back.append(f"{pattern} d={d} {dtype_name}: {layer.kernels_used}")
    if decode:
        layer = build_attention("lavo", 128, 2, pattern="causal", kernels="triton").eval()
        with torch.no_grad():
            x = torch.randn(1, 20, 128)
            _, state = layer(x[:, :19], return_state=True)
            layer(x[:, 19:], state=state)
        if layer.kernels_used != "triton":
            fell_back.append(f"decode: {layer.kernels_used}")
    return fell_back


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100, H200)")
    parser.add_argument("--shared-limit", type=int, default=232_448,
                        help="shared memory per block in bytes (232448: H100, H200; 101376: RTX 4090)")
    parser.add_argument("--quick", action="store_true", help="the fp32 layers with d = 128 and the decoding step")
    parser.add_argument("--front-end", action="store_true",
                        help="Triton's front end only (seconds: what the compiler refuses; no shared memory figures)")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)

    shared, transposed = install(args.arch, args.shared_limit, front_end=args.front_end)
    from lavo_zoo.attention.ops import triton_utils

    fell_back = run_layers(QUICK if args.quick else LAYERS, decode=True)
    failures = triton_utils.failures()
    print(f"Triton kernels compiled for sm_{args.arch} (shared memory limit {args.shared_limit} bytes):")
    for name, sizes in sorted(shared.items()):
        print(f"  {name:<18} {len(sizes):>3} configurations, shared memory {min(sizes):>7} to {max(sizes):>7} bytes")
    for name, why in failures.items():
        print(f"  FAILED {name}: {why}")
    for name, lines in sorted(transposed.items()):
        print(f"  TRANSPOSED PRODUCT in {name} (miscompiled on Hopper by Triton 3.4 to 3.7.0): {', '.join(lines)}")
    for what in fell_back:
        print(f"  not on the Triton kernels: {what}")
    result: dict[str, Any] = {"arch": args.arch, "shared_limit": args.shared_limit, "shared": dict(shared),
                              "failures": failures, "transposed": transposed, "fell_back": fell_back}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if failures or transposed or fell_back else 0


if __name__ == "__main__":
    sys.exit(main())
