"""`elfreg data ...`: decontaminate training files; canvas-stats for a tokenizer; build the MMLU training file
(spec §2, §7)."""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from elfreg.bounds import COUNT, Range
from elfreg.cliargs import input_file, input_path, model_ref, output_file
from elfreg.config import MODEL_RANGES
from elfreg.data.canvas import CanvasConfig, special_ids
from elfreg.data.readers import ReadStats, iter_examples
from elfreg.data.sources import SourceSpec, preset
from elfreg.tasks.testsets import default_data_dir


# Words per compared n-gram (the paper's 8; past a benchmark question's length nothing can match) and the Jaccard
# similarity at which a row is dropped (0 would drop every row)
NGRAM = Range(1, 256, integer=True)
JACCARD = Range(0, 1, lo_open=True)


def _parse_columns(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        role, sep, column = part.partition("=")
        if not sep or not role.strip() or not column.strip():
            raise argparse.ArgumentTypeError(f"--columns: expected role=column[,role=column...], got {part!r}")
        out[role.strip()] = column.strip()
    return out


def _specs(args: argparse.Namespace) -> list[SourceSpec]:
    specs = []
    for i, path in enumerate(args.input):
        name = f"input{i}"
        if args.preset:
            spec = preset(args.preset, path=path, name=name, on_bad_row=args.on_bad_row)
        else:
            spec = SourceSpec(name=name, task=args.task, path=path, columns=args.columns,
                              on_bad_row=args.on_bad_row)
        if spec.task != args.task:
            raise ValueError(f"--preset {args.preset} is a {spec.task} set, but --task is {args.task}")
        specs.append(spec)
    return specs


def _rows(specs: list[SourceSpec], stats: dict[str, ReadStats]) -> Any:
    for spec in specs:
        stats[spec.name] = ReadStats()
        yield from iter_examples(spec, stats[spec.name])


def cmd_decontaminate(args: argparse.Namespace) -> int:
    """Write the rows that survive decontamination and a JSON report."""
    from elfreg.data.benchmarks import load_code_benchmarks, load_math_benchmarks
    from elfreg.data.decontam import (DecontamReport, decontaminate_code, decontaminate_math,
                                      write_json_atomic, write_jsonl_atomic)
    from elfreg.data.decontam_code import CodeDecontamConfig, CodeMatcher
    from elfreg.data.decontam_math import MathDecontamConfig, MathMatcher

    benchmarks = args.benchmarks or str(default_data_dir())  # the test sets as evaluation reads them
    specs = _specs(args)
    stats: dict[str, ReadStats] = {}
    report = DecontamReport(task=args.task)
    if args.task == "math":
        matcher = MathMatcher(load_math_benchmarks(benchmarks),
                              MathDecontamConfig(ngram=args.ngram, jaccard_threshold=args.jaccard))
        kept = decontaminate_math(lambda: _rows(specs, stats), matcher, report)
    else:
        cmatcher = CodeMatcher(load_code_benchmarks(benchmarks),
                               CodeDecontamConfig(ngram=args.ngram, jaccard_threshold=args.jaccard,
                                                  ast_min_nodes=args.ast_min_nodes))
        kept = decontaminate_code(_rows(specs, stats), cmatcher, report)
    write_jsonl_atomic(args.output, kept)
    out = report.as_dict()
    out["inputs"] = {s.path: stats[s.name].as_dict() for s in specs}
    write_json_atomic(args.report, out)
    print(json.dumps({k: out[k] for k in ("rows_in", "rows_kept", "rows_dropped", "by_reason", "by_benchmark",
                                          "groups_dropped")}))
    return 0


def cmd_mmlu_train(args: argparse.Namespace) -> int:
    """Build the MMLU training file and its report (elfreg.data.mmlu)."""
    from elfreg.data.decontam import write_jsonl_atomic
    from elfreg.data.decontam_choice import ChoiceDecontamConfig, ChoiceMatcher, mmlu_test_items
    from elfreg.data.mmlu import build_mmlu_train, iter_aux_questions, iter_rationales, summary_line, write_report

    matcher = None if args.no_decontaminate else ChoiceMatcher(
        mmlu_test_items(args.benchmarks), ChoiceDecontamConfig(ngram=args.ngram, jaccard_threshold=args.jaccard))
    rationales = itertools.chain.from_iterable(iter_rationales(p) for p in args.rationales)
    rows, report = build_mmlu_train(iter_aux_questions(args.questions, args.hub_config, args.hub_split), rationales,
                                    matcher, args.key, args.key_field, args.text_field)
    write_jsonl_atomic(args.output, rows)
    write_report(args.report, report, {"questions_source": args.questions, "rationales": list(args.rationales),
                                       "decontaminated": matcher is not None, "output": args.output})
    print(summary_line(report))
    return 0


def _percentiles(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]  # noqa: E731
    return {"min": v[0], "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": v[-1],
            "mean": round(sum(v) / len(v), 2)}


def cmd_canvas_stats(args: argparse.Namespace) -> int:
    """Print how many rows fit the canvas and prompt/response token-length statistics."""
    from transformers import AutoTokenizer

    from elfreg.tasks.formats import apply_template

    kwargs = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, **kwargs)
    cfg = CanvasConfig.for_task(args.task, **({"canvas_len": args.canvas_len} if args.canvas_len else {}),
                                **({"prompt_cap": args.prompt_cap} if args.prompt_cap else {}))
    specs = _specs(args)
    stats: dict[str, ReadStats] = {}
    rows = _rows(specs, stats)
    if args.limit:
        rows = itertools.islice(rows, args.limit)
    p_lens, r_lens = [], []
    fit = prompt_over = canvas_over = 0
    for example in rows:
        prompt, response = apply_template(example, args.task)
        p = len(tokenizer(prompt, add_special_tokens=cfg.add_special_tokens)["input_ids"])
        r = len(tokenizer(response, add_special_tokens=False)["input_ids"])
        p_lens.append(p)
        r_lens.append(r)
        if p > cfg.prompt_cap:
            prompt_over += 1
        elif p + r + 1 > cfg.canvas_len:
            canvas_over += 1
        else:
            fit += 1
    print(json.dumps({"rows": len(p_lens), "fit": fit, "prompt_too_long": prompt_over,
                      "canvas_too_long": canvas_over, "canvas_len": cfg.canvas_len, "prompt_cap": cfg.prompt_cap,
                      "eos_id": tokenizer.eos_token_id, "special_ids": sorted(special_ids(tokenizer)),
                      "prompt_tokens": _percentiles(p_lens), "response_tokens": _percentiles(r_lens)}, indent=2))
    return 0


