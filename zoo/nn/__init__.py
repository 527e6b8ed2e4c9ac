"""Shared building blocks for recipe models, one module each (imported directly, so this package stays light):

- :mod:`lavo_zoo.nn.position`: sinusoidal position table
- :mod:`lavo_zoo.nn.transformer`: ``FeedForward``, ``PreLNDecoderBlock`` around any registry attention
- :mod:`lavo_zoo.nn.losses`: ``chunked_cross_entropy`` (a linear head's loss without all N x V logits at once)
"""
