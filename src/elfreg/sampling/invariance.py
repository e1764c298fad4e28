"""Batch invariance: a sample does not depend on the rows it is computed with (docs/sampling.md, "Batch invariance").

``--batch-invariant`` (the default) puts the network in the cheapest scheme measured to keep every row's result
bit for bit whatever its batch, per device:

- CPU: ``layers``: one pass over the batch, with each row alone only in the layers whose kernels depend on the row
  count (the GEMMs, silu, gelu, cos: ``elfreg.model.layers.by_row``). benchmarks/bench_sampler.py --invariance
  measures it against one plain pass and against each row alone (``rows``, the scheme before).
- CUDA: ``chunks``: the batch in chunks of exactly ``CUDA_CHUNK`` rows, the last padded with zero rows, so every
  kernel sees one shape whatever the batch; on a GPU a kernel's result for a row does not depend on the row's place
  in a fixed-shape call (no split of a row between vector and scalar paths; one tiling per shape), which the
  GPU-marked test tests/sampling/test_cuda_sampling.py checks bit for bit (``make gpu-check`` runs it). Per-row
  loops would launch many small kernels and idle the device; padding costs only a partial chunk's empty rows.

``--no-batch-invariant`` runs one plain pass: fastest, and a row's last bits (rarely a token) then depend on the batch.
"""

from __future__ import annotations

from typing import Any

CUDA_CHUNK = 16   # rows per call on CUDA: a full chunk at the presets' canvas (1,024) is ~16k tokens per GEMM
SCHEMES = ("off", "rows", "layers", "chunks")


def _device_type(device: Any) -> str:
    return "cpu" if device is None else getattr(device, "type", None) or str(device).split(":")[0]


def default_batch_invariant(device: Any = None) -> bool:
    """The default of ``--batch-invariant`` on ``device``: on everywhere (each device has a scheme for it)."""
    return True


def resolve_batch_invariant(asked: bool | None, device: Any = None) -> bool:
    """``--batch-invariant`` as given, else the device's default."""
    return default_batch_invariant(device) if asked is None else bool(asked)


def scheme_for(batch_invariant: bool, device: Any = None) -> str:
    """The invariance scheme a run uses: ``off``, or the device's (``layers`` on the CPU, ``chunks`` on CUDA)."""
    if not batch_invariant:
        return "off"
    return "chunks" if _device_type(device) == "cuda" else "layers"


def apply_scheme(network: Any, scheme: str) -> None:
    """Put a network that has the switches (ElfStudent) in ``scheme``; others are left as they are."""
    if scheme not in SCHEMES:
        raise ValueError(f"batch invariance scheme: one of {', '.join(SCHEMES)}, got {scheme!r}")
    if hasattr(network, "invariant_rows"):
        network.invariant_rows = {"rows": 1, "chunks": CUDA_CHUNK}.get(scheme, 0)
    if hasattr(network, "row_local_layers"):
        network.row_local_layers = scheme == "layers"


def pass_rows(scheme: str, batch: int) -> int:
    """Rows one forward pass holds at once in ``scheme``: one (``rows``), a chunk (``chunks``), else the batch."""
    return {"rows": 1, "chunks": CUDA_CHUNK}.get(scheme, batch)


def invariance_settings(batch_invariant: bool, batch_size: int | None, scheme: str | None = None) -> dict:
    """What a run's fingerprint records about batching: the switch and its scheme, and the batch size when samples
    depend on it."""
    if not batch_invariant:
        return {"batch_invariant": False, "batch_size": batch_size}
    return {"batch_invariant": True, **({"batch_invariance": scheme} if scheme else {})}
