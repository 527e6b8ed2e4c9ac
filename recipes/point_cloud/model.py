"""PoinTr (Yu et al., ICCV 2021) as its reference ``models/PoinTr.py`` / ``Transformer.py`` / ``dgcnn_group.py``,
with every attention site taken from the registry.

    partial [B, N, 3] -> DGCNN grouper (FPS + k-NN edge convolutions) -> P point proxies (coordinates + features)
    -> geometry-aware transformer encoder (self-attention + k-NN branch, position embedding added before each block)
    -> global feature (max-pooled MLP) -> coarse centres [B, M, 3] and query features (the query generator)
    -> geometry-aware decoder (query self-attention + k-NN branch, cross attention over the encoder output + k-NN
       branch) -> FoldingNet rebuild head: S = step^2 points around each centre
    -> coarse = [centres; FPS(partial, M)] [B, 2M, 3] and dense = [folded points; partial] [B, M*S + N, 3]

Attention sites (``model.attention``): ``encoder_self`` and ``decoder_self`` (the queries are an unordered set: both
are built with the noncausal pattern) and ``cross`` (the decoder's attention over the encoder output). Any registry
mechanism that supports a site's pattern can sit there; the paper's variant puts LAVO (r = 64) in ``cross``.

Deliberate differences from the reference: projections carry biases (the reference's qkv_bias=False is the
mechanisms' ``bias`` option); FPS / k-NN are the plain-PyTorch versions in :mod:`.ops` (pointnet2_ops / knn_cuda
there); the coarse output appends FPS(partial, min(M, N)) so that M may exceed the number of input points.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import nn

from lavo_zoo.attention import Attention, AttentionSpec, SiteAttention, SiteSchedule, attention_info
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.config import NonNegativeInt, PositiveInt, Probability
from lavo_zoo.errors import ConfigError
from lavo_zoo.nn.points import fps, gather_points, knn


def _timm_layers():
    """timm's layers (DropPath, Mlp, trunc_normal_), imported when a model is built: importing timm loads
    torchvision (seconds), which every CLI call would otherwise pay through the recipe registry."""
    import timm.layers

    return timm.layers


# PoinTr's decoder self-attention runs over an unordered set of queries: noncausal, like the encoder's
POINTR_SITE_PATTERNS = {"encoder_self": "noncausal", "decoder_self": "noncausal", "cross": "cross"}


@dataclass
class PoinTrSiteAttention(SiteAttention):
    """:class:`SiteAttention` whose ``decoder_self`` is checked and built noncausal (PoinTr's queries are a set),
    so mechanisms without a causal form (lara, nystromformer) can sit there too."""

    def build(self, site: str, embed_dim: int, num_heads: int) -> Attention:
        """The attention module of ``site`` with that site's pattern (:data:`POINTR_SITE_PATTERNS`)."""
        return getattr(self, site).build(embed_dim, num_heads, POINTR_SITE_PATTERNS[site])

    def check(self, key: str = "model.attention") -> None:
        """Raise :class:`ConfigError` (naming ``key.<site>``) unless each site's mechanism supports its pattern and
        options."""
        for site, pattern in POINTR_SITE_PATTERNS.items():
            getattr(self, site).check(pattern, f"{key}.{site}")


@dataclass
class ModelConfig:
    """PoinTr's PCN model (``cfgs/PCN_models/PoinTr.yaml``: trans_dim 384, depth [6, 8], 6 heads, mlp_ratio 2,
    knn_layer 1, num_query 224, num_pred 14336)."""

    attention_patterns: ClassVar[dict[str, str]] = POINTR_SITE_PATTERNS  # each site's pattern

    embed_dim: PositiveInt = 384
    num_heads: PositiveInt = 6
    ffn_dim: PositiveInt = 768
    encoder_layers: PositiveInt = 6
    decoder_layers: PositiveInt = 8
    dropout: Probability = 0.0
    attention_dropout: Probability = 0.0
    drop_path: Probability = 0.0
    activation: Literal["gelu", "relu"] = "gelu"
    knn_layers: NonNegativeInt = 1  # the first knn_layers encoder and decoder blocks have the k-NN branch
    knn_k: PositiveInt = 8  # neighbours of the k-NN branch
    grouper_k: PositiveInt = 16  # neighbours of the DGCNN grouper's edge convolutions
    proxy_points: list[PositiveInt] = field(default_factory=lambda: [512, 128])  # grouper FPS sizes; the last = proxies
    num_query: PositiveInt = 224  # M: coarse centres / decoder queries
    num_pred: PositiveInt = 14336  # M * step^2 points folded around the centres
    global_dim: PositiveInt = 1024  # width of the max-pooled global features
    fold_hidden: PositiveInt = 256
    attention: PoinTrSiteAttention = field(default_factory=PoinTrSiteAttention)
    # a hybrid per site: the attention of each of the site's layers, a list repeated over them whose entries naming
    # that site's model.attention mechanism take its options (decoder_self: [lavo, lavo, lavo, sdpa])
    attention_schedule: SiteSchedule = field(default_factory=SiteSchedule)

    def __post_init__(self) -> None:
        resolve_schedules(self)


def build_site(cfg: ModelConfig, site: str, spec: AttentionSpec | None = None) -> Attention:
    """The attention of ``site`` (its pattern from :data:`POINTR_SITE_PATTERNS`) built from ``spec`` (one layer's,
    default: ``cfg.attention``'s); ``attention_dropout`` becomes the mechanism's ``dropout`` option where it has one
    and the spec does not set it."""
    spec = spec if spec is not None else getattr(cfg.attention, site)
    spec.check(POINTR_SITE_PATTERNS[site], f"model.attention.{site}")  # ConfigError naming the site and pattern
    options = dict(spec.options)
    if cfg.attention_dropout and "dropout" in attention_info(spec.name).options:
        options.setdefault("dropout", cfg.attention_dropout)
    return AttentionSpec(spec.name, options, origin=spec.origin).build(cfg.embed_dim, cfg.num_heads,
                                                                       POINTR_SITE_PATTERNS[site])


# ---------------------------------------------------------------------------------------------- k-NN features
def edge_features(x_q: torch.Tensor, x_k: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """DGCNN edge features: for queries x_q [B, M, C] and keys x_k [B, N, C] with neighbour indices idx [B, M, k]
    -> [B, M, k, 2C] = (neighbour - query, query)."""
    neighbours = gather_points(x_k, idx)  # [B, M, k, C]
    centre = x_q.unsqueeze(2).expand_as(neighbours)
    return torch.cat([neighbours - centre, centre], dim=-1)


class DGCNNGrouper(nn.Module):
    """Partial cloud [B, N, 3] -> (proxy coordinates [B, P, 3], features [B, P, 128]): edge convolutions at N points,
    FPS to proxy_points[0], edge convolutions, FPS to proxy_points[1] (when given), edge convolution (PoinTr's
    DGCNN_Grouper with [512, 128])."""

    def __init__(self, proxy_points: list[int], k: int) -> None:
        super().__init__()
        if len(proxy_points) not in (1, 2) or min(proxy_points) < 1:
            raise ConfigError(f"model.proxy_points must list 1 or 2 positive FPS sizes (PoinTr: [512, 128]; one size "
                              f"keeps the first stage's points as proxies), got {proxy_points}")
        self.proxy_points, self.k = proxy_points, k
        self.input_trans = nn.Conv1d(3, 8, 1)

        def edge_conv(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.GroupNorm(4, cout), nn.LeakyReLU(0.2))

        self.layer1, self.layer2 = edge_conv(16, 32), edge_conv(64, 64)
        self.layer3, self.layer4 = edge_conv(128, 64), edge_conv(128, 128)

    def _conv(self, layer: nn.Module, coor_q: torch.Tensor, f_q: torch.Tensor, coor_k: torch.Tensor,
              f_k: torch.Tensor) -> torch.Tensor:
        """Edge convolution of query features f_q [B, M, C] over their k nearest keys -> [B, M, C']."""
        idx = knn(coor_q, coor_k, min(self.k, coor_k.shape[1]))  # [B, M, k]
        e = edge_features(f_q, f_k, idx).permute(0, 3, 1, 2)  # [B, 2C, M, k]
        return layer(e).max(dim=-1).values.transpose(1, 2)  # [B, M, C']

    def forward(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if points.shape[1] < self.k:  # as the reference: pad tiny clouds with zeros up to k points
            points = torch.cat([points, points.new_zeros(points.shape[0], self.k - points.shape[1], 3)], 1)
        f = self.input_trans(points.transpose(1, 2)).transpose(1, 2)  # [B, N, 8]
        f = self._conv(self.layer1, points, f, points, f)  # [B, N, 32]
        idx = _fps_index(points, self.proxy_points[0])
        coor_q, f_q = gather_points(points, idx), gather_points(f, idx)  # [B, P0, 3], [B, P0, 32]
        f = self._conv(self.layer2, coor_q, f_q, points, f)  # [B, P0, 64]
        coor = coor_q
        f = self._conv(self.layer3, coor, f, coor, f)  # [B, P0, 64]
        if len(self.proxy_points) == 2:
            idx = _fps_index(coor, self.proxy_points[1])
            coor_q, f_q = gather_points(coor, idx), gather_points(f, idx)  # [B, P, 3], [B, P, 64]
        else:
            coor_q, f_q = coor, f
        f = self._conv(self.layer4, coor_q, f_q, coor, f)  # [B, P, 128]
        return coor_q, f


def _fps_index(points: torch.Tensor, num: int) -> torch.Tensor:
    from lavo_zoo.nn.points import farthest_point_sample

    return farthest_point_sample(points, min(num, points.shape[1]))


# ------------------------------------------------------------------------------------------ transformer blocks
class KnnBranch(nn.Module):
    """The geometry-aware branch: max over k neighbours of LeakyReLU(Linear(edge feature)), merged with the
    attention output by a Linear over their concatenation."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.knn_map = nn.Sequential(nn.Linear(2 * dim, dim), nn.LeakyReLU(0.2))
        self.merge_map = nn.Linear(2 * dim, dim)

    def forward(self, attended: torch.Tensor, x_q: torch.Tensor, x_k: torch.Tensor, idx: torch.Tensor
                ) -> torch.Tensor:
        """attended [B, M, C], queries x_q [B, M, C], keys x_k [B, N, C], idx [B, M, k] -> [B, M, C].

        Args:
            attended: [B, M, C] the attention's output.
            x_q: [B, M, C] the queries' features.
            x_k: [B, N, C] the keys' features.
            idx: [B, M, k] each query's k nearest keys.
        """
        local = self.knn_map(edge_features(x_q, x_k, idx)).max(dim=2).values  # [B, M, C]
        return self.merge_map(torch.cat([attended, local], dim=-1))


class EncoderBlock(nn.Module):
    """x + DropPath(Attn(LN x) [merged with the k-NN branch]), then x + DropPath(MLP(LN x)) (PoinTr's Block)."""

    def __init__(self, cfg: ModelConfig, attention: Attention, knn_branch: bool, drop_path: float) -> None:
        super().__init__()
        dim = cfg.embed_dim
        self.norm1, self.attn = nn.LayerNorm(dim), attention
        self.knn = KnnBranch(dim) if knn_branch else None
        timm = _timm_layers()
        self.drop_path = timm.DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        act = nn.GELU if cfg.activation == "gelu" else nn.ReLU
        self.mlp = timm.Mlp(dim, cfg.ffn_dim, act_layer=act, drop=cfg.dropout)

    def forward(self, x: torch.Tensor, knn_index: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, P, C], knn_index [B, P, k] (used by blocks with the k-NN branch) -> [B, P, C]."""
        h = self.norm1(x)
        out = self.attn(h)
        if self.knn is not None:
            out = self.knn(out, h, h, knn_index)
        x = x + self.drop_path(out)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class DecoderBlock(nn.Module):
    """Query self-attention (+ k-NN branch), cross attention over the encoder output (+ k-NN branch over the
    proxies nearest each query's centre), MLP; pre-LN residuals with DropPath (PoinTr's DecoderBlock)."""

    def __init__(self, cfg: ModelConfig, self_attention: Attention, cross_attention: Attention, knn_branch: bool,
                 drop_path: float) -> None:
        super().__init__()
        dim = cfg.embed_dim
        self.norm1, self.self_attn = nn.LayerNorm(dim), self_attention
        self.norm_q, self.norm_v, self.cross_attn = nn.LayerNorm(dim), nn.LayerNorm(dim), cross_attention
        self.knn = KnnBranch(dim) if knn_branch else None
        self.knn_cross = KnnBranch(dim) if knn_branch else None
        timm = _timm_layers()
        self.drop_path = timm.DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        act = nn.GELU if cfg.activation == "gelu" else nn.ReLU
        self.mlp = timm.Mlp(dim, cfg.ffn_dim, act_layer=act, drop=cfg.dropout)

    def forward(self, q: torch.Tensor, v: torch.Tensor, self_index: torch.Tensor | None = None,
                cross_index: torch.Tensor | None = None) -> torch.Tensor:
        """q [B, M, C] queries, v [B, P, C] encoder output -> [B, M, C].

        Args:
            q: [B, M, C] the queries.
            v: [B, P, C] the encoder's output.
            self_index: [B, M, k] each query's k nearest queries (the k-NN branch of the self-attention), or None.
            cross_index: [B, M, k] each query's k nearest proxies (the cross branch), or None.
        """
        h = self.norm1(q)
        out = self.self_attn(h)
        if self.knn is not None:
            out = self.knn(out, h, h, self_index)
        q = q + self.drop_path(out)
        hq, hv = self.norm_q(q), self.norm_v(v)
        out = self.cross_attn(hq, context=hv)
        if self.knn_cross is not None:
            out = self.knn_cross(out, hq, hv, cross_index)
        q = q + self.drop_path(out)
        return q + self.drop_path(self.mlp(self.norm2(q)))


# ------------------------------------------------------------------------------------------------------- model
def _point_mlp(cin: int, hidden: int, cout: int, norm: bool = True) -> nn.Sequential:
    """Conv1d(cin, hidden), [BatchNorm], LeakyReLU(0.2), Conv1d(hidden, cout) over [B, C, N]."""
    layers: list[nn.Module] = [nn.Conv1d(cin, hidden, 1)]
    if norm:
        layers.append(nn.BatchNorm1d(hidden))
    return nn.Sequential(*layers, nn.LeakyReLU(0.2), nn.Conv1d(hidden, cout, 1))


class PCTransformer(nn.Module):
    """Grouper, encoder, query generator and decoder: partial [B, N, 3] -> (query features [B, M, C],
    coarse centres [B, M, 3])."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c, g = cfg.embed_dim, cfg.global_dim
        self.grouper = DGCNNGrouper(cfg.proxy_points, cfg.grouper_k)
        self.pos_embed = _point_mlp(3, 128, c)
        self.input_proj = _point_mlp(128, c, c)
        depth = cfg.encoder_layers + cfg.decoder_layers
        rates = [cfg.drop_path * i / max(1, depth - 1) for i in range(depth)]
        layers = attention_layers(cfg)  # {site: the attention of each layer}
        self.encoder = nn.ModuleList(
            EncoderBlock(cfg, build_site(cfg, "encoder_self", spec), i < cfg.knn_layers, rates[i])
            for i, spec in enumerate(layers["encoder_self"]))
        self.increase_dim = _point_mlp(c, g, g)
        self.coarse_pred = nn.Sequential(nn.Linear(g, g), nn.ReLU(), nn.Linear(g, 3 * cfg.num_query))
        self.mlp_query = nn.Sequential(nn.Conv1d(g + 3, g, 1), nn.LeakyReLU(0.2), nn.Conv1d(g, g, 1),
                                       nn.LeakyReLU(0.2), nn.Conv1d(g, c, 1))
        self.decoder = nn.ModuleList(
            DecoderBlock(cfg, build_site(cfg, "decoder_self", own), build_site(cfg, "cross", cross),
                         i < cfg.knn_layers, rates[cfg.encoder_layers + i])
            for i, (own, cross) in enumerate(zip(layers["decoder_self"], layers["cross"])))
        self.apply(_init_weights)

    def forward(self, partial: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, b = self.cfg, partial.shape[0]
        coor, f = self.grouper(partial)  # [B, P, 3], [B, P, 128]
        k = min(cfg.knn_k, coor.shape[1])
        knn_index = knn(coor, coor, k) if cfg.knn_layers else None  # [B, P, k]
        pos = self.pos_embed(coor.transpose(1, 2)).transpose(1, 2)  # [B, P, C]
        x = self.input_proj(f.transpose(1, 2)).transpose(1, 2)  # [B, P, C]
        for i, block in enumerate(self.encoder):
            x = block(x + pos, knn_index if i < cfg.knn_layers else None)
        glob = self.increase_dim(x.transpose(1, 2)).max(dim=-1).values  # [B, G]
        coarse = self.coarse_pred(glob).reshape(b, cfg.num_query, 3)  # [B, M, 3]
        self_index = cross_index = None
        if cfg.knn_layers:
            self_index = knn(coarse, coarse, min(cfg.knn_k, cfg.num_query))  # [B, M, k]
            cross_index = knn(coarse, coor, k)  # [B, M, k] proxies nearest each centre
        query = torch.cat([glob.unsqueeze(1).expand(-1, cfg.num_query, -1), coarse], dim=-1)  # [B, M, G + 3]
        q = self.mlp_query(query.transpose(1, 2)).transpose(1, 2)  # [B, M, C]
        for i, block in enumerate(self.decoder):
            q = block(q, x, *((self_index, cross_index) if i < cfg.knn_layers else (None, None)))
        return q, coarse


def _init_weights(m: nn.Module) -> None:
    """PoinTr's initialisation: trunc-normal(0.02) linears, Xavier-normal 1-D convolutions, unit norms."""
    if isinstance(m, nn.Linear):
        _timm_layers().trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Conv1d):
        nn.init.xavier_normal_(m.weight, gain=1)
    elif isinstance(m, (nn.LayerNorm, nn.BatchNorm1d)):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


class Fold(nn.Module):
    """FoldingNet: a feature [B', C] folds a step x step grid in [-1, 1]^2 into S = step^2 offsets [B', 3, S]."""

    def __init__(self, in_channel: int, step: int, hidden: int) -> None:
        super().__init__()
        self.in_channel, self.step = in_channel, step
        lin = torch.linspace(-1.0, 1.0, step)
        grid = torch.stack([lin.view(1, step).expand(step, step).reshape(-1),
                            lin.view(step, 1).expand(step, step).reshape(-1)])  # [2, S]
        self.register_buffer("seed", grid, persistent=False)

        def mlp(cin: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv1d(cin, hidden, 1), nn.BatchNorm1d(hidden), nn.ReLU(),
                                 nn.Conv1d(hidden, hidden // 2, 1), nn.BatchNorm1d(hidden // 2), nn.ReLU(),
                                 nn.Conv1d(hidden // 2, 3, 1))

        self.folding1, self.folding2 = mlp(in_channel + 2), mlp(in_channel + 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, s = x.shape[0], self.step * self.step
        features = x.unsqueeze(-1).expand(n, self.in_channel, s)  # [B', C, S]
        fd1 = self.folding1(torch.cat([self.seed.unsqueeze(0).expand(n, 2, s), features], dim=1))  # [B', 3, S]
        return self.folding2(torch.cat([fd1, features], dim=1))  # [B', 3, S]


class PoinTr(nn.Module):
    """partial [B, N, 3] -> (coarse [B, M + min(M, N), 3], dense [B, M * step^2 + N, 3])."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        step = round((cfg.num_pred / cfg.num_query) ** 0.5)
        if step < 1 or step * step * cfg.num_query != cfg.num_pred:
            raise ConfigError(f"model.num_pred ({cfg.num_pred}) must be model.num_query ({cfg.num_query}) times a "
                              f"square (PoinTr folds step x step points around each centre), e.g. "
                              f"{cfg.num_query * max(1, step) ** 2}")
        if cfg.embed_dim % cfg.num_heads:
            raise ConfigError(f"model.embed_dim ({cfg.embed_dim}) must be a multiple of model.num_heads "
                              f"({cfg.num_heads})")
        self.cfg, self.fold_step = cfg, step
        c, g = cfg.embed_dim, cfg.global_dim
        self.base_model = PCTransformer(cfg)
        self.foldingnet = Fold(c, step, cfg.fold_hidden)
        self.increase_dim = nn.Sequential(nn.Conv1d(c, g, 1), nn.BatchNorm1d(g), nn.LeakyReLU(0.2), nn.Conv1d(g, g, 1))
        self.reduce_map = nn.Linear(c + g + 3, c)

    def forward(self, partial: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, coarse = self.base_model(partial)  # [B, M, C], [B, M, 3]
        b, m, _ = q.shape
        glob = self.increase_dim(q.transpose(1, 2)).max(dim=-1).values  # [B, G]
        feature = torch.cat([glob.unsqueeze(1).expand(-1, m, -1), q, coarse], dim=-1)  # [B, M, G + C + 3]
        feature = self.reduce_map(feature.reshape(b * m, -1))  # [B*M, C]
        offsets = self.foldingnet(feature).reshape(b, m, 3, -1)  # [B, M, 3, S]
        dense = (offsets + coarse.unsqueeze(-1)).transpose(2, 3).reshape(b, -1, 3)  # [B, M*S, 3]
        sparse = fps(partial, min(m, partial.shape[1]))  # [B, min(M, N), 3]
        return torch.cat([coarse, sparse], dim=1), torch.cat([dense, partial], dim=1)
