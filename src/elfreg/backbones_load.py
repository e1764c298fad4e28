"""Loading a backbone: its tokenizer, and its weights from a folder, a hub name or a GGUF file (dequantised once,
cut to the blocks a run needs, and kept in the backbone cache, :mod:`elfreg.backbone_cache`)."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch
from torch import nn

from elfreg.backbone_source import looks_local, missing_package

def check_source(name_or_path: str, gguf_file: str | None, field: str) -> None:
    """A local-looking path that does not exist is a clear error, not a hub lookup that fails later."""
    missing = missing_package(name_or_path, field)
    if missing:
        raise FileNotFoundError(missing)
    if looks_local(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"{field}: model path {path} does not exist")
        if gguf_file is not None and not (path / gguf_file).is_file():
            raise FileNotFoundError(f"{field}: GGUF file {path / gguf_file} does not exist")


def local_gguf(name_or_path: str, gguf_file: str | None) -> Path | None:
    """The GGUF file's path when it is a local file (the cases the backbone cache covers), else None."""
    if gguf_file is None:
        return None
    path = Path(name_or_path).expanduser() / gguf_file
    return path if path.is_file() else None


def load_tokenizer(name_or_path: str, gguf_file: str | None = None, revision: str | None = None,
                   cache: bool = True, cache_dir: str | Path | None = None, local_files_only: bool = False):
    """The tokenizer of a backbone (hub id or local folder, optionally a GGUF file inside it).

    A local GGUF's tokenizer is converted once into the backbone cache (``elfreg.backbone_cache``) and read from it.
    ``local_files_only``: a hub id is read from the local Hugging Face cache only (no network, no retries).
    """
    from transformers import AutoTokenizer

    check_source(name_or_path, gguf_file, "backbones.encoder")
    gguf = local_gguf(name_or_path, gguf_file) if cache else None
    if gguf is not None:
        from elfreg.backbone_cache import cache_root, get_or_build

        digest = gguf_hash(gguf)

        def build(tmp: Path) -> dict:
            AutoTokenizer.from_pretrained(name_or_path, gguf_file=gguf_file).save_pretrained(tmp)
            return {"source": str(gguf), "kind": "tokenizer"}

        folder, _ = get_or_build(cache_root(cache_dir), _tokenizer_entry(digest), digest, build)
        return AutoTokenizer.from_pretrained(folder)
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    return AutoTokenizer.from_pretrained(name_or_path, revision=revision, local_files_only=local_files_only, **kwargs)


def _tokenizer_entry(digest: str) -> str:
    return f"{digest[:32]}-tokenizer"


def _convert_tokenizer(name_or_path: str, gguf_file: str, cache_dir: str | None) -> None:
    """In a child process: fill the backbone cache's tokenizer entry of a local GGUF (``Backbones``)."""
    load_tokenizer(name_or_path, gguf_file, cache_dir=cache_dir)


def convert_tokenizer_aside(name_or_path: str, gguf_file: str | None, cache_dir: str | Path | None = None):
    """A future converting a local GGUF's tokenizer into the backbone cache in a child process, or None when there
    is nothing to convert (not a local GGUF, or its entry exists).

    On a fresh machine the tokenizer's conversion (~6 s, Python) and the model's (~13 s) each keep one core busy:
    side by side they take the longer of the two. The cache's entries are built race-free, so the parent may
    also build it (e.g. if the child failed).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from elfreg.backbone_cache import cache_root, check_entry

    gguf = local_gguf(name_or_path, gguf_file) if gguf_file else None
    if gguf is None:
        return None
    digest = gguf_hash(gguf)
    if check_entry(cache_root(cache_dir) / _tokenizer_entry(digest), digest):
        return None
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    future = pool.submit(_convert_tokenizer, name_or_path, gguf_file, None if cache_dir is None else str(cache_dir))
    pool.shutdown(wait=False)  # the worker ends once the conversion does
    return future


_GGUF_HASHES: dict[tuple, str] = {}


def gguf_hash(path: Path) -> str:
    """The file's hash, computed once per process for an unchanged file (tokenizer and model both need it)."""
    from elfreg.backbone_cache import file_hash

    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _GGUF_HASHES:
        _GGUF_HASHES[key] = file_hash(path)
    return _GGUF_HASHES[key]


