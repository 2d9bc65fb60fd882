"""The renderers: the only code that imports rich or matplotlib. They read a trace, never recompute it."""
