"""Matmul FLOP counts of ELF / ELF-REG (student, frozen backbones, training step, sampling), MFU, and what the paper's
GPU-hours predict for each preset (seeds 002 §4.3, Tables 8-9).

    python benchmarks/flops.py [--peak-tflops 790]    # prints the expectation table of docs/performance.md

Counting convention (the usual one for model FLOPs utilisation): only matrix products (linear layers, attention's
two products), 2 FLOPs per multiply-add; norms, softmax, RoPE and element-wise work are not counted. A gradient
pass counts 3x its forward (forward + the two backward products); passes without gradients count once. Attention of
a causal backbone counts the half of the S x S products a causal kernel computes (``causal=True``); torch's own
FLOP counter counts the full square, which ``causal=False`` reproduces (the tests check both against it).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from pathlib import Path

from elfreg.config import ModelConfig, ObjectiveConfig

REPO = Path(__file__).resolve().parents[1]


# -- shapes ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackboneShape:
    """A Qwen3-style decoder's matmul shapes: GQA attention (no biases), SwiGLU MLP, ``layers`` blocks run."""

    name: str
    hidden: int
    intermediate: int
    layers: int  # blocks in the checkpoint (the loader keeps only those up to the deepest layer read)
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int  # embedding rows: a lookup, no FLOPs

    @classmethod
    def from_config(cls, config, name: str = "") -> "BackboneShape":
        """From a transformers config (Qwen3Config and alike)."""
        heads = config.num_attention_heads
        return cls(name or getattr(config, "_name_or_path", "") or config.model_type, config.hidden_size,
                   config.intermediate_size, config.num_hidden_layers, heads,
                   getattr(config, "num_key_value_heads", None) or heads,
                   getattr(config, "head_dim", None) or config.hidden_size // heads, config.vocab_size)

    def config_kwargs(self) -> dict:
        """Keyword arguments of transformers.Qwen3Config for this shape (all blocks)."""
        return dict(hidden_size=self.hidden, intermediate_size=self.intermediate, num_hidden_layers=self.layers,
                    num_attention_heads=self.heads, num_key_value_heads=self.kv_heads, head_dim=self.head_dim,
                    vocab_size=self.vocab)


# The presets' frozen models (configs/*/*.yaml: encoder Qwen3-0.6B-Base, teacher Qwen3-1.7B-Base), from each model's
# config.json on the Hugging Face hub (Qwen/Qwen3-0.6B-Base, Qwen/Qwen3-1.7B-Base).
QWEN3_SHAPES = {
    "Qwen/Qwen3-0.6B-Base": BackboneShape("Qwen/Qwen3-0.6B-Base", 1024, 3072, 28, 16, 8, 128, 151_936),
    "Qwen/Qwen3-1.7B-Base": BackboneShape("Qwen/Qwen3-1.7B-Base", 2048, 6144, 28, 16, 8, 128, 151_936),
}
QWEN3_TOKENIZER_LEN = 151_669  # len(tokenizer) of both: the student's vocabulary (ModelConfig.vocab_size)


# -- forward passes -------------------------------------------------------------------------------------------------
def backbone_forward_flops(shape: BackboneShape, rows: float, seq: int, layers: int, causal: bool = True) -> float:
    """One forward of ``rows`` sequences of ``seq`` tokens through the first ``layers`` blocks (no LM head)."""
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    per_token = 2 * h * q + 2 * 2 * h * kv + 2 * q * h + 3 * 2 * h * shape.intermediate
    attn = 2 * 2 * seq * seq * q  # q k^T and (softmax) v, per row
    if causal:
        attn = attn * (seq + 1) / (2 * seq)
    return rows * layers * (seq * per_token + attn)


def student_forward_flops(m: ModelConfig, rows: float, length: int | None = None, reg: bool | None = None,
                          decoder_rows: float = 0.0) -> float:
    """One ElfStudent.forward call on ``rows`` rows of ``length`` positions (default max_len).

    reg: whether the REG token is fed (default: the model has one). decoder_rows: rows whose vocab head runs
    (``decoder`` True for all rows = rows; a mask = its count). The folded input map (bottleneck x self_cond_proj,
    computed once per call) is included.
    """
    length = m.max_len if length is None else length
    reg = (m.extra_token == "reg") if reg is None else reg
    extra = int(reg or m.extra_token == "olt")
    d, h, b, f = m.feature_dim, m.width, m.bottleneck_dim, m.mlp_hidden
    seq = m.num_prefix + extra + length
    per_call = 2 * b * d * (2 * d)  # bottleneck @ self_cond_proj.weight (bottleneck @ bias: a matrix-vector product)
    per_row = length * (2 * 2 * d * b + 2 * b * h)  # [z | q] through the folded map, then bottleneck -> width
    per_row += 2 * (2 * 256 * h + 2 * h * h)  # t and w embedders (256 sinusoidal features, 2-layer MLP)
    if reg:
        per_row += 2 * 2 * m.reg_dim * d + (2 * 2 * d * b + 2 * b * h) + 2 * d * m.reg_dim  # reg_in x2, path, reg_out
    block = seq * (2 * h * 3 * h + 2 * h * h + 2 * h * 2 * f + 2 * f * h) + 2 * 2 * seq * seq * h
    per_row += m.depth * block
    per_row += (length + int(reg)) * 2 * h * d  # final_linear on the text (and REG token) positions; not OLT's
    head = length * (2 * h * d + 2 * d * m.head_size)
    return per_call + rows * per_row + decoder_rows * head


def repa_projector_flops(m: ModelConfig, rows: float, tokens: int) -> float:
    """The REPA projector p_phi (3 linear layers) on ``tokens`` positions of ``rows`` rows."""
    r = m.repa_hidden
    return rows * tokens * 2 * (m.width * r + r * r + r * m.teacher_dim)


# -- a training step ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FrozenModels:
    """The frozen encoder (and teacher) run on every canvas in online mode, and the layers each one runs."""

    encoder: BackboneShape
    encoder_layers: int
    teacher: BackboneShape | None = None
    teacher_layers: int = 0


def train_step_flops(m: ModelConfig, obj: ObjectiveConfig, rows: float, frozen: FrozenModels | None = None,
                     length: int | None = None) -> dict[str, float]:
    """Expected model FLOPs of one training step on ``rows`` canvases (elfreg.objective.elf_reg_loss).

    Over the draws: a share decoder_prob of rows are decoder rows (vocab head on), self_cond_prob of the others run the
    two gradient-free self-conditioning passes; the gradient pass (3x) runs every row, plus the REPA projector on the
    text (and REG/OLT token) positions when REPA is on. ``frozen``: the backbones' forwards (online features).
    """
    length = m.max_len if length is None else length
    p_dec = obj.decoder_prob
    p_sc = obj.self_cond_prob * (1.0 - p_dec)
    reg_fed = m.extra_token == "reg"
    grad = student_forward_flops(m, rows, length, decoder_rows=p_dec * rows)
    if obj.use_repa:
        extra = int(obj.repa_on_extra_token and m.extra_token != "none")
        grad += repa_projector_flops(m, rows, length + extra)
    out = {"student_grad_pass": 3 * grad,
           "self_conditioning": 2 * student_forward_flops(m, p_sc * rows, length, reg=reg_fed) if p_sc else 0.0}
    out["encoder"] = backbone_forward_flops(frozen.encoder, rows, length, frozen.encoder_layers) if frozen else 0.0
    out["teacher"] = (backbone_forward_flops(frozen.teacher, rows, length, frozen.teacher_layers)
                      if frozen and frozen.teacher is not None else 0.0)
    out["total"] = sum(out.values())
    return out


def muon_flops(shapes: list[tuple[int, int]], ns_steps: int = 5) -> float:
    """Newton-Schulz FLOPs of one Muon step over 2-D matrices (per step, whatever the batch; not model FLOPs)."""
    total = 0.0
    for a, b in shapes:
        m, n = min(a, b), max(a, b)
        total += ns_steps * (2 * m * m * n + 2 * m * m * m + 2 * m * m * n)  # X X^T, S S, (bS + cSS) X
    return total


def sampling_flops(m: ModelConfig, rows: float, nfe: int, encoder: BackboneShape | None = None,
                   encoder_layers: int = 0, prompt_len: int = 0) -> dict[str, float]:
    """FLOPs of generating ``rows`` samples with ``nfe`` network calls (nfe - 1 denoiser calls + 1 decoder call),
    plus the frozen encoder's forward over the prompt (the end-to-end cost)."""
    out = {"denoiser": (nfe - 1) * student_forward_flops(m, rows),
           "decoder": student_forward_flops(m, rows, decoder_rows=rows)}
    out["encoder"] = backbone_forward_flops(encoder, rows, prompt_len, encoder_layers) if encoder else 0.0
    out["total"] = sum(out.values())
    return out


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the device's peak."""
    if seconds <= 0 or peak_flops_per_s <= 0:
        raise ValueError(f"mfu: need positive seconds and peak, got {seconds} and {peak_flops_per_s}")
    return flops / seconds / peak_flops_per_s


# -- the presets and the paper's cost figures -----------------------------------------------------------------------
PRESETS = ("elf-b", "elf-reg-b", "elf-l", "elf-reg-l")


def preset_config(preset: str, task: str = "gsm8k"):
    """The RunConfig of configs/<task>/<preset>.yaml with the Qwen3 widths and vocabulary filled in."""
    from elfreg.train.config import load_run_config

    cfg = load_run_config(REPO / "configs" / task / f"{preset}.yaml")
    b = cfg.backbones
    enc = QWEN3_SHAPES[b.encoder]
    teacher = QWEN3_SHAPES[b.teacher] if b.teacher else None
    width_t = teacher.hidden if teacher else cfg.model.teacher_dim
    cfg.model = replace(cfg.model, feature_dim=enc.hidden, teacher_dim=width_t, reg_dim=width_t,
                        vocab_size=QWEN3_TOKENIZER_LEN)
    return cfg


def preset_frozen(cfg) -> FrozenModels:
    """The frozen models a preset runs online and the blocks of each (the deepest layer read)."""
    b = cfg.backbones
    teacher = QWEN3_SHAPES[b.teacher] if b.teacher else None
    return FrozenModels(QWEN3_SHAPES[b.encoder], b.encoder_layer, teacher,
                        max(b.teacher_repa_layer, b.teacher_reg_layer) if teacher else 0)


@dataclass(frozen=True)
class PaperCost:
    """H200 GPU-hours the paper reports for one training run."""

    preset: str
    task: str  # the data set; its rows per epoch come from configs/<task>/<preset>.yaml (paper section)
    epochs: float | None  # None: the paper gives the hours but not the epochs
    gpu_hours: float
    init: tuple[str, float] | None = None  # (task, epochs) of the run it continues (MATH: 7.5 GSM8K epochs)
    max_epochs: float | None = None  # when epochs is None: the epochs the run trained in all (an upper bound)
    source: str = ""


# seeds 002 §4.3: Table 8 (p. 21) fixed budgets, Table 9 (p. 21) to a matched GSM8K accuracy. The code and MATH models
# are the L students (the paper's code and MATH results are L rows). B's epochs to the threshold are not given; its
# runs trained 12 epochs (ELF-REG) and 12 + 6 (the ELF baseline: "the GSM8K baselines trained 6 and 3 epochs more",
# seeds 002 §4.2 under Table 2).
PAPER_COSTS = (
    PaperCost("elf-l", "code", 12, 317.3, source="Table 8 (code, 12 epochs)"),
    PaperCost("elf-reg-l", "code", 12, 407.9, source="Table 8 (code, 12 epochs)"),
    PaperCost("elf-l", "math", 8, 449.6, ("gsm8k", 7.5), source="Table 8 (MATH, with its 7.5 GSM8K epochs)"),
    PaperCost("elf-reg-l", "math", 8, 563.1, ("gsm8k", 7.5), source="Table 8 (MATH, with its 7.5 GSM8K epochs)"),
    PaperCost("elf-l", "gsm8k", 14, 324.7, source="Table 9 (GSM8K-L to 51.48 %)"),
    PaperCost("elf-reg-l", "gsm8k", 8, 222.6, source="Table 9 (GSM8K-L to 51.48 %)"),
    PaperCost("elf-b", "gsm8k", None, 151.8, max_epochs=18, source="Table 9 (GSM8K-B to 36.85 %)"),
    PaperCost("elf-reg-b", "gsm8k", None, 130.4, max_epochs=12, source="Table 9 (GSM8K-B to 36.85 %)"),
)


def paper_rows(task: str, preset: str = "elf-reg-l") -> int:
    """Rows per epoch of a task (configs/<task>/<preset>.yaml, paper section)."""
    return preset_config(preset, task).paper.rows


def gpu_seconds_per_row(cost: PaperCost) -> float | None:
    """H200 GPU-seconds per canvas (one row of one epoch) of a paper run; None when its epochs are not given.

    Every canvas is 1024 positions whatever the task, so the cost of a step is the same per row across tasks.
    """
    if cost.epochs is None:
        return None
    rows = cost.epochs * paper_rows(cost.task, cost.preset)
    if cost.init is not None:
        rows += cost.init[1] * paper_rows(cost.init[0], cost.preset)
    return cost.gpu_hours * 3600 / rows


def paper_ratio(task: str) -> float:
    """ELF-REG-L / ELF-L GPU-seconds per canvas in the paper's runs on ``task`` (Table 8 code: 1.29)."""
    per = {c.preset: gpu_seconds_per_row(c) for c in PAPER_COSTS if c.task == task and c.preset.endswith("-l")}
    return per["elf-reg-l"] / per["elf-l"]


def expectations(peak_flops_per_s: float | None = None, gpus: int = 8, task: str = "gsm8k") -> list[dict]:
    """Per preset: FLOPs per canvas (online and cached), the paper's GPU-seconds per canvas, the step time and the
    time of the preset's own GSM8K run (its paper epochs: 12 for ELF-REG, 18 / 15 for the ELF baselines) on ``gpus``
    GPUs the paper's figures predict, and the paper's implied MFU.

    L presets: the mean of their paper runs' GPU-seconds per row. B presets (Table 9 gives hours, not epochs): the
    larger of (a) the L figure of the same variant scaled by the FLOP ratio B / L, which assumes L's MFU (a smaller
    model rarely reaches it) and (b) the least cost per canvas Table 9's hours allow given the epochs the run
    trained in all (reaching the threshold later than its last epoch is impossible); and the epochs to Table 9's
    threshold that this implies.
    """
    per_row: dict[str, list[float]] = {}
    for c in PAPER_COSTS:
        s = gpu_seconds_per_row(c)
        if s is not None:
            per_row.setdefault(c.preset, []).append(s)
    flops = {}
    for p in PRESETS:
        cfg = preset_config(p, task)
        online = train_step_flops(cfg.model, cfg.objective, 1, preset_frozen(cfg))["total"]
        cached = train_step_flops(cfg.model, cfg.objective, 1)["total"]
        flops[p] = (cfg, online, cached)
    rows_out = []
    for p in PRESETS:
        cfg, online, cached = flops[p]
        paper = cfg.paper
        row = {"preset": p, "flops_per_row_online": online, "flops_per_row_cached": cached,
               "spread": _spread(per_row.get(p))}
        if p in per_row:
            sec = sum(per_row[p]) / len(per_row[p])
            row["basis"] = f"paper, mean of {len(per_row[p])} runs"
        else:
            big = p.replace("-b", "-l")
            ratio = online / flops[big][1]
            scaled = sum(per_row[big]) / len(per_row[big]) * ratio
            t9 = next(c for c in PAPER_COSTS if c.preset == p and c.epochs is None)
            bound = t9.gpu_hours * 3600 / (t9.max_epochs * paper.rows)
            sec = max(scaled, bound)
            row["basis"] = (f"{big} x FLOP ratio {ratio:.3f}" if scaled >= bound else
                            f"Table 9 hours over at most {t9.max_epochs:g} epochs (FLOP-scaled {big}: {scaled:.4f})")
            row["table9_epochs_implied"] = t9.gpu_hours * 3600 / (sec * paper.rows)
        steps = math.ceil(paper.epochs * paper.rows / paper.global_batch)
        row.update(gpu_seconds_per_row=sec, step_seconds=sec * paper.global_batch / gpus,
                   per_gpu_batch=paper.global_batch / gpus, epochs=paper.epochs, steps_run=steps,
                   hours_run=steps * sec * paper.global_batch / gpus / 3600, gpus=gpus)
        if peak_flops_per_s:
            row["paper_mfu"] = mfu(online, sec, peak_flops_per_s)
        rows_out.append(row)
    return rows_out


def _spread(values: list[float] | None) -> float | None:
    """(max - min) / mean of a preset's per-row figures across paper runs (how well one rate explains them)."""
    if not values or len(values) < 2:
        return None
    return (max(values) - min(values)) / (sum(values) / len(values))


def expectation_markdown(peak_flops_per_s: float | None = None, gpus: int = 8) -> list[str]:
    """The expectation table (docs/performance.md) as markdown lines."""
    rows = expectations(peak_flops_per_s, gpus)
    head = ("| preset | TFLOP / canvas online (cached) | paper GPU-s / canvas | basis | step on "
            f"{gpus} GPUs (batch {rows[0]['per_gpu_batch']:g} / GPU) | the preset's GSM8K run on {gpus} GPUs |")
    out = [head + (" paper MFU |" if peak_flops_per_s else ""), "|" + " --- |" * (6 + bool(peak_flops_per_s))]
    for r in rows:
        spread = f", spread {100 * r['spread']:.1f} %" if r["spread"] is not None else ""
        line = (f"| {r['preset']} | {r['flops_per_row_online'] / 1e12:.2f} ({r['flops_per_row_cached'] / 1e12:.2f}) "
                f"| {r['gpu_seconds_per_row']:.4f} | {r['basis']}{spread} | {r['step_seconds']:.2f} s "
                f"| {r['epochs']:g} epochs: {r['hours_run']:.1f} h ({r['steps_run']:,} steps) |")
        if peak_flops_per_s:
            line += f" {100 * r['paper_mfu']:.1f} % |"
        out.append(line)
    for r in rows:
        if "table9_epochs_implied" in r:
            out.append(f"\n{r['preset']}: at this rate Table 9's GPU-hours reach 36.85 % after "
                       f"{r['table9_epochs_implied']:.1f} GSM8K epochs.")
    return out


def breakdown_markdown(task: str = "gsm8k") -> list[str]:
    """Per preset: TFLOP per canvas of each part of an online training step, and of the fp32 vocab head alone."""
    out = ["| preset | student gradient pass (3x) | self-conditioning passes | encoder | teacher | total "
           "| of it: vocab head (fp32) |", "|" + " --- |" * 7]
    for p in PRESETS:
        cfg = preset_config(p, task)
        m, obj = cfg.model, cfg.objective
        parts = train_step_flops(m, obj, 1, preset_frozen(cfg))
        head = 3 * obj.decoder_prob * (student_forward_flops(m, 1, decoder_rows=1) - student_forward_flops(m, 1))
        out.append(f"| {p} | " + " | ".join(f"{parts[k] / 1e12:.3f}" for k in
                                             ("student_grad_pass", "self_conditioning", "encoder", "teacher", "total"))
                   + f" | {head / 1e12:.3f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="device peak (bf16 TFLOP/s) for the paper's implied MFU; gpu_check.py measures it")
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    print("\n".join(expectation_markdown(peak, args.gpus)))
    print()
    print("\n".join(breakdown_markdown()))


if __name__ == "__main__":
    main()
