"""Recall diagnostics: multi-query associative recall (Zoology), selective copying (Mamba) and induction heads with a
small decoder over any causal attention; accuracy per task and per key-to-query distance."""
