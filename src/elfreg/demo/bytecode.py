"""Compile the bytecode of the modules ``elfreg demo`` runs, once, into the environment's ``__pycache__`` folders.

``make setup-demo`` installs with ``pip --no-compile`` and then runs ``python -m elfreg.demo.bytecode``: pip compiles
every module of every package (torch, transformers, scipy, sympy... about 13,700 files), while the demo imports about
2,800 of them. Measured on the 2-core machine the demo is tuned on, fresh venv, warm wheel cache: set-up 55 s with
pip's compilation against 26 s without it plus 12 s here. Without any bytecode each of the demo's processes (the
main one and its lanes) would compile what it imports again on a machine that sets PYTHONDONTWRITEBYTECODE (the
quick demo took 35 s instead of 19 s), so this step writes the files even there: they belong to the project's venv.

A module missing from ``MODULES`` costs only time: Python compiles it when the demo imports it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time

# What the demo's main process and its lane workers import, found by running the demo without bytecode and listing
# the __pycache__ files it wrote (torch, transformers' GGUF and Llama code, the report's scipy and matplotlib).
MODULES = (
    "elfreg.cli", "elfreg.demo.cli", "elfreg.demo.runner", "elfreg.demo.lanes", "elfreg.demo.report",
    "elfreg.machine", "elfreg.pretrained", "elfreg.backbones", "elfreg.backbone_cache", "elfreg.train.trainer",
    "elfreg.sampling", "transformers.models.llama.modeling_llama", "transformers.modeling_gguf_pytorch_utils",
    "transformers.integrations.ggml", "transformers.models.auto.tokenization_auto",
    "transformers.models.auto.modeling_auto", "gguf", "tokenizers", "torch.distributed", "torch.profiler",
    "safetensors.torch", "xxhash", "scipy.stats", "matplotlib.pyplot", "matplotlib.backends.backend_agg",
    "PIL.PngImagePlugin",
)


# Imported at the same time by a second process (they need neither torch nor transformers to import): on two cores
# the two processes share the compilation, ~4 s of the 17-21 s here. Whichever reaches a module first writes its
# bytecode; importlib writes the files atomically, so a module both compile is only compiled twice.
ASIDE = ("sympy", "scipy.stats", "matplotlib.pyplot", "matplotlib.backends.backend_agg", "PIL.PngImagePlugin")


def _import_all(names: tuple[str, ...]) -> None:
    sys.dont_write_bytecode = False  # the venv is the project's: write its caches even under PYTHONDONTWRITEBYTECODE
    for name in names:
        importlib.import_module(name)


def main(argv: list[str] | None = None) -> int:
    """Import every module of ``MODULES`` (and of ``ASIDE`` in a second process) with bytecode writing on."""
    if (sys.argv[1:] if argv is None else argv) == ["--aside"]:
        _import_all(ASIDE)
        return 0
    t = time.perf_counter()
    aside = subprocess.Popen([sys.executable, "-m", "elfreg.demo.bytecode", "--aside"]) if ASIDE else None
    _import_all(MODULES)
    if aside is not None and aside.wait() != 0:
        print(f"elfreg: importing {ASIDE} failed (exit status {aside.returncode})", file=sys.stderr)
        return 1
    print(f"elfreg: compiled the demo's modules in {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
