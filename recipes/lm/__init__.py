"""Language modelling: the paper's GPT-2 decoder (fairseq ``transformer_lm_gpt``) on PG-19 with any attention."""
