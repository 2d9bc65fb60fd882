"""The numerical core: numpy and the standard library only. It never prints, plots, reads files
or touches global random state; :func:`mhacli.core.trace.run_tokens` returns one frozen trace."""
