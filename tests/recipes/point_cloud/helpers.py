"""Helpers for the point_cloud recipe tests: the overrides that make the tiny config tinier."""

SMALL = ["data.builtin_size=1", "data.gt_points=1024", "data.train_gt_sample=0", "data.input_points=128",
         "model.proxy_points=[64,32]", "model.num_query=32", "model.num_pred=128", "model.embed_dim=32",
         "model.ffn_dim=64", "model.global_dim=64", "model.fold_hidden=16", "model.attention.cross.num_bases=8"]