def load_gguf_model(name_or_path: str, gguf_file: str, keep: int | None, cache_dir: str | Path | None = None):
    """(model, total blocks) of a local GGUF backbone cut to its first ``keep`` blocks (None: all), via the cache.

    The first call de-quantises the GGUF through transformers and saves the cut model (fp32 safetensors + a config
    with ``keep`` blocks) as a cache entry keyed by the file's hash and ``keep``; later calls read that entry,
    which gives the same weights bit for bit.
    """
    from transformers import AutoModel

    from elfreg.backbone_cache import cache_root, get_or_build

    gguf = local_gguf(name_or_path, gguf_file)
    if gguf is None:
        raise FileNotFoundError(f"GGUF file {Path(name_or_path) / gguf_file} does not exist")
    digest = gguf_hash(gguf)

    def build(tmp: Path) -> dict:
        with _shared_gguf_name_maps():
            model = AutoModel.from_pretrained(name_or_path, gguf_file=gguf_file)
        total = num_blocks(model.config)
        if keep is not None and keep < total:
            parent, attr = find_layer_list(model)
            setattr(parent, attr, getattr(parent, attr)[:keep])
            _set_num_blocks(model.config, keep)
        _save_plain(model, tmp / "model")
        return {"source": str(gguf), "kind": "model", "total_layers": total, "kept_layers": keep or total,
                "dtype": str(next(model.parameters()).dtype).removeprefix("torch.")}

    name = f"{digest[:32]}-{'all' if keep is None else f'blocks{keep}'}"
    folder, meta = get_or_build(cache_root(cache_dir), name, digest, build)
    model = AutoModel.from_pretrained(folder / "model", dtype=getattr(torch, meta["dtype"]))
    return model, meta["total_layers"]


@contextlib.contextmanager
def _shared_gguf_name_maps():
    """While de-quantising a GGUF: one ``gguf.get_tensor_name_map(arch, blocks)`` per (arch, blocks).

    transformers builds gguf's tensor-name table once per module of the model (395 times for SmolLM2-135M), a third
    of the conversion's time; the table is a pure function of its arguments and only read. Measured on the demo's
    GGUF (2 cores): 13.4 vs 17.8-20.7 s, with the same weights byte for byte (compared once with cmp; tests/test_backbones.py checks the sharing).
    """
    import gguf

    original = getattr(gguf, "get_tensor_name_map", None)
    if original is None:  # another gguf: nothing to share
        yield
        return
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original)
    try:
        yield
    finally:
        gguf.get_tensor_name_map = original


def _save_plain(model: nn.Module, folder: Path) -> None:
    """The de-quantised weights (safetensors) and a config without the GGUF quantisation note, loadable by
    ``AutoModel.from_pretrained(folder)`` (transformers refuses ``save_pretrained`` on a model read from GGUF)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    seen: dict[int, str] = {}
    weights = {}
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:  # tied tensors are stored once; loading ties them again
            continue
        seen[v.data_ptr()] = k
        weights[k] = v.detach().contiguous()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def num_blocks(config) -> int | None:
    """The number of transformer blocks a Hugging Face config declares (None when it names none)."""
    return getattr(config, "num_hidden_layers", None) or getattr(config, "num_layers", None)


def _set_num_blocks(config, n: int) -> None:
    """A config for the cut model: n blocks (and per-layer lists cut alike), so loading it builds exactly those."""
    for attr in ("num_hidden_layers", "num_layers"):
        if getattr(config, attr, None):
            setattr(config, attr, n)
    for attr in ("layer_types",):
        if isinstance(getattr(config, attr, None), list):
            setattr(config, attr, getattr(config, attr)[:n])


def find_layer_list(model: nn.Module) -> tuple[nn.Module, str]:
    """(parent module, attribute) of the ModuleList of transformer blocks."""
    n = getattr(model.config, "num_hidden_layers", None) or getattr(model.config, "num_layers", None)
    candidates = []
    for name, module in model.named_modules():
        for attr, child in module.named_children():
            if isinstance(child, nn.ModuleList) and len(child) > 0 and (n is None or len(child) == n):
                candidates.append((module, attr, f"{name}.{attr}" if name else attr))
    if not candidates:
        raise ValueError(f"cannot find the block list of {type(model).__name__}")
    return candidates[0][0], candidates[0][1]
