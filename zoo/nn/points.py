"""Point-cloud operations in plain PyTorch (the same code on CPU and CUDA, no compiled extension): farthest point
sampling, k nearest neighbours, gathering, and the nearest-neighbour squared distances that Chamfer distance is
made of. Pairwise distances are computed a block at a time (at most ``max_block`` elements, 2^24 = 64 MiB of fp32
by default), so a 16,384 x 16,384 distance matrix never exists at once; nearest neighbours between large clouds
also skip the blocks that cannot hold one.

Distances are always computed in fp32 or fp64, also under mixed-precision autocast (training's bf16 autocast would
otherwise run the |a|^2 + |b|^2 - 2 a.b products in bf16, whose 8-bit mantissa changes most nearest neighbours of
a dense cloud): half-precision inputs are upcast and autocast is switched off around the products.
"""
from __future__ import annotations

import torch

from lavo_zoo.nn.full_precision import full as _full
from lavo_zoo.nn.full_precision import no_autocast as _no_autocast

MAX_BLOCK = 1 << 24  # elements of one block of the pairwise distance matrix


def _rows_per_block(batch: int, columns: int, max_block: int) -> int:
    return max(1, max_block // max(1, batch * columns))


def square_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a_i - b_j||^2 for a [B, N, C], b [B, M, C] -> [B, N, M] (|a|^2 + |b|^2 - 2 a.b, clamped at 0), in fp32
    (fp64 for fp64 inputs), also under autocast."""
    a, b = _full(a), _full(b)
    with _no_autocast(a.device):
        d = torch.baddbmm(b.square().sum(-1).unsqueeze(1), a, b.transpose(1, 2), alpha=-2)  # [B, N, M]
    return d.add_(a.square().sum(-1, keepdim=True)).clamp_(min=0)


def gather_points(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [B, N, C] indexed by idx [B, ...] (long, into N) -> [B, ..., C]."""
    b = x.shape[0]
    flat = idx.reshape(b, -1)  # [B, K]
    out = torch.gather(x, 1, flat.unsqueeze(-1).expand(-1, -1, x.shape[-1]))  # [B, K, C]
    return out.reshape(*idx.shape, x.shape[-1])


@torch.no_grad()
def farthest_point_sample(points: torch.Tensor, num: int) -> torch.Tensor:
    """Indices [B, num] of farthest point sampling of points [B, N, 3], starting at point 0 (as pointnet2_ops).

    Each next point is the one whose squared distance to the chosen set is largest (first index on ties).
    """
    b, n, _ = points.shape
    if not 0 < num <= n:
        raise ValueError(f"farthest point sampling of {num} points from clouds of {n}: need 0 < num <= {n}")
    idx = torch.zeros(b, num, dtype=torch.long, device=points.device)
    nearest = torch.full((b, n), float("inf"), dtype=points.dtype, device=points.device)  # [B, N]
    last = torch.zeros(b, dtype=torch.long, device=points.device)
    rows = torch.arange(b, device=points.device)
    for i in range(1, num):
        d = (points - points[rows, last].unsqueeze(1)).square().sum(-1)  # [B, N]
        nearest = torch.minimum(nearest, d)
        last = nearest.argmax(-1)
        idx[:, i] = last
    return idx


def fps(points: torch.Tensor, num: int) -> torch.Tensor:
    """The ``num`` farthest-point-sampled points [B, num, 3] of points [B, N, 3]."""
    return gather_points(points, farthest_point_sample(points, num))


@torch.no_grad()
def knn(query: torch.Tensor, points: torch.Tensor, k: int, max_block: int = MAX_BLOCK) -> torch.Tensor:
    """Indices [B, M, k] of the k nearest ``points`` [B, N, C] of each ``query`` [B, M, C], nearest first.

    Args:
        query: [B, M, C] the points whose neighbours are sought.
        points: [B, N, C] the candidates.
        k: neighbours per query, 0 < k <= N.
        max_block: elements of one block of the pairwise distance matrix (the memory bound).

    Raises:
        ValueError: k outside (0, N].
    """
    b, m, _ = query.shape
    n = points.shape[1]
    if not 0 < k <= n:
        raise ValueError(f"k nearest neighbours with k={k} among {n} points: need 0 < k <= {n}")
    rows = _rows_per_block(b, n, max_block)
    out = torch.empty(b, m, k, dtype=torch.long, device=query.device)
    for start in range(0, m, rows):
        d = square_distances(query[:, start:start + rows], points)  # [B, rows, N]
        out[:, start:start + rows] = d.topk(k, dim=-1, largest=False, sorted=True).indices
    return out


def _augmented(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a [..., N, 3], b [..., M, 3] -> [a, |a|^2, 1], [-2b, 1, |b|^2] so that one matmul gives |a - b|^2."""
    a2 = torch.cat([a, a.square().sum(-1, keepdim=True), torch.ones_like(a[..., :1])], -1)  # [..., N, 5]
    b2 = torch.cat([-2 * b, torch.ones_like(b[..., :1]), b.square().sum(-1, keepdim=True)], -1)  # [..., M, 5]
    return a2, b2


_NEIGHBOUR_CELLS = torch.tensor([(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)])  # [27, 3]


def _segment_positions(starts: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For segments [start, start + count): (segment id of every element, the element's position), flattened."""
    seg = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)  # [T]
    first = torch.cumsum(counts, 0) - counts  # [S] where each segment begins in the flat list
    return seg, torch.arange(len(seg), device=counts.device) - first[seg] + starts[seg]


def _grid_search(q: torch.Tensor, b: torch.Tensor, lo: torch.Tensor, h: float, dims: torch.Tensor,
                 max_block: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(squared distance [N], index [N]) of the nearest b-point among those in the 27 grid cells (size h, origin lo,
    dims cells per axis) around each query q [N, 3]; inf where those cells are empty. None when that would compare
    more than a quarter of all N x M pairs (a dense search is then cheaper)."""
    stride = torch.stack([dims[1] * dims[2], dims[2], torch.ones_like(dims[2])])  # [3]

    def cells(p: torch.Tensor) -> torch.Tensor:
        return ((p - lo) / h).floor().long().clamp_(min=0) + 1  # [P, 3]; the border cells stay empty

    bkey = (cells(b) * stride).sum(-1)  # [M]
    order = bkey.argsort()
    sorted_keys = bkey[order]
    keys = ((cells(q)[:, None, :] + _NEIGHBOUR_CELLS.to(q.device)) * stride).sum(-1).reshape(-1)  # [N * 27]
    first = torch.searchsorted(sorted_keys, keys)
    counts = torch.searchsorted(sorted_keys, keys, right=True) - first  # [N * 27] b-points per cell
    per_query = torch.cumsum(counts.reshape(-1, 27).sum(1), 0)  # [N] candidates up to and including query i
    if int(per_query[-1]) > len(q) * len(b) // 4:
        return None
    best = torch.full((len(q),), float("inf"), dtype=q.dtype, device=q.device)
    idx = torch.zeros(len(q), dtype=torch.long, device=q.device)
    budget, start = max(1, max_block // 8), 0
    while start < len(q):  # chunks of queries holding at most `budget` candidates (at least one query)
        done = int(per_query[start - 1]) if start else 0
        stop = max(start + 1, int(torch.searchsorted(per_query, done + budget, right=True)))
        seg, pos = _segment_positions(first[start * 27:stop * 27], counts[start * 27:stop * 27])
        query = seg // 27 + start  # [T] which query each candidate belongs to
        cand = order[pos]  # [T] the candidate's b-index
        d = (q[query] - b[cand]).square().sum(-1)  # [T]
        best.scatter_reduce_(0, query, d, "amin")
        hit = d == best[query]
        idx.scatter_(0, query[hit], cand[hit])
        start = stop
    return best, idx


def _nearest_one_way(a: torch.Tensor, b: torch.Tensor, max_block: int) -> torch.Tensor:
    """Index [N] of each a-point's nearest b-point (exact) for a [N, 3], b [M, 3].

    A uniform grid of cell size h holds b (h starts at about twice the spacing of M points on a surface as large as
    b). Each a-point compares itself with the b-points in its own and the 26 surrounding cells; a neighbour found
    there within distance h is the nearest one, since everything outside those cells is at least h away. The
    a-points without one try again on a grid 4x coarser; what remains once a cell spans the clouds is compared with
    every b-point, a block of rows at a time.
    """
    n, m = len(a), len(b)
    lo = torch.minimum(a.min(0).values, b.min(0).values)
    extent = float((torch.maximum(a.max(0).values, b.max(0).values) - lo).max().clamp_min(1e-6))
    h = max(float(torch.linalg.vector_norm(b.max(0).values - b.min(0).values)) * 2.0 / m ** 0.5, extent / 512)
    out = torch.empty(n, dtype=torch.long, device=a.device)
    todo = torch.arange(n, device=a.device)
    while len(todo) and h < extent:
        dims = torch.full((3,), int(extent / h) + 3, dtype=torch.long, device=a.device)
        searched = _grid_search(a[todo], b, lo, h, dims, max_block)
        if searched is None:
            break
        best, idx = searched
        found = best <= h * h
        out[todo[found]] = idx[found]
        todo = todo[~found]
        h *= 4
    rows = max(1, max_block // m)
    for start in range(0, len(todo), rows):
        sel = todo[start:start + rows]
        out[sel] = square_distances(a[sel][None], b[None])[0].argmin(-1)
    return out


@torch.no_grad()
def nearest_indices(a: torch.Tensor, b: torch.Tensor, max_block: int = MAX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """(index [B, N] of each a-point's nearest b-point, index [B, M] of each b-point's nearest a-point) for
    a [B, N, 3], b [B, M, 3], exact up to ties.

    Pairs with N x M <= ``max_block`` take dense distance matrices (both directions from one); larger ones are
    searched through a uniform grid (see :func:`_nearest_one_way`), so nothing near N x M is held. Distances in fp32
    (fp64 for fp64 inputs), also under autocast.
    """
    a, b = _full(a), _full(b)
    bs, n, _ = a.shape
    m = b.shape[1]
    if n * m <= max_block:  # dense, a few clouds at a time
        a2, b2 = _augmented(a, b)
        per = max(1, max_block // (n * m))
        with _no_autocast(a.device):
            pairs = [torch.bmm(a2[i:i + per], b2[i:i + per].transpose(1, 2)) for i in range(0, bs, per)]  # [b, N, M]
        return torch.cat([d.argmin(-1) for d in pairs]), torch.cat([d.argmin(1) for d in pairs])
    ab = torch.stack([_nearest_one_way(a[i], b[i], max_block) for i in range(bs)])  # [B, N]
    ba = torch.stack([_nearest_one_way(b[i], a[i], max_block) for i in range(bs)])  # [B, M]
    return ab, ba


def nearest_sq_distances(a: torch.Tensor, b: torch.Tensor, max_block: int = MAX_BLOCK
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(d1 [B, N], d2 [B, M]): squared distance of each a-point to its nearest b-point and of each b-point to its
    nearest a-point. Differentiable: the neighbours are found without gradients, the distances are recomputed
    exactly from the matched pairs (as the CUDA Chamfer extensions' backward passes do). fp32 for half-precision
    inputs."""
    a, b = _full(a), _full(b)
    ab, ba = nearest_indices(a.detach(), b.detach(), max_block)
    d1 = (a - gather_points(b, ab)).square().sum(-1)  # [B, N]
    d2 = (b - gather_points(a, ba)).square().sum(-1)  # [B, M]
    return d1, d2
