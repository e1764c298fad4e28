"""Optimisers, schedule and EMA of the reference (facts §3.7): Muon on 2-D weight matrices, AdamW on the rest.

Muon choice. ``torch.optim.Muon`` (used when ``train.muon_impl`` is auto/torch and torch has it) runs Nesterov
momentum without bias correction and Newton–Schulz in bf16; its default ``adjust_lr_fn`` ("original") scales
the update by sqrt(max(1, A/B)) for a (A, B) parameter, which is the reference's sqrt(max(1, fan_out/fan_in))
for nn.Linear weights (stored (out, in)). The bare head matrices P (H×d) and U (d×V) are stored (in, out), so
their group carries ``lr_scale`` = reference ratio / torch ratio and gets the reference scaling.
``GroupedMuon`` (``muon_impl: grouped``, what ``auto`` picks) is torch.optim.Muon's update with its state, run on
all matrices of one shape at once (stacked, batched Newton–Schulz): a small model's Muon step is mostly per-matrix
dispatch otherwise. Its Newton–Schulz runs in bf16 only where the run's precision is bf16 on hardware that runs bf16
fast (CUDA, or a CPU that measured it faster: elfreg.precision), else in fp32, as the reference does: on a CPU
without native bf16 one bf16 iteration on a (576 x 49152) head took minutes.
``ReferenceMuon`` is the reference's own update (bias-corrected Nesterov momentum, fp32 Newton–Schulz, same
scaling) and also handles FSDP-sharded (DTensor) matrices by gathering each update for the orthogonalisation.
The Adam side is torch AdamW (the reference uses a Nesterov Adam; betas, eps and wd 0 are the reference's).

Which matrices (``train.muon_params``): "hidden" (the default) orthogonalises only the transformer blocks'
matrices; "all" every 2-D matrix, the vocabulary head and the feature-wide input/output maps included, as the
reference does (the paper presets ask for it). On a narrow student those maps are the widest matrices by far, and
Newton–Schulz on them costs more than the forward and backward (docs/training.md, "Optimiser").
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys

import torch
from torch import Tensor, nn

from elfreg.train.config import TrainConfig

log = logging.getLogger(__name__)

NS_COEFFS = (3.4445, -4.7750, 2.0315)


def split_params(model: nn.Module, muon_params: str = "hidden") -> dict[str, list[tuple[str, nn.Parameter]]]:
    """{"muon_out_in": Linear weights, "muon_in_out": other 2-D matrices, "adam": the rest} (trainable only).

    ``muon_params`` "all": every 2-D matrix goes to Muon (the reference, facts §3.7); "hidden": only the
    transformer blocks' matrices (``blocks.*``), the input/output maps and embedders go to AdamW (see
    TrainConfig.muon_params).
    """
    if muon_params not in ("all", "hidden"):
        raise ValueError(f"train.muon_params: unknown {muon_params!r}; choose all or hidden")
    linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    out: dict[str, list] = {"muon_out_in": [], "muon_in_out": [], "adam": []}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim == 2 and (muon_params == "all" or name.startswith("blocks.")):
            out["muon_out_in" if id(p) in linear else "muon_in_out"].append((name, p))
        else:  # biases, norm weights, the (1, n, H) prefix tokens (and with "hidden", the non-block matrices)
            out["adam"].append((name, p))
    return out


def fan_ratio(shape: tuple[int, ...], orientation: str) -> float:
    """Reference update scale sqrt(max(1, fan_out / fan_in)); orientation "out_in" (nn.Linear) or "in_out"."""
    fan_out, fan_in = (shape[0], shape[1]) if orientation == "out_in" else (shape[1], shape[0])
    return math.sqrt(max(1.0, fan_out / fan_in))


def newton_schulz(g: Tensor, steps: int = 5, eps: float = 1e-8) -> Tensor:
    """Approximate orthogonalisation of a 2-D matrix (quintic Newton–Schulz, fp32), shape preserved."""
    a, b, c = NS_COEFFS
    x = g.float()
    x = x / (x.norm() + eps)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x.T if tall else x


class ReferenceMuon(torch.optim.Optimizer):
    """Muon as in the reference: m = βm + (1-β)g; u = βm/(1-β^(k+1)) + (1-β)g/(1-β^k); p -= lr·s·NS(u)."""

    def __init__(self, params, lr: float = 2e-3, momentum: float = 0.95, ns_steps: int = 5,
                 weight_decay: float = 0.0, orientation: str = "out_in") -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, ns_steps=ns_steps, weight_decay=weight_decay,
                                      orientation=orientation))

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102
        for group in self.param_groups:
            beta = group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["momentum_buffer"] = torch.zeros_like(p, dtype=torch.float32)
                state["step"] += 1
                k = float(state["step"])
                g = p.grad.float()
                m = state["momentum_buffer"]
                m.mul_(beta).add_(g, alpha=1 - beta)
                u = m * (beta / (1 - beta ** (k + 1))) + g * ((1 - beta) / (1 - beta ** k))
                if hasattr(u, "full_tensor"):  # FSDP2 DTensor: orthogonalise the whole matrix, keep our shard
                    from torch.distributed.tensor import distribute_tensor

                    o = newton_schulz(u.full_tensor(), group["ns_steps"])
                    o = distribute_tensor(o, u.device_mesh, u.placements)
                else:
                    o = newton_schulz(u, group["ns_steps"])
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(o.to(p.dtype), alpha=-group["lr"] * fan_ratio(tuple(p.shape), group["orientation"]))


def _muon_adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: tuple[int, ...]) -> float:
    """torch.optim.Muon's lr for a (A, B) matrix: "original" sqrt(max(1, A/B)), "match_rms_adamw" 0.2 sqrt(max(A, B))."""
    a, b = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1.0, a / b))
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(a, b))
    return lr


