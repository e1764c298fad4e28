"""elfreg: ELF-REG, a fully continuous diffusion language model for math reasoning and code."""

__version__ = "0.1.0"