def _common(p: argparse.ArgumentParser, tasks: tuple[str, ...]) -> None:
    p.add_argument("--task", choices=tasks, required=True, help=f"kind of training data: {', '.join(tasks)}")
    p.add_argument("--input", nargs="+", required=True, type=input_path,
                   help="JSONL(.gz)/Parquet file(s), glob or folder")
    p.add_argument("--preset", default=None, help="column mapping and filter of a known set (e.g. gsm8k-train)")
    p.add_argument("--columns", type=_parse_columns, default={"prompt": "prompt", "response": "response"},
                   help="role=column pairs, e.g. prompt=question,response=answer (default: prompt/response)")
    p.add_argument("--on-bad-row", choices=("error", "skip"), default="error",
                   help="a row missing a column: error (naming file and line), or skip it (counted)")


def register(subparsers: Any) -> None:
    """Add `data` with subcommands `decontaminate` and `canvas-stats` to an argparse subparsers object."""
    data = subparsers.add_parser("data", help="training data: decontamination, canvas statistics, the MMLU file")
    sub = data.add_subparsers(dest="data_command", required=True)

    dec = sub.add_parser("decontaminate", help="drop rows matching benchmark test problems; write rows + report "
                                               "(MMLU: `elfreg data mmlu-train` decontaminates as it builds)")
    _common(dec, ("math", "code"))
    dec.add_argument("--output", required=True, type=output_file,
                     help="cleaned JSONL file (prompt/response/answer/id/source)")
    dec.add_argument("--report", required=True, type=output_file, help="JSON report file of dropped rows and counts")
    dec.add_argument("--benchmarks", default=None, type=input_path,
                     help="folder with the test sets (default: ELFREG_DATA_DIR, else the copies shipped with elfreg)")
    dec.add_argument("--ngram", type=NGRAM.arg, default=8, help="n of the word n-grams compared")
    dec.add_argument("--jaccard", type=JACCARD.arg, default=0.5,
                     help="drop a row whose n-gram Jaccard similarity to a test problem reaches this")
    from elfreg.data.decontam_code import CodeDecontamConfig  # light: no torch

    dec.add_argument("--ast-min-nodes", type=Range(0, None, integer=True).arg, default=CodeDecontamConfig.ast_min_nodes,
                     help="code: solution bodies with fewer AST nodes match only under the same function name")
    dec.set_defaults(func=cmd_decontaminate)

    cs = sub.add_parser("canvas-stats", help="how many rows fit the canvas; token length statistics")
    _common(cs, ("math", "code", "choice"))
    cs.add_argument("--tokenizer", required=True, type=model_ref, help="tokenizer folder or hub id")
    cs.add_argument("--gguf-file", default=None, help="GGUF file name inside --tokenizer")
    cs.add_argument("--canvas-len", type=MODEL_RANGES["max_len"].arg, default=None,
                    help="canvas length L in tokens (default: the task's)")
    cs.add_argument("--prompt-cap", type=Range(1, MODEL_RANGES["max_len"].hi, integer=True).arg, default=None,
                    help="longest prompt in tokens (default: the task's)")
    cs.add_argument("--limit", type=COUNT.arg, default=None, help="read only the first N rows")
    cs.set_defaults(func=cmd_canvas_stats)

    mm = sub.add_parser("mmlu-train", help="the MMLU training file: auxiliary-train questions + your rationales, "
                                           "kept when their letter is the gold one, decontaminated (docs/data.md)")
    mm.add_argument("--questions", default="hub", type=input_path,
                    help="auxiliary-train questions: 'hub' (cais/mmlu, config auxiliary_train), 'hub:<dataset id>', "
                         "data.tar's auxiliary_train/ folder of CSVs, a CSV, or JSONL/Parquet {question, choices, "
                         "answer}")
    mm.add_argument("--hub-config", default="auxiliary_train", help="hub config of --questions hub")
    mm.add_argument("--hub-split", default="train", help="hub split of --questions hub")
    mm.add_argument("--rationales", required=True, nargs="+", type=input_file,
                    help="JSONL(.gz) from any generator: one rationale per line, with the question's key (--key) "
                         "and the text (--text-field); several per question allowed")
    mm.add_argument("--key", choices=("id", "question"), default="id",
                    help="id: field 'id' = the question's 0-based index in the --questions order (or 'aux/<index>'); "
                         "question: field 'question' = its text (matched after normalisation)")
    mm.add_argument("--key-field", default=None, help="JSON field holding the key (default: the --key name)")
    mm.add_argument("--text-field", default="rationale", help="JSON field holding the rationale text")
    mm.add_argument("--output", required=True, type=output_file,
                    help="training JSONL file (prompt/response/answer/id/question_id/...)")
    mm.add_argument("--report", required=True, type=output_file,
                    help="JSON report file: counts per drop reason, examples, contamination")
    mm.add_argument("--benchmarks", default=None, type=input_file,
                    help="MMLU test file to decontaminate against (default: the copy shipped with elfreg)")
    mm.add_argument("--no-decontaminate", action="store_true", help="keep questions that match the test set")
    mm.add_argument("--ngram", type=NGRAM.arg, default=8, help="n of the word n-grams compared")
    mm.add_argument("--jaccard", type=JACCARD.arg, default=0.5,
                    help="drop a question whose n-gram Jaccard similarity to a test question reaches this")
    mm.set_defaults(func=cmd_mmlu_train)
