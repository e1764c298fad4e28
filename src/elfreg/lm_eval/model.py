"""The lm-evaluation-harness model class ``elfreg``: lm-eval's generation tasks run elfreg's samplers (spec §5).

Registered with lm-eval on import (``import elfreg.lm_eval``). ``--model_args`` take the sampler settings of
``elfreg generate`` (sampler, nfe, rho, grid, p, eta, w / task, sigma, drop_reg, seed, and the adaptive exit rule's
check_every, patience, min_nfe, extract) plus prompt_format and long_requests; docs/lm_eval.md explains each choice.

* Noise: request ``(doc_id, k)`` of a task uses the sample key ``(doc_id, idx * repeats + k)`` (k-th repeat),
  the same key ``elfreg generate`` gives line ``doc_id`` of a prompts file, so a result depends neither on the
  batch size nor on the number of processes (lm-eval's doc ids are global across ranks).
* Prompts: lm-eval hands a fully formatted context (the task's own template and few-shot examples), so it is
  encoded as is (``prompt_format=raw``, the default); ``prompt_format=template`` treats the context as a bare
  question and puts it inside the model's saved template, exactly as ``elfreg generate`` does by default.
  With lm-eval's ``--apply_chat_template`` the model's template renders the chat (``apply_chat_template``).
* Adaptive exit (``sampler=adaptive``, ``nfe`` its max_nfe): the rule compares the answer of the text lm-eval will
  read (after ``max_gen_toks`` and ``until``), by ``extract`` (default: the one ``task`` names, else the whole text).
  The NFE each request spent is logged (mean and histogram) and kept in ``nfe_spent``.
* Length: a response is what the canvas holds after the prompt; ``max_gen_toks`` caps it in tokens and the
  ``until`` strings cut the decoded text. A request asking for more tokens than the canvas holds is an error
  before any generation (``long_requests=error``) or is capped at the canvas and counted in the log
  (``long_requests=truncate``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from elfreg.resources import check_fits, sampler_grid_need
from elfreg.sampling.config import BATCH, SamplerConfig, w_for_task
from elfreg.sampling.decode import detokenize
from elfreg.sampling.exit import DEFAULT_EXIT, format_nfe_summary, nfe_summary
from elfreg.sampling.pipeline import GenerationPipeline, prompt_limit
from elfreg.tasks.formats import format_prompt
from elfreg.tasks.registry import extract_for

log = logging.getLogger(__name__)

PROMPT_FORMATS = ("raw", "template")
LONG_REQUESTS = ("error", "truncate")
# gen_kwargs of autoregressive decoding that have no meaning for a diffusion sampler: accepted and ignored.
IGNORED_GEN_KWARGS = ("do_sample", "temperature", "top_p", "top_k", "num_beams", "repetition_penalty")

NO_LIKELIHOOD = (
    "elfreg models cannot compute {what}: a continuous diffusion LM (ELF / ELF-REG) has no tractable likelihood of "
    "a given continuation (the model defines no token-level probability of text, only a flow over encoder "
    "features), so lm-eval tasks with output_type loglikelihood, loglikelihood_rolling or multiple_choice "
    "(e.g. hellaswag, arc_easy, mmlu, wikitext) cannot run; use generation tasks (output_type generate_until, "
    "e.g. gsm8k, minerva_math, humaneval, mmlu_flan_cot_zeroshot). Requests here came from task(s): {tasks}.")


def _as(kind: type, name: str, value: Any) -> Any:
    """A model_arg value of the given type (model_args arrive as strings or lm-eval's guesses); names the field."""
    if value is None:
        return None
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                return value.lower() in ("true", "1")
            return bool(value)
        if kind is int and (isinstance(value, bool) or float(value) != int(float(value))):
            raise ValueError(value)
        return kind(int(float(value))) if kind is int else kind(value)
    except (TypeError, ValueError, OverflowError):   # OverflowError: "1e400" for an int
        raise ValueError(f"model_args {name}: expected {kind.__name__}, got {value!r}") from None


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"model_args {name}: expected one of {', '.join(choices)}, got {value!r}")
    return value


