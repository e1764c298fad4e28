"""``elfreg generate --show-steps [K]``: each sample's text at every K-th denoising step, on stderr.

On a terminal the views of a batch are redrawn in place, one line per sample, tokens that kept their place in
green and changed ones in red; elsewhere (a file, a pipe) each view is one plain line. The answers on stdout or in
``--out`` are the same with and without it; its decoder calls are not part of the NFE (elfreg.sampling.watch).
"""

from __future__ import annotations

import json
import shutil
from typing import IO

from elfreg.sampling.watch import StepView, Watch

GREEN, RED, RESET, UP, CLEAR = "\x1b[32m", "\x1b[31m", "\x1b[0m", "\x1b[{}A", "\x1b[2K"


def plain_line(v: StepView) -> str:
    """One view as a line: sample, step, time, how many tokens kept their place, the text as a JSON string."""
    return (f"prompt {v.prompt_index} sample {v.sample_index} step {v.step}/{v.steps} t={v.t:.4f} "
            f"stable {sum(v.stable)}/{len(v.stable)}: {json.dumps(v.text, ensure_ascii=False)}")


def live_line(v: StepView, width: int) -> str:
    """One view as a terminal line at most ``width`` columns wide, its tokens coloured by stability."""
    head = f"{v.prompt_index}.{v.sample_index} {v.step:>3}/{v.steps} t={v.t:.3f} "
    room, out = max(width - len(head) - 1, 0), []
    for piece, kept in zip(v.tokens, v.stable):
        piece = piece.replace("\n", "⏎")
        if len(piece) > room:
            piece = piece[:room]
        if piece:
            out.append(f"{GREEN if kept else RED}{piece}{RESET}")
        room -= len(piece)
        if room <= 0:
            break
    return head + "".join(out)


class StepPrinter:
    """A Watch callback writing views to ``stream``: live (redrawn in place) when ``live``, else plain lines."""

    def __init__(self, stream: IO[str], live: bool | None = None, width: int | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.width = width or shutil.get_terminal_size((100, 20)).columns
        self.block: list[tuple[int, int]] = []   # live: the samples of the lines drawn last, in order
        self.lines: dict[tuple[int, int], str] = {}

    def __call__(self, views: list[StepView]) -> None:
        if not self.live:
            self.stream.write("".join(plain_line(v) + "\n" for v in views))
            self.stream.flush()
            return
        keys = [(v.prompt_index, v.sample_index) for v in views]
        redraw = bool(self.block) and set(keys) <= set(self.block)   # the same batch: its lines are redrawn
        if not redraw:
            self.block, self.lines = keys, {}
        for key, v in zip(keys, views):
            self.lines[key] = live_line(v, self.width)
        up = UP.format(len(self.block)) if redraw else ""
        self.stream.write(up + "".join(f"\r{CLEAR}{self.lines.get(k, '')}\n" for k in self.block))
        self.stream.flush()


def step_watch(every: int | None, stream: IO[str]) -> Watch | None:
    """The Watch of ``--show-steps every`` printing to ``stream``; None without the flag."""
    return None if every is None else Watch(StepPrinter(stream), every)
