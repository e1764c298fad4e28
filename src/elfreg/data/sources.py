"""Data source specs: where training rows come from and how their columns map (spec §7)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from elfreg.tasks.formats import BadRowError

FORMATS = ("jsonl", "parquet", "hf", "disk", "auto")
TASKS = ("math", "code", "choice")
BAD_ROW_POLICIES = ("error", "skip")
ROLES = ("prompt", "response", "answer", "id")


@dataclass(frozen=True)
class RowFilter:
    """Keep a row only if column `column` is in `values` (string compare) or >= `min_value` (numeric)."""

    column: str
    values: tuple[str, ...] = ()
    min_value: float | None = None

    def __post_init__(self) -> None:
        if not self.column:
            raise ValueError("RowFilter.column must be a non-empty column name")
        if not self.values and self.min_value is None:
            raise ValueError(f"RowFilter({self.column!r}): set `values` or `min_value`")
        if self.values and self.min_value is not None:
            raise ValueError(f"RowFilter({self.column!r}): set only one of `values` / `min_value`")
        object.__setattr__(self, "values", tuple(str(v) for v in self.values))

    def keep(self, record: dict[str, Any], where: str) -> bool:
        """True if the raw record passes; BadRowError if the column is missing or not numeric."""
        if self.column not in record:
            raise BadRowError(f"{where}: filter column {self.column!r} missing")
        value = record[self.column]
        if self.values:
            return str(value) in self.values
        try:
            return float(value) >= float(self.min_value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise BadRowError(f"{where}: filter column {self.column!r} is not numeric: {value!r}") from None


@dataclass(frozen=True)
class SourceSpec:
    """One training data source: local files or a hub id, its column mapping and row filter (spec §7).

    `columns` maps roles (prompt, response, answer, id) to column names; `prompt` and `response`
    are required, `answer` (math final answer) and `id` are optional.
    """

    name: str
    task: str
    path: str | None = None  # local file, glob, or directory (jsonl/parquet/disk)
    hub_id: str | None = None  # Hugging Face dataset id, streamed
    hub_config: str | None = None
    split: str = "train"
    format: str = "auto"
    columns: dict[str, str] = field(default_factory=dict)
    filters: tuple[RowFilter, ...] = ()
    on_bad_row: str = "error"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("SourceSpec.name must be non-empty")
        if self.task not in TASKS:
            raise ValueError(f"SourceSpec.task must be one of {TASKS}, got {self.task!r}")
        if (self.path is None) == (self.hub_id is None):
            raise ValueError(f"SourceSpec {self.name!r}: set exactly one of `path` / `hub_id`")
        if self.format not in FORMATS:
            raise ValueError(f"SourceSpec.format must be one of {FORMATS}, got {self.format!r}")
        if self.hub_id is not None and self.format not in ("hf", "auto"):
            raise ValueError(f"SourceSpec {self.name!r}: hub_id needs format 'hf' (or 'auto')")
        if self.on_bad_row not in BAD_ROW_POLICIES:
            raise ValueError(f"SourceSpec.on_bad_row must be one of {BAD_ROW_POLICIES}, got {self.on_bad_row!r}")
        for role in ("prompt", "response"):
            if role not in self.columns:
                raise ValueError(f"SourceSpec {self.name!r}: columns must map {role!r}")
        unknown = set(self.columns) - set(ROLES)
        if unknown:
            raise ValueError(f"SourceSpec {self.name!r}: unknown column roles {sorted(unknown)}; allowed {ROLES}")
        filters = tuple(f if isinstance(f, RowFilter) else RowFilter(**f) for f in self.filters)
        object.__setattr__(self, "filters", filters)
        object.__setattr__(self, "columns", dict(self.columns))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceSpec:
        """Build from a YAML/JSON mapping; unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"SourceSpec: unknown fields {sorted(unknown)}")
        d = dict(d)
        if "filters" in d:
            d["filters"] = tuple(RowFilter(**f) if isinstance(f, dict) else f for f in d["filters"])
        return cls(**d)

    def map_row(self, record: dict[str, Any], where: str) -> dict[str, Any] | None:
        """Raw record → {"prompt", "response", "answer", "id", "source"} or None if filtered out.

        Raises BadRowError (naming `where`) for a missing column or a non-string text field.
        """
        if not isinstance(record, dict):
            raise BadRowError(f"{where}: row is {type(record).__name__}, expected a JSON object")
        for flt in self.filters:
            if not flt.keep(record, where):
                return None
        out: dict[str, Any] = {"source": self.name, "id": where}
        for role, column in self.columns.items():
            if column not in record:
                raise BadRowError(f"{where}: missing column {column!r} (role {role!r})")
            value = record[column]
            if role in ("prompt", "response") and not isinstance(value, str):
                raise BadRowError(f"{where}: column {column!r} must be a string, got {type(value).__name__}")
            if role == "answer" and value is not None and not isinstance(value, (str, int, float)):
                raise BadRowError(f"{where}: column {column!r} must be a string or number, got {type(value).__name__}")
            out[role] = value if role != "id" else f"{self.name}:{value}"
        out.setdefault("answer", None)
        return out


# Column mappings for the paper's training sets (spec §7). OpenCodeInstruct has no language column:
# the data set card describes Python programming questions, so every row is taken (see docs/data.md).
_PRESETS: dict[str, dict[str, Any]] = {
    "openmathinstruct2-gsm8k": dict(
        task="math", hub_id="nvidia/OpenMathInstruct-2", split="train",
        columns={"prompt": "problem", "response": "generated_solution", "answer": "expected_answer"},
        filters=(RowFilter("problem_source", values=("gsm8k", "augmented_gsm8k")),),
    ),
    "openmathinstruct2-math": dict(
        task="math", hub_id="nvidia/OpenMathInstruct-2", split="train",
        columns={"prompt": "problem", "response": "generated_solution", "answer": "expected_answer"},
        filters=(RowFilter("problem_source", values=("math", "augmented_math")),),
    ),
    "metamathqa": dict(
        task="math", hub_id="meta-math/MetaMathQA", split="train",
        columns={"prompt": "query", "response": "response"},
    ),
    "opencodeinstruct-python": dict(
        task="code", hub_id="nvidia/OpenCodeInstruct", split="train",
        columns={"prompt": "input", "response": "output", "id": "id"},
    ),
    "gsm8k-train": dict(
        task="math", path="{shared}/data/gsm8k/train.jsonl", format="jsonl",
        columns={"prompt": "question", "response": "answer"},
    ),
}


def preset(preset_name: str, **overrides: Any) -> SourceSpec:
    """A SourceSpec for one of the paper's sets; `overrides` replace fields (e.g. path= for a local copy).

    Giving `path` drops the preset's hub id (and vice versa). `{shared}` in a path is left for the caller.
    """
    if preset_name not in _PRESETS:
        raise ValueError(f"unknown preset {preset_name!r}; known: {sorted(_PRESETS)}")
    fields_ = dict(_PRESETS[preset_name])
    if "path" in overrides:
        fields_.pop("hub_id", None)
        fields_.setdefault("format", "auto")
    if "hub_id" in overrides:
        fields_.pop("path", None)
        fields_["format"] = "hf"
    fields_.update(overrides)
    return SourceSpec(name=fields_.pop("name", preset_name), **fields_)


def preset_names() -> list[str]:
    """Names accepted by preset()."""
    return sorted(_PRESETS)