@register_model("elfreg")
class ElfLM(LM):
    """An elfreg model (folder or hub id) as an lm-eval LM: ``generate_until`` only (module docstring)."""

    def __init__(self, pretrained: Any = None, sampler: str | None = None, nfe: int | None = None, rho: int = 8,
                 grid: str | None = None, p: float = 0.5, eta: float = 1.2, w: float | None = None,
                 task: str | None = None, sigma: float | None = None, drop_reg: bool = False, seed: int = 0,
                 check_every: int = DEFAULT_EXIT["check_every"], patience: int = DEFAULT_EXIT["patience"],
                 min_nfe: int = DEFAULT_EXIT["min_nfe"], extract: str | None = None,
                 prompt_format: str = "raw", long_requests: str = "error", batch_size: Any = 16,
                 max_batch_size: Any = None, device: str | None = None, revision: str | None = None,
                 **unknown: Any) -> None:
        super().__init__()
        if unknown:
            raise ValueError(f"model_args: unknown argument(s) {', '.join(sorted(unknown))} for model 'elfreg'; "
                             "known: pretrained, sampler, nfe, rho, grid, p, eta, w, task, sigma, drop_reg, seed, "
                             "check_every, patience, min_nfe, extract, prompt_format, long_requests, batch_size, "
                             "device, revision")
        if pretrained is None:
            raise ValueError("model_args pretrained: an elfreg model folder or hub id is required")
        if batch_size is None or str(batch_size).startswith("auto"):
            raise ValueError(f"batch_size: elfreg needs an integer batch size, got {batch_size!r}")
        self.batch_size = BATCH.check(_as(int, "batch_size", batch_size), "batch_size")
        self.prompt_format = _choice("prompt_format", prompt_format, PROMPT_FORMATS)
        self.long_requests = _choice("long_requests", long_requests, LONG_REQUESTS)
        w = _as(float, "w", w)
        if w is None:
            w = w_for_task(str(task)) if task else SamplerConfig.w
        # sampler, nfe and grid not given: a distilled model folder's own (its distill.json), else early-stop at 64
        from elfreg.distilled import sampler_defaults
        from elfreg.sampling.config import with_model_defaults

        chosen = with_model_defaults(sampler_defaults(pretrained) if isinstance(pretrained, str) else {},
                                     None if sampler is None else str(sampler), _as(int, "nfe", nfe),
                                     None if grid is None else str(grid))
        # every sampler setting is checked here, before the model is loaded
        cfg = SamplerConfig(sampler=chosen["sampler"], nfe=chosen["nfe"], rho=_as(int, "rho", rho),
                            grid=chosen["grid"],
                            p=_as(float, "p", p), eta=_as(float, "eta", eta), w=w,
                            drop_reg=_as(bool, "drop_reg", drop_reg),
                            seed=_as(int, "seed", seed), check_every=_as(int, "check_every", check_every),
                            patience=_as(int, "patience", patience), min_nfe=_as(int, "min_nfe", min_nfe),
                            extract=str(extract) if extract is not None else extract_for(str(task) if task else None),
                            **({} if sigma is None else {"sigma": _as(float, "sigma", sigma)}))
        check_fits(sampler_grid_need(cfg, self.batch_size, "rho, nfe or batch_size"))   # before loading
        self._rank, self._world_size = self._init_distributed()
        self._device = self._pick_device(device)
        self.model = self._load(pretrained, revision)
        if sigma is None:
            cfg = dataclasses.replace(cfg, sigma=self.model.config.objective.sigma)
        self.template = self.model.prompt_template
        self.pipeline = GenerationPipeline(
            self.model.student, self.model.prompt_encoder(self.prompt_format == "raw"),
            self.model.tokenizer, cfg, batch_size=self.batch_size,
            max_prompt_len=self.model.config.model.max_prompt_len)
        self.sampler_config = cfg
        self.nfe_spent: list[int] = []   # per request answered so far, in order (check decodes included)

    # -- construction helpers -----------------------------------------------------------------------------------
    def _load(self, pretrained: Any, revision: str | None):
        from elfreg.pretrained import ElfModel

        if isinstance(pretrained, ElfModel):
            return pretrained.to(self._device)
        return ElfModel.from_pretrained(str(pretrained), device=self._device, revision=revision)

    def _pick_device(self, device: str | None) -> torch.device:
        """The given device; cuda:LOCAL_RANK for "cuda" / "cuda:0" under several processes (lm-eval's CLI default
        is cuda:0 on every rank); without one, cuda:LOCAL_RANK when CUDA is available, else the CPU."""
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if not device:
            return torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
        picked = torch.device(device)
        if picked.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} asked for but CUDA is not available; pass --device cpu")
        if picked.type == "cuda" and self._world_size > 1 and (picked.index or 0) == 0:
            return torch.device("cuda", local)
        return picked

    @staticmethod
    def _init_distributed() -> tuple[int, int]:
        """(rank, world size) from torch.distributed, initialised from torchrun's / accelerate's environment."""
        import torch.distributed as dist

        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1 and not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    # -- lm-eval's distributed hooks (used by its evaluator when world_size > 1) ---------------------------------
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor, stacked along a new first axis."""
        if self._world_size == 1:
            return tensor.unsqueeze(0) if tensor.dim() == 0 else tensor
        import torch.distributed as dist

        parts = [torch.zeros_like(tensor) for _ in range(self._world_size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    def gather_object(self, obj: Any, dst: int = 0) -> list | None:
        """Every rank's object on rank ``dst`` (None elsewhere)."""
        if self._world_size == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self._world_size if self._rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def barrier(self) -> None:
        if self._world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    # -- prompts ------------------------------------------------------------------------------------------------
    @property
    def tokenizer_name(self) -> str:
        """Fingerprint of the chat rendering for lm-eval's request cache: the model's prompt template."""
        return f"elfreg-template:{self.template}"

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """A chat in the model's template: system text, then each user turn templated, each assistant turn after it.

        Used by lm-eval's ``--apply_chat_template``; the result is final, so it is encoded as is (prompt_format raw).
        """
        if self.prompt_format != "raw":
            raise ValueError("--apply_chat_template already puts the prompt in the model's template; use it with "
                             "prompt_format=raw (the default), not prompt_format=template, or the template is "
                             "applied twice")
        parts: list[str] = []
        for i, msg in enumerate(chat_history):
            role, content = msg.get("role"), str(msg.get("content", ""))
            if role == "system":
                parts.append(content.strip() + "\n\n")
            elif role == "user":
                parts.append(format_prompt(self.template, content))
            elif role == "assistant":
                parts.append(" " + content.strip() + "\n\n")
            else:
                raise ValueError(f"chat message {i}: unknown role {role!r} (expected system, user or assistant)")
        return "".join(parts).rstrip("\n") if not add_generation_prompt else "".join(parts)

    # -- requests -----------------------------------------------------------------------------------------------
    def loglikelihood(self, requests: list) -> list:
        raise NotImplementedError(NO_LIKELIHOOD.format(what="loglikelihood", tasks=_task_names(requests)))

    def loglikelihood_rolling(self, requests: list) -> list:
        raise NotImplementedError(NO_LIKELIHOOD.format(what="loglikelihood_rolling", tasks=_task_names(requests)))

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """One response per request: elfreg's sampler, then max_gen_toks tokens, then cut at the first ``until``."""
        if not requests:
            return []
        texts, keys, limits, untils = self._plan(requests)
        out: list[str] = []
        bar = tqdm(total=len(requests), disable=disable_tqdm or self._rank != 0, desc="elfreg generate_until")
        tok = self.model.tokenizer

        def task_text(i: int, ids: list[int]) -> str:
            """What the task reads from request i's response ids: max_gen_toks tokens, cut at the first ``until``."""
            return cut_at_stop(detokenize(tok, [ids[: limits[i]]])[0], untils[i])

        spent = []
        for start in range(0, len(requests), self.batch_size):
            end = start + self.batch_size
            recs = self.pipeline.run_rows(texts[start:end], keys[start:end], lambda r, ids: task_text(start + r, ids))
            for i, rec in enumerate(recs, start=start):
                ids = rec["response_token_ids"]
                text = rec["response"] if len(ids) <= limits[i] else detokenize(tok, [ids[: limits[i]]])[0]
                out.append(cut_at_stop(text, untils[i]))
                spent.append(rec["nfe_spent"])
                self.cache_hook.add_partial("generate_until", requests[i].args, out[-1])
            bar.update(min(end, len(requests)) - start)
        bar.close()
        self.nfe_spent += spent
        log.info("elfreg %s sampler: NFE per request %s", self.sampler_config.sampler,
                 format_nfe_summary(nfe_summary(spent)))
        return out

    def _plan(self, requests: list) -> tuple[list[str], list[tuple[int, int]], list[int], list[list[str]]]:
        """Prompt text, noise key, token cap and stop strings of every request, all checked before any generation."""
        texts, keys, limits, untils = [], [], [], []
        seen: dict[int, int] = {}
        ignored: set[str] = set()
        truncated = 0
        prompt_ids = self.pipeline.encoder.prompt_token_ids([r.args[0] for r in requests])
        canvas = self.pipeline.canvas_len
        cap = prompt_limit(canvas, self.pipeline.max_prompt_len)
        for i, (req, ids) in enumerate(zip(requests, prompt_ids, strict=True)):
            where = f"request {i} (task {req.task_name}, doc {req.doc_id})"
            context, gen_kwargs = req.args[0], dict(req.args[1] if len(req.args) > 1 else {})
            if not isinstance(context, str) or not context.strip():
                raise ValueError(f"{where}: empty context")
            if len(ids) > cap:
                raise ValueError(f"{where}: the prompt has {len(ids)} tokens; this model's canvas of {canvas} allows "
                                 f"at most {cap} prompt tokens (max_prompt_len={self.pipeline.max_prompt_len}); "
                                 "use fewer few-shot examples (--num_fewshot)")
            until = gen_kwargs.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            room = canvas - len(ids)
            want = gen_kwargs.pop("max_gen_toks", None)
            limit = room if want is None else _as(int, "max_gen_toks", want)
            if limit > room:
                if self.long_requests == "error":
                    raise ValueError(f"{where}: max_gen_toks={limit} but this model's canvas of {canvas} holds at most "
                                     f"{room} response tokens after the {len(ids)}-token prompt; set the task's "
                                     "generation_kwargs max_gen_toks, or model_args long_requests=truncate to cap "
                                     "responses at the canvas")
                truncated += 1
                limit = room
            ignored.update(k for k in gen_kwargs if k in IGNORED_GEN_KWARGS)
            unknown = sorted(set(gen_kwargs) - set(IGNORED_GEN_KWARGS))
            if unknown:
                raise ValueError(f"{where}: unsupported generation_kwargs {unknown}; elfreg understands until and "
                                 f"max_gen_toks and ignores {', '.join(IGNORED_GEN_KWARGS)}")
            k = seen.get(id(req), 0)
            seen[id(req)] = k + 1
            doc = req.doc_id if req.doc_id is not None else i
            keys.append((int(doc), int(req.idx or 0) * int(req.repeats or 1) + k))
            texts.append(context)
            limits.append(limit)
            untils.append(until)
        if ignored:
            log.warning("elfreg ignores generation_kwargs %s: a diffusion sampler has no temperature or beams; its "
                        "randomness is the seed (model_args seed)", sorted(ignored))
        if truncated:
            log.warning("long_requests=truncate: %d of %d requests asked for more tokens than the canvas holds; their "
                        "responses are capped at the canvas", truncated, len(requests))
        return texts, keys, limits, untils


def cut_at_stop(text: str, until: list[str]) -> str:
    """``text`` up to the earliest occurrence of any stop string (lm-eval's ``until``)."""
    cut = len(text)
    for stop in until:
        if stop:
            at = text.find(stop)
            if 0 <= at < cut:
                cut = at
    return text[:cut]


def _task_names(requests: list) -> str:
    names = sorted({str(getattr(r, "task_name", None)) for r in requests})
    return ", ".join(names) if names else "(none)"
