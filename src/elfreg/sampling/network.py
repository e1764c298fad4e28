"""The network contract the samplers rely on, and an NFE counter around it (spec §5)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import torch


@runtime_checkable
class StudentLike(Protocol):
    """What a sampler needs from the ELF student (src/elfreg/model/student.py implements it).

    forward(z, q, t, w, *, reg, reg_q, decoder) -> output with .x_hat (B, L, d), .reg_hat (B, d_r) or None,
    .logits (B, L, V_head) or None; config has feature_dim, reg_dim, extra_token, max_len.
    """

    config: Any

    def __call__(self, z: torch.Tensor, q: torch.Tensor, t: torch.Tensor, w: torch.Tensor, *,
                 reg: torch.Tensor | None = None, reg_q: torch.Tensor | None = None,
                 decoder: bool | torch.Tensor = False) -> Any: ...

    def head_to_token_ids(self, idx: torch.Tensor) -> torch.Tensor: ...


@dataclass
class NFECount:
    """Network calls spent on one batch, and per row of the batch the calls whose input held that row.

    A call counts one NFE for every row it computes; rows that left the batch (adaptive exit) are not computed and
    not counted. ``denoiser_calls`` / ``decoder_calls`` count the calls themselves. ``view_calls`` / ``row_view``
    count the decoder calls made only to show the path while it runs (``NFECounter.apart``): never part of the NFE.
    """

    denoiser_calls: int = 0
    decoder_calls: int = 0
    row_denoiser: list[int] = field(default_factory=list)   # per batch row
    row_decoder: list[int] = field(default_factory=list)
    view_calls: int = 0
    row_view: list[int] = field(default_factory=list)

    @property
    def nfe(self) -> int:
        """NFE = denoiser calls + decoder calls (spec §5); per row when every call held every row."""
        return self.denoiser_calls + self.decoder_calls

    @property
    def row_nfe(self) -> list[int]:
        """NFE of each batch row: the denoiser and decoder calls that computed it."""
        return [a + b for a, b in zip(self.row_denoiser, self.row_decoder)]


class NFECounter:
    """Wraps a network; counts denoiser-mode and decoder-mode calls (spec §5: NFE = denoiser calls + 1), per row.

    ``reset(rows)`` starts a batch of that many rows, all of them computed by every call until ``select`` names the
    rows that the following calls hold (in order); a call whose batch does not match them is an error, so a row is
    counted exactly for the calls that computed it.
    """

    def __init__(self, network: StudentLike) -> None:
        self.network = network
        self.count = NFECount()
        self.rows: list[int] | None = None
        self._apart: list[int] | None = None   # inside ``apart``: the rows of the view calls

    @property
    def config(self) -> Any:
        return self.network.config

    def reset(self, rows: int = 0) -> None:
        """Start a new batch's count; ``rows`` > 0 also counts per row (rows 0 .. rows - 1, all selected)."""
        self.count = NFECount(row_denoiser=[0] * rows, row_decoder=[0] * rows, row_view=[0] * rows)
        self.rows = list(range(rows)) if rows else None

    def select(self, rows: Sequence[int]) -> None:
        """The batch rows (indices since reset) that the following calls compute, in order."""
        self.rows = [int(r) for r in rows]

    @contextmanager
    def apart(self, rows: Sequence[int]) -> Iterator[None]:
        """Calls inside compute these batch rows only to be looked at (a view of the path): counted in view_calls,
        not in the NFE, and outside the selected rows' check."""
        self._apart = [int(r) for r in rows]
        try:
            yield
        finally:
            self._apart = None

    def __call__(self, z: torch.Tensor, q: torch.Tensor, t: torch.Tensor, w: torch.Tensor, *,
                 reg: torch.Tensor | None = None, reg_q: torch.Tensor | None = None,
                 decoder: bool | torch.Tensor = False, t_to: torch.Tensor | None = None) -> Any:
        # a flow-map model's jump end goes through only when given: other networks never see the keyword
        extra = {} if t_to is None else {"t_to": t_to}
        if self._apart is not None:
            if z.shape[0] != len(self._apart):
                raise RuntimeError(f"NFECounter: a view call on {z.shape[0]} rows, {len(self._apart)} named")
            self.count.view_calls += 1
            for r in self._apart:
                if r < len(self.count.row_view):
                    self.count.row_view[r] += 1
            return self.network(z, q, t, w, reg=reg, reg_q=reg_q, decoder=decoder, **extra)
        is_decoder = bool(decoder.any()) if isinstance(decoder, torch.Tensor) else bool(decoder)
        if self.rows is not None:
            if z.shape[0] != len(self.rows):
                raise RuntimeError(f"NFECounter: a call on {z.shape[0]} rows, but {len(self.rows)} rows are selected")
            per_row = self.count.row_decoder if is_decoder else self.count.row_denoiser
            for r in self.rows:
                per_row[r] += 1
        if is_decoder:
            self.count.decoder_calls += 1
        else:
            self.count.denoiser_calls += 1
        return self.network(z, q, t, w, reg=reg, reg_q=reg_q, decoder=decoder, **extra)

    def head_to_token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        return self.network.head_to_token_ids(idx)


def is_flow_map(config: Any) -> bool:
    """True for a flow-map network (model.flow_map): each denoiser call is told its jump's end, the next grid time."""
    return getattr(config, "flow_map", False) is True


def uses_reg_state(config: Any, drop_reg: bool) -> bool:
    """True when the sampler carries a REG state: model has a REG token and it is not dropped (spec §5, §10)."""
    return getattr(config, "extra_token", "none") == "reg" and not drop_reg
