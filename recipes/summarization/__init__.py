"""Multi-document summarization: the paper's 6+6 Transformer on Multi-News with any attention at each site, ROUGE."""
