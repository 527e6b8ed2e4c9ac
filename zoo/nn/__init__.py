"""Shared building blocks for recipe models: transformer layers, embeddings, position encodings."""
