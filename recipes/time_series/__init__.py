"""Time-series forecasting: Informer with registry attentions (LAVO cross attention in the paper's configs)."""
