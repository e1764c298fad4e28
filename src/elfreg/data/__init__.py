"""Training data: sources and streaming readers, templates, the canvas, decontamination (spec §2, §7)."""

from elfreg.data.canvas import (Canvas, CanvasBatch, CanvasConfig, CanvasOverflowError, CanvasStats,
                                build_canvas, canvas_from_ids, collate, iter_canvases)
from elfreg.data.readers import ReadStats, iter_examples, iter_source
from elfreg.data.sources import BadRowError, RowFilter, SourceSpec, preset, preset_names
from elfreg.data.stream import ExampleStream
from elfreg.tasks.formats import apply_template, extract_final_answer, format_math_response

__all__ = [
    "BadRowError", "Canvas", "CanvasBatch", "CanvasConfig", "CanvasOverflowError", "CanvasStats", "ExampleStream",
    "ReadStats", "RowFilter", "SourceSpec", "apply_template", "build_canvas", "canvas_from_ids", "collate",
    "extract_final_answer", "format_math_response", "iter_canvases", "iter_examples", "iter_source", "preset",
    "preset_names",
]