def newton_schulz_batched(x: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                          dtype: torch.dtype = torch.float32) -> Tensor:
    """torch.optim.Muon's Newton–Schulz (spectral norm <= 1 by the Frobenius norm) on a stack (n, r, c), r <= c, in
    ``dtype`` (torch's own runs it in bf16)."""
    a, b, c = coefficients
    x = x.to(dtype)
    x = x / x.norm(dim=(1, 2), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x


class GroupedMuon(torch.optim.Muon):
    """torch.optim.Muon (same update, hyper-parameters and state) with the matrices of one shape orthogonalised
    together: a small model's Muon step is dominated by the per-matrix calls, not by the arithmetic. ``ns_dtype``:
    Newton–Schulz's arithmetic (fp32 unless bf16 is fast here; torch's runs it in bf16)."""

    def __init__(self, params, ns_dtype: torch.dtype = torch.float32, **kw) -> None:
        super().__init__(params, **kw)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        items = []  # (group, param, update as (rows <= cols), transposed?) of every matrix with a gradient
        by_shape: dict[tuple, list[int]] = {}
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            self._init_group(group, params, grads, bufs)
            if not params:
                continue
            torch._foreach_lerp_(bufs, grads, 1 - group["momentum"])
            updates = torch._foreach_lerp(grads, bufs, group["momentum"]) if group["nesterov"] else bufs
            for p, u in zip(params, updates):
                tall = u.shape[0] > u.shape[1]
                key = (tuple(u.shape[::-1] if tall else u.shape), group["ns_coefficients"], group["ns_steps"],
                       group["eps"])
                by_shape.setdefault(key, []).append(len(items))
                items.append((group, p, u.mT if tall else u, tall))
        for (_, coefficients, steps, eps), idx in by_shape.items():
            ortho = newton_schulz_batched(torch.stack([items[i][2] for i in idx]), coefficients, steps, eps,
                                          self.ns_dtype)
            for j, i in enumerate(idx):
                group, p, _, tall = items[i]
                lr = group["lr"]
                if group["weight_decay"]:  # a multiply by exactly 1 is a pass over p that changes nothing
                    p.mul_(1 - lr * group["weight_decay"])
                p.add_(ortho[j].mT if tall else ortho[j], alpha=-_muon_adjusted_lr(lr, group["adjust_lr_fn"],
                                                                                   tuple(p.shape)))
        return loss


class Optimizers:
    """Several torch optimisers stepped together; each param group has a fixed ``lr_scale``."""

    def __init__(self, optimizers: dict[str, torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    def set_lr(self, lr: float) -> None:
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)

    def step(self) -> None:
        for opt in self.optimizers.values():
            opt.step()

    def zero_grad(self) -> None:
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)

    def state_dict(self) -> dict[str, dict]:
        return {k: opt.state_dict() for k, opt in self.optimizers.items()}

    def load_state_dict(self, state: dict[str, dict]) -> None:
        if sorted(state) != sorted(self.optimizers):
            raise ValueError(f"optimiser state holds {sorted(state)}, this run has {sorted(self.optimizers)}")
        for k, opt in self.optimizers.items():
            opt.load_state_dict(state[k])


def resolve_muon_impl(cfg: TrainConfig) -> str:
    """'grouped', 'torch' or 'reference' for this run (auto: GroupedMuon if torch has Muon and not FSDP)."""
    if cfg.muon_impl != "auto":
        return cfg.muon_impl
    return "grouped" if hasattr(torch.optim, "Muon") and cfg.parallel != "fsdp" else "reference"


def adamw(params: list[nn.Parameter], **kw) -> torch.optim.AdamW:
    """torch.optim.AdamW, fused (one kernel over all tensors) on plain CPU / CUDA tensors, else foreach.

    Fused does the same update (tests/train/test_optim.py: equal to foreach within 1e-6); on the demo's 81-tensor
    student it took 1.8 ms per step against foreach's 6.7 ms (2 CPU threads). FSDP's DTensor parameters keep foreach.
    """
    dt = sys.modules.get("torch.distributed.tensor")  # not imported: no DTensor exists
    dtensor = dt is not None and any(isinstance(p, dt.DTensor) for p in params)
    fused = not dtensor and all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(params, fused=fused, foreach=None if fused else True, **kw)


def build_optimizers(model: nn.Module, cfg: TrainConfig, fast_bf16: bool = False) -> Optimizers:
    """Muon (2-D matrices, ``cfg.muon_params``) + AdamW (the rest) with one lr, or AdamW on everything (facts §3.7).

    ``fast_bf16``: the run computes in bf16 on hardware that runs it fast (elfreg.precision.Precision.fast_bf16);
    only then does Newton–Schulz run in bf16.
    """
    groups = split_params(model, cfg.muon_params if cfg.optimizer == "muon" else "all")
    adam_kw = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                   weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        params = [p for g in groups.values() for _, p in g]
        return Optimizers({"adamw": adamw(params, **adam_kw)})
    opts: dict[str, torch.optim.Optimizer] = {}
    impl = resolve_muon_impl(cfg)
    rel = (cfg.muon_lr if cfg.muon_lr is not None else cfg.lr) / cfg.lr  # Muon's lr relative to the schedule's
    if impl in ("torch", "grouped"):
        if not hasattr(torch.optim, "Muon"):
            raise RuntimeError(f"train.muon_impl={impl} but this torch has no torch.optim.Muon")
        pgroups = []
        if groups["muon_out_in"]:
            pgroups.append({"params": [p for _, p in groups["muon_out_in"]], "lr_scale": rel})
        for _, p in groups["muon_in_out"]:  # one group each: the scale depends on the shape
            torch_ratio = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
            pgroups.append({"params": [p], "lr_scale": rel * fan_ratio(tuple(p.shape), "in_out") / torch_ratio})
        if pgroups:
            kw = dict(lr=cfg.lr * rel, momentum=cfg.muon_momentum, nesterov=True, weight_decay=cfg.weight_decay,
                      adjust_lr_fn="original")
            if impl == "grouped":
                opts["muon"] = GroupedMuon(pgroups, torch.bfloat16 if fast_bf16 else torch.float32, **kw)
            else:
                if not fast_bf16:
                    log.warning("train.muon_impl=torch: torch.optim.Muon runs Newton-Schulz in bf16, and this run "
                                "computes in fp32 or bf16 is slow here (elfreg.precision); muon_impl=auto runs it "
                                "in fp32")
                opts["muon"] = torch.optim.Muon(pgroups, **kw)
    else:
        pgroups = [{"params": [p for _, p in groups[k]], "orientation": k.split("_", 1)[1], "lr_scale": rel}
                   for k in ("muon_out_in", "muon_in_out") if groups[k]]
        if pgroups:
            opts["muon"] = ReferenceMuon(pgroups, lr=cfg.lr * rel, momentum=cfg.muon_momentum,
                                         weight_decay=cfg.weight_decay)
    if groups["adam"]:
        opts["adamw"] = adamw([p for _, p in groups["adam"]], **adam_kw)
    return Optimizers(opts)


def lr_at(step: int, cfg: TrainConfig, warmup_steps: int | None = None, total_steps: int | None = None) -> float:
    """Learning rate of optimiser step ``step`` (0-based): linear warm-up to cfg.lr, then ``cfg.lr_schedule``.

    Warm-up: lr (step + 1) / W for step < W. Then "constant" (the reference, facts §3.7) keeps lr; "cosine" and
    "linear" decay from lr to lr_min = min_lr_ratio lr over the last D = max(1, round(decay_fraction (T - W)))
    steps of the run (T = ``total_steps``): the steps before them (from W on) keep lr, and step s in the decay has
    progress p = (s + 1 - (T - D)) / D in (0, 1], so the run's last step trains at exactly lr_min, as the warm-up's
    last step trains at exactly lr; cosine: lr_min + (lr - lr_min)(1 + cos(pi p)) / 2; linear:
    lr_min + (lr - lr_min)(1 - p). The decay takes its steps from the end, so a warm-up longer than the run leaves
    none to it. ``warmup_steps``: the run's resolved warm-up (the plan's, when it is given in epochs); default
    cfg.warmup_steps. ``total_steps``: the run's length, needed by a decaying schedule; default cfg.steps.
    """
    warmup = (cfg.warmup_steps if warmup_steps is None else warmup_steps) or 0
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    if cfg.lr_schedule == "constant":
        return cfg.lr
    total = cfg.steps if total_steps is None else total_steps
    if total is None:
        raise ValueError(f"train.lr_schedule={cfg.lr_schedule} needs the run's length (train.steps or the plan's)")
    start = decay_start(cfg, warmup, total)
    p = min(1.0, max(0.0, (step + 1 - start) / (total - start)))
    low = cfg.min_lr_ratio * cfg.lr
    if cfg.lr_schedule == "cosine":
        return low + (cfg.lr - low) * 0.5 * (1.0 + math.cos(math.pi * p))
    return low + (cfg.lr - low) * (1.0 - p)


def decay_start(cfg: TrainConfig, warmup_steps: int, total_steps: int) -> int:
    """The first optimiser step (0-based) of a ``total_steps``-step run whose learning rate decays
    (:func:`lr_at`: the last max(1, round(decay_fraction (T - W))) steps; ``total_steps`` when the schedule is
    constant). Every step before it trains at the same rate whatever the run's length (``train.minutes`` reads this)."""
    if cfg.lr_schedule == "constant":
        return total_steps
    return total_steps - max(1, round(cfg.decay_fraction * (total_steps - warmup_steps)))


class EMA:
    """ema <- ema + (1 - decay)(p - ema) after every optimiser step; starts as a copy of the weights (facts §3.7)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.shadow = {n: p.detach().clone().float() for n, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        named = list(model.named_parameters())
        shadow = [self.shadow[n] for n, _ in named]
        weights = [p.detach().float() for _, p in named]
        # one fused call over all tensors (the per-tensor loop's dispatch cost was visible in a small model's step)
        torch._foreach_lerp_(shadow, weights, 1.0 - self.decay)

    def state_dict(self) -> dict[str, Tensor]:
        return self.shadow

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing = sorted(set(self.shadow) - set(state))
        if missing:
            raise ValueError(f"EMA state misses {missing[:5]}")
        with torch.no_grad():
            for n, v in self.shadow.items():
                v.copy_(state[n])


def aux_weights_at(step: int, cfg: TrainConfig, objective, total_steps: int | None = None):
    """The objective of optimiser step ``step`` (0-based): ``objective`` itself when both auxiliary weights are
    constant (``train.*_weight_schedule``), else a copy whose decaying weights are w (1 - step / T), from w at the
    first step to w / T at the last (T = ``total_steps``, default cfg.steps)."""
    decay = [name for name in ("repa", "reg") if getattr(cfg, f"{name}_weight_schedule") == "decay"]
    if not decay:
        return objective
    total = cfg.steps if total_steps is None else total_steps
    if not total:
        raise ValueError("a decaying auxiliary weight needs the run's length (train.steps or the plan's)")
    left = max(0.0, 1.0 - step / total)
    return dataclasses.replace(objective, **{f"{n}_weight": getattr(objective, f"{n}_weight") * left for n in decay})
