"""Shared building blocks for recipe models, one module each (imported directly, so this package stays light):

- :mod:`lavo_zoo.nn.position`: sinusoidal position table
- :mod:`lavo_zoo.nn.transformer`: ``FeedForward``, ``EncoderBlock``/``DecoderBlock``, ``TransformerEncoder``/
  ``TransformerDecoder`` (cached incremental decoding: ``init_cache``/``step``/``DecoderCache.reorder``), and the
  decoder-only ``PreLNDecoderBlock``, around any registry attention
- :mod:`lavo_zoo.nn.losses`: ``chunked_cross_entropy`` and ``label_smoothed_cross_entropy`` (a linear head's loss
  without all N x V logits at once)
- :mod:`lavo_zoo.nn.search`: greedy / sampling / beam search and frame generation over a cached decoder
- :mod:`lavo_zoo.nn.points`: point-cloud geometry (farthest point sampling, kNN, blocked nearest-neighbour distances)
- :mod:`lavo_zoo.nn.tokenizers`: the offline tokenizers (GPT-2 BPE, bytes) of the text recipes
"""
