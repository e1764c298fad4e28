"""The embedded default of ``elfreg demo``: a built-in synthetic reasoning task sized for a CPU."""
