"""One module per Triton backend; each defines a Step subclass."""
