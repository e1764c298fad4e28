"""ELF-REG training step vs ELF training step, and cut-backbone vs full-backbone feature extraction.

Prints ratios measured in one run (interleaved repeats, medians), so machine load affects both sides alike.
The paper's GPU-hours at equal epochs imply ELF-REG / ELF = 407.9 / 317.3 = 1.29x; the goal here is <= 1.15x.

    python benchmarks/bench_step.py [--batch 16] [--len 64] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from elfreg.backbones import Backbones, FrozenBackbone  # noqa: E402
from elfreg.config import BackboneConfig, ObjectiveConfig, model_preset  # noqa: E402
from elfreg.model.student import ElfStudent  # noqa: E402
from elfreg.objective import TrainBatch, draw, elf_reg_loss  # noqa: E402
from elfreg.precision import resolve, student_workload  # noqa: E402


def backbone_source() -> tuple[str, str | None, str]:
    """SmolLM2-135M (GGUF, 30 blocks) when installed, else a random 28-block Qwen3 built on the fly."""
    from helpers import make_tiny_qwen3, smollm2_gguf

    found = smollm2_gguf()
    if found:
        return found[0], found[1], "SmolLM2-135M-Instruct (30 blocks)"
    import tempfile

    folder = make_tiny_qwen3(Path(tempfile.mkdtemp()) / "qwen3", layers=28, hidden=128)
    return str(folder), None, "random Qwen3, 28 blocks x 128"


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"),
                    help="the student's arithmetic, as train.precision (auto: measured, elfreg.precision)")
    args = ap.parse_args()
    torch.manual_seed(0)
    folder, gguf, label = backbone_source()
    enc_layer, teacher_layer = 6, 12
    bcfg = BackboneConfig(encoder=folder, encoder_gguf_file=gguf, encoder_layer=enc_layer, teacher=folder,
                          teacher_gguf_file=gguf, teacher_repa_layer=teacher_layer, teacher_reg_layer=teacher_layer)
    reg_bb = Backbones(bcfg)
    elf_bb = Backbones(bcfg, need_teacher=False)
    full = FrozenBackbone(folder, [-1], gguf, dtype=bcfg.dtype)
    d = reg_bb.feature_dim
    vocab = len(reg_bb.tokenizer)
    b, length = args.batch, args.len
    tokens = torch.randint(0, vocab, (b, length))
    src = torch.full((b,), length // 2)
    pm = torch.zeros(b, length, dtype=torch.bool)
    pm[:, : length // 4] = True
    cm = torch.zeros_like(pm)
    cm[:, length // 4 : length // 2 + 1] = True

    setups, precisions = {}, {}
    for name, preset_kw, obj_kw, bb in (
        ("elf", dict(extra_token="none", repa=False), dict(use_repa=False, use_reg=False), elf_bb),
        ("elf-reg", dict(extra_token="reg", repa=True), dict(), reg_bb),
    ):
        mcfg = model_preset("tiny", feature_dim=d, reg_dim=d, teacher_dim=d, vocab_size=vocab, max_len=length,
                            max_prompt_len=length // 4, **preset_kw)
        student = ElfStudent(mcfg)
        prec = resolve(args.precision, "cpu", student_workload(mcfg, b, backward=True), "--precision")
        precisions[name] = prec.describe()
        opt = torch.optim.AdamW(student.parameters(), lr=1e-4)
        ocfg = ObjectiveConfig(**obj_kw)
        gens = [torch.Generator().manual_seed(i) for i in range(b)]
        draws = draw(ocfg, gens, length, d, d if mcfg.extra_token == "reg" else None)

        def student_step(student=student, opt=opt, ocfg=ocfg, draws=draws, bb=bb, feats=None, prec=prec):
            f = feats or bb.canvas_features(tokens, src)
            batch = TrainBatch(x=f.x, tokens=tokens, prompt_mask=pm, content_mask=cm, teacher=f.teacher, reg=f.reg,
                               teacher_at_source=f.teacher_at_source)
            with prec.autocast("cpu"):
                loss = elf_reg_loss(student, batch, draws, ocfg).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        cached = bb.canvas_features(tokens, src)
        setups[name] = (lambda s=student_step: s(), lambda s=student_step, c=cached: s(feats=c))

    # Interleave so that load from other processes hits every variant alike.
    times = {k: [] for k in ("elf_full", "reg_full", "elf_student", "reg_student", "cut", "uncut")}
    for fn in list(setups["elf"]) + list(setups["elf-reg"]):
        fn()  # warm-up
    for _ in range(args.repeats):
        times["elf_full"] += timed(setups["elf"][0], 1)
        times["reg_full"] += timed(setups["elf-reg"][0], 1)
        times["elf_student"] += timed(setups["elf"][1], 1)
        times["reg_student"] += timed(setups["elf-reg"][1], 1)
        times["cut"] += timed(lambda: elf_bb.encode(tokens), 1)
        times["uncut"] += timed(lambda: full.hidden_states(tokens), 1)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"backbone: {label}; encoder layer {enc_layer}, teacher layers {teacher_layer}; "
          f"batch {b} x {length} tokens; tiny student; {args.repeats} interleaved repeats, medians; "
          f"threads {torch.get_num_threads()}; backbone dtype {reg_bb.encoder.precision.describe()}; student "
          f"precision {precisions['elf-reg']}")
    print(f"training step incl. frozen features : ELF {med['elf_full'] * 1e3:8.1f} ms   ELF-REG "
          f"{med['reg_full'] * 1e3:8.1f} ms   ratio {med['reg_full'] / med['elf_full']:.3f}x  (paper 1.29x, goal <= 1.15x)")
    print(f"training step, cached features      : ELF {med['elf_student'] * 1e3:8.1f} ms   ELF-REG "
          f"{med['reg_student'] * 1e3:8.1f} ms   ratio {med['reg_student'] / med['elf_student']:.3f}x")
    print(f"feature extraction, layer {enc_layer} only : {med['cut'] * 1e3:8.1f} ms   full model "
          f"{med['uncut'] * 1e3:8.1f} ms   ratio full/cut {med['uncut'] / med['cut']:.2f}x "
          f"(kept {elf_bb.encoder.kept_layers} of {full.total_layers} blocks)")


if __name__ == "__main__":
    main()
