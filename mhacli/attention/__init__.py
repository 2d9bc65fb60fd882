"""The article's multi-head attention: tokens, X, the steps, the trace of one run (numpy and the standard library)."""
