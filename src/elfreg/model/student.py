"""The ELF / ELF-REG student: one bidirectional transformer that is both denoiser and decoder (spec §1).

Sequence layout: [t tokens | w tokens | mode tokens | REG or OLT token (optional) | L text tokens].
The REG token (ELF-REG) carries the noisy REG state r_t: with ``model.reg_io: shared`` its own projection maps it
(and its self-conditioning input) into the feature space d, after which it shares the text input path, and its
head maps final_linear's output back to d_r; with ``direct`` (the spec's wording) one projection takes it straight
to the student width and an own head reads the final normed state. The OLT variant (ablation) puts one learnable token in the same slot, with no state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from elfreg.config import ModelConfig
from elfreg.model.layers import Block, RepaProjector, RMSNorm, ScalarEmbedder, by_row, init_linear, rope_tables


@dataclass
class StudentOutput:
    """What one network call returns.

    x_hat: (B, L, d) clean-state prediction. reg_hat: (B, d_r) or None.
    logits: vocab-head logits (B, L, V_head) when ``decoder`` was True; (n_dec, L, V_head) for the decoder rows when
    ``decoder`` was a (B,) mask; None otherwise.
    repa_hidden: (B, L, H) student state after block ``repa_block`` (when asked); repa_extra: (B, H) the same at the
    REG/OLT token, or None.
    """

    x_hat: Tensor
    reg_hat: Tensor | None = None
    logits: Tensor | None = None
    repa_hidden: Tensor | None = None
    repa_extra: Tensor | None = None


class ElfStudent(nn.Module):
    """ELF (Embedded Language Flows) student with the ELF-REG extra token and the REPA projector."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = cfg = config
        d, h = cfg.feature_dim, cfg.width
        self.self_cond_proj = init_linear(nn.Linear(2 * d, d))
        self.text_proj = nn.Sequential(init_linear(nn.Linear(d, cfg.bottleneck_dim, bias=False)),
                                       init_linear(nn.Linear(cfg.bottleneck_dim, h)))
        self.t_embedder = ScalarEmbedder(h)
        self.w_embedder = ScalarEmbedder(h)
        if cfg.flow_map:
            # the jump's length t_to - t; its last layer starts at zero, so a flow map made from a denoiser starts as
            # that denoiser (a jump = one Euler step of its prediction)
            self.jump_embedder = ScalarEmbedder(h)
            nn.init.zeros_(self.jump_embedder.mlp[2].weight)
        self.time_tokens = nn.Parameter(torch.randn(1, cfg.num_time_tokens, h) * 0.02)
        self.w_tokens = nn.Parameter(torch.randn(1, cfg.num_w_tokens, h) * 0.02)
        self.mode_tokens = nn.Parameter(torch.randn(1, cfg.num_mode_tokens, h) * 0.02)
        self.blocks = nn.ModuleList(Block(h, cfg.heads, cfg.mlp_hidden, cfg.norm_eps) for _ in range(cfg.depth))
        self.final_norm = RMSNorm(h, cfg.norm_eps)
        self.final_linear = nn.Linear(h, d)
        nn.init.zeros_(self.final_linear.weight)
        nn.init.zeros_(self.final_linear.bias)
        # Factored vocab head: gelu_tanh(h P + b_P) U + b_U, no norm before it (reference §1.6).
        self.head_p = nn.Parameter(nn.init.xavier_uniform_(torch.empty(h, d)))
        self.head_p_bias = nn.Parameter(torch.zeros(d))
        self.head_u = nn.Parameter(nn.init.xavier_uniform_(torch.empty(d, cfg.head_size)))
        self.head_u_bias = nn.Parameter(torch.zeros(cfg.head_size))
        if cfg.head_token_ids is not None:
            self.register_buffer("head_ids", torch.tensor(cfg.head_token_ids, dtype=torch.long), persistent=False)
        self.repa_projector = RepaProjector(h, cfg.repa_hidden, cfg.teacher_dim) if cfg.repa else None
        # The extra token's parameters are made last, so that every other parameter draws the same initial values
        # with or without it (same seed): ELF, REPA only, REG only, ELF-REG and OLT start from one network.
        if cfg.extra_token == "reg" and cfg.reg_io == "direct":
            # spec §4: the REG state (and its self-conditioning input) projected straight to the student width; its
            # own head reads the final normed state (zero-initialised, as final_linear)
            self.reg_in = init_linear(nn.Linear(2 * cfg.reg_dim, h))
            self.reg_out = nn.Linear(h, cfg.reg_dim)
            nn.init.zeros_(self.reg_out.weight)
            nn.init.zeros_(self.reg_out.bias)
        elif cfg.extra_token == "reg":
            # "shared": into the feature width d, then the text's input path; out through final_linear, then d -> d_r
            self.reg_in = init_linear(nn.Linear(cfg.reg_dim, d))
            self.reg_out = init_linear(nn.Linear(d, cfg.reg_dim))
        elif cfg.extra_token == "olt":
            self.olt_token = nn.Parameter(torch.randn(1, 1, h) * 0.02)
        self.grad_checkpointing = False
        # Batch invariance in eval mode (set by the generation pipeline; docs/sampling.md, "Batch invariance"):
        # 0: one pass for the whole batch (a row's last bits, and after many sampler steps rarely a token, then
        # depend on the batch size); G >= 1: the batch runs in chunks of exactly G rows (the last padded with zero
        # rows), so every call the kernels see has one shape whatever the batch (``_forward_in_chunks``). G = 1 is
        # row by row. row_local_layers: one pass, but the layers whose kernels depend on the row count (GEMMs, silu,
        # gelu, cos) run each row alone (``layers.by_row``): invariant at a fraction of the row-by-row cost on the CPU.
        self.invariant_rows = 0
        self.row_local_layers = False
        self._rope_cache: dict = {}

    # -- pieces -------------------------------------------------------------------------------------------------
    def _input_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """(M_z, M_q, c): the bottleneck's first map folded into self_cond_proj, B W = [M_z | M_q], c = B b.

        self_cond_proj (2d -> d) followed by the bias-free bottleneck B (d -> bottleneck) is one linear map
        (2d -> bottleneck); applying the folded (bottleneck, 2d) matrix costs bottleneck / d of the unfolded one
        per token (the 576-wide input path was most of a small student's step). Same parameters, same function
        and gradients up to float reassociation (tests/model/test_student.py checks it against the unfolded maps).
        """
        with torch.autocast(self.self_cond_proj.weight.device.type, enabled=False):
            bott = self.text_proj[0].weight
            m = bott @ self.self_cond_proj.weight
            d = self.config.feature_dim
            return m[:, :d], m[:, d:], bott @ self.self_cond_proj.bias

    def _input_path(self, z: Tensor, q: Tensor, weights: tuple[Tensor, Tensor, Tensor] | None = None,
                    row_local: bool = False) -> Tensor:
        """[z, q] (.., d) each -> (.., H) through self_cond_proj and the bottleneck, in fp32; q=None means 0;
        ``row_local``: each row of the first dimension alone (``layers.by_row``)."""
        if row_local and z.shape[0] > 1:
            return torch.cat([self._input_path(z[i:i + 1], None if q is None else q[i:i + 1], weights)
                              for i in range(z.shape[0])])
        m_z, m_q, c = weights if weights is not None else self._input_weights()
        with torch.autocast(z.device.type, enabled=False):
            u = F.linear(z.float(), m_z, c)
            if q is not None:
                u = u + F.linear(q.float(), m_q)
            return self.text_proj[1](u)

    def _rope(self, num_identity: int, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
        key = (num_identity, length, device)
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_tables(num_identity, length, self.config.head_dim,
                                                self.config.rope_theta, device)
        return self._rope_cache[key]

    def vocab_logits(self, hidden: Tensor) -> Tensor:
        """Factored vocab head on text hidden states (.., H) -> (.., V_head), in fp32."""
        with torch.autocast(hidden.device.type, enabled=False):
            a = F.gelu(hidden.float() @ self.head_p + self.head_p_bias, approximate="tanh")
            return a @ self.head_u + self.head_u_bias

    def head_to_token_ids(self, idx: Tensor) -> Tensor:
        """Map vocab-head indices to tokenizer ids (identity unless the head is restricted)."""
        return self.head_ids[idx] if self.config.head_token_ids is not None else idx

    def token_to_head_ids(self, tokens: Tensor, where: Tensor | None = None) -> Tensor:
        """Map tokenizer ids to head indices; ids outside a restricted head raise ValueError. ``where`` (a mask of
        ``tokens``' shape): only those positions are mapped, the others become index 0 (a restricted head's loss
        reads the response positions only, and a prompt may hold any token)."""
        if self.config.head_token_ids is None:
            return tokens
        lut = torch.full((self.config.vocab_size,), -1, dtype=torch.long, device=tokens.device)
        lut[self.head_ids.to(tokens.device)] = torch.arange(len(self.config.head_token_ids), device=tokens.device)
        out = lut[tokens]
        if where is not None:
            out = torch.where(where, out, torch.zeros_like(out))
        if (out < 0).any():
            bad = sorted(set(tokens[out < 0].tolist()))[:10]
            raise ValueError(f"token ids {bad} are not in model.head_token_ids")
        return out

    # -- forward ------------------------------------------------------------------------------------------------
    def forward(self, z: Tensor, q: Tensor, t: Tensor, w: Tensor, *, reg: Tensor | None = None,
                reg_q: Tensor | None = None, decoder: bool | Tensor = False, repa: bool = False,
                t_to: Tensor | None = None) -> StudentOutput:
        """One network call (spec §1, §5).

        z, q: (B, L, d) state and self-conditioning input; t, w: (B,); reg, reg_q: (B, d_r) for a REG model
        (reg=None omits the REG token: the "REG removed at inference" ablation); decoder: bool or (B,) bool mask.
        t_to (B,): a flow-map model's jump end (None: t_to = t, the instantaneous prediction); other models refuse it.
        """
        cfg = self.config
        b, length, d = z.shape
        if d != cfg.feature_dim:
            raise ValueError(f"state width {d} != model.feature_dim {cfg.feature_dim}")
        if length > cfg.max_len:
            raise ValueError(f"canvas length {length} exceeds model.max_len {cfg.max_len}")
        if q.shape != z.shape:
            raise ValueError(f"self-conditioning input shape {tuple(q.shape)} != state shape {tuple(z.shape)}")
        if t.shape != (b,) or w.shape != (b,):
            raise ValueError(f"t and w must have shape ({b},), got {tuple(t.shape)} and {tuple(w.shape)}")
        if cfg.extra_token == "reg" and reg is not None and reg.shape != (b, cfg.reg_dim):
            raise ValueError(f"reg must have shape ({b}, {cfg.reg_dim}), got {tuple(reg.shape)}")
        if t_to is not None and not cfg.flow_map:
            raise ValueError("t_to: only a flow-map model (model.flow_map) takes a jump end")
        if t_to is not None and t_to.shape != (b,):
            raise ValueError(f"t_to must have shape ({b},), got {tuple(t_to.shape)}")
        weights = self._input_weights()
        if self.training or not self.invariant_rows:
            return self._forward(z, q, t, w, reg, reg_q, decoder, repa, weights,
                                 row_local=self.row_local_layers and not self.training, t_to=t_to)
        return self._forward_in_chunks(self.invariant_rows, z, q, t, w, reg, reg_q, decoder, repa, weights, t_to)

    @property
    def row_by_row(self) -> bool:
        """Each row computed alone in eval mode (``invariant_rows == 1``)."""
        return self.invariant_rows == 1

    @row_by_row.setter
    def row_by_row(self, on: bool) -> None:
        self.invariant_rows = 1 if on else 0

    def _forward_in_chunks(self, size: int, z: Tensor, q: Tensor, t: Tensor, w: Tensor, reg: Tensor | None,
                           reg_q: Tensor | None, decoder: bool | Tensor, repa: bool,
                           weights: tuple[Tensor, Tensor, Tensor], t_to: Tensor | None = None) -> StudentOutput:
        """``_forward`` on chunks of exactly ``size`` rows (the last padded with zero rows), each from inputs in
        memory of its own; the real rows' outputs concatenated.

        Why (docs/sampling.md, "Batch invariance"): in one pass over the batch, the BLAS picks its GEMM kernel by the
        row count and splits rows over threads, and elementwise kernels (silu, exp) give the elements at the end of
        each thread's share to a scalar loop that rounds differently; all of that moves with the batch size, and
        after 64 sampler steps some argmaxes flipped. In chunks of one shape, a call is always the same kernels on the
        same shapes; whether a row's result also does not depend on its place in the chunk is the kernels' affair: a
        GPU's kernels keep it (tests/sampling/test_cuda_sampling.py checks it there, the only device that uses chunks
        of more than one row), CPU kernels do not promise it (AVX2 kernels round a row by its place). Decoder rows given as a mask get the vocab
        head over the whole chunk, so its shape is fixed too.
        """
        def chunk(a: Tensor | None, s: slice, n: int, fill: float = 0.0) -> Tensor | None:
            if a is None:
                return None
            part = a[s].clone()
            if n == size:
                return part
            return torch.cat([part, part.new_full((size - n, *part.shape[1:]), fill)])

        outs = []
        for start in range(0, z.shape[0], size):
            s = slice(start, start + size)
            n = z[s].shape[0]
            dec = chunk(decoder, s, n, False) if isinstance(decoder, Tensor) else decoder
            out = self._forward(chunk(z, s, n), chunk(q, s, n), chunk(t, s, n), chunk(w, s, n), chunk(reg, s, n),
                                chunk(reg_q, s, n), dec, repa, weights, whole_head=size > 1, t_to=chunk(t_to, s, n))
            for name in ("x_hat", "reg_hat", "repa_hidden", "repa_extra"):
                value = getattr(out, name)
                if value is not None:
                    setattr(out, name, value[:n])
            if out.logits is not None:   # a mask's decoder rows are the first rows of the chunk's mask: keep the real
                out.logits = out.logits[:n] if not isinstance(dec, Tensor) else out.logits[: int(dec[:n].sum())]
            outs.append(out)

        def cat(name: str) -> Tensor | None:
            parts = [getattr(o, name) for o in outs if getattr(o, name) is not None]
            return torch.cat(parts) if parts else None

        return StudentOutput(x_hat=cat("x_hat"), reg_hat=cat("reg_hat"), logits=cat("logits"),
                             repa_hidden=cat("repa_hidden"), repa_extra=cat("repa_extra"))

    def _forward(self, z: Tensor, q: Tensor, t: Tensor, w: Tensor, reg: Tensor | None, reg_q: Tensor | None,
                 decoder: bool | Tensor, repa: bool, weights: tuple[Tensor, Tensor, Tensor],
                 whole_head: bool = False, row_local: bool = False, t_to: Tensor | None = None) -> StudentOutput:
        """The network on a batch in one pass (``forward`` has checked the shapes); ``whole_head``: a decoder mask's
        logits come from the vocab head over every row (a fixed shape), then the mask's rows; ``row_local``: the
        layers whose kernels depend on the row count run each row alone (``layers.by_row``)."""
        cfg = self.config
        b, length, _ = z.shape
        rl = row_local
        x = self._input_path(z, q, weights, rl)
        with torch.autocast(z.device.type, enabled=False):
            t_tok = self.time_tokens + self.t_embedder(t, rl)[:, None]
            if cfg.flow_map:
                jump = torch.zeros_like(t) if t_to is None else (t_to - t).to(t.dtype)
                t_tok = t_tok + self.jump_embedder(jump, rl)[:, None]
            w_tok = self.w_tokens + self.w_embedder(w, rl)[:, None]
        gate = decoder.to(x.dtype) if isinstance(decoder, Tensor) else torch.full((b,), float(decoder), device=z.device)
        mode_tok = self.mode_tokens * gate.reshape(b, 1, 1).to(x.dtype)
        parts = [t_tok.expand(b, -1, -1), w_tok.expand(b, -1, -1), mode_tok]
        has_extra = False
        if cfg.extra_token == "reg" and reg is not None:
            rq = torch.zeros_like(reg) if reg_q is None else reg_q
            with torch.autocast(z.device.type, enabled=False):
                if cfg.reg_io == "direct":
                    parts.append(by_row(self.reg_in, torch.cat([reg, rq], dim=-1).float(), rl)[:, None])
                else:
                    r_d = by_row(self.reg_in, torch.cat([reg, rq]).float(), rl)
            if cfg.reg_io != "direct":
                parts.append(self._input_path(r_d[:b], r_d[b:], weights, rl)[:, None])
            has_extra = True
        elif cfg.extra_token == "olt":
            parts.append(self.olt_token.expand(b, -1, -1))
            has_extra = True
        parts.append(x)
        seq = torch.cat(parts, dim=1)
        n_skip = cfg.num_prefix + int(has_extra)
        cos, sin = self._rope(n_skip, length, z.device)

        repa_state = None
        for i, block in enumerate(self.blocks):
            if self.grad_checkpointing and self.training:
                seq = torch.utils.checkpoint.checkpoint(block, seq, cos, sin, use_reentrant=False)
            else:
                seq = block(seq, cos, sin, rl)
            if repa and i + 1 == cfg.repa_block:
                repa_state = seq

        text = seq[:, n_skip:]
        reg_hat = None
        with torch.autocast(z.device.type, enabled=False):
            # the text and the REG token through final_linear apart: slicing the H-wide states is cheap, slicing its
            # d-wide output cost a (B, L, d) zero-fill and copy in the backward pass
            h = self.final_norm(seq[:, cfg.num_prefix:].float())
            x_hat = by_row(self.final_linear, h[:, int(has_extra):], rl)
            if cfg.extra_token == "reg" and has_extra:
                head = self.reg_out if cfg.reg_io == "direct" else (lambda v: self.reg_out(self.final_linear(v)))
                reg_hat = by_row(head, h[:, 0], rl)
        logits = None
        if isinstance(decoder, Tensor):
            if whole_head and decoder.any():
                logits = by_row(self.vocab_logits, text, rl)[decoder]
            elif decoder.any():
                logits = by_row(self.vocab_logits, text[decoder], rl)
        elif decoder:
            logits = by_row(self.vocab_logits, text, rl)
        out = StudentOutput(x_hat=x_hat, reg_hat=reg_hat, logits=logits)
        if repa_state is not None:
            out.repa_hidden = repa_state[:, n_skip:]
            out.repa_extra = repa_state[:, cfg.num_prefix] if has_extra else None
        return out

    def num_parameters(self, part: str = "all") -> int:
        """Parameter count: ``body`` (no vocab head, no REPA projector), ``head``, ``repa``, or ``all``."""
        head = {"head_p", "head_p_bias", "head_u", "head_u_bias"}
        total = {"all": 0, "body": 0, "head": 0, "repa": 0}
        for name, p in self.named_parameters():
            n = p.numel()
            total["all"] += n
            if name in head:
                total["head"] += n
            elif name.startswith("repa_projector."):
                total["repa"] += n
            else:
                total["body"] += n
        return total[part]
