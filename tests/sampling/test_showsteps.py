"""`elfreg generate --show-steps`: plain lines off a terminal, a live view redrawn in place on one; the answers are
those made without it."""

import io
import json

from elfreg.generate.cli import cmd_generate
from elfreg.sampling.showsteps import StepPrinter
from elfreg.sampling.watch import StepView

from generate.test_cli import _args, _loader


def _run(capsys, *extra):
    argv = ["--model", "m", "--prompt", "one plus two is", "--prompt", "four", "--nfe", "6", "--rho", "2",
            "--seed", "4", "--samples", "2", "--no-progress", "--format", "jsonl", *extra]
    assert cmd_generate(_args(*argv), load=_loader([])) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def test_show_steps_prints_views_and_changes_no_answer(capsys):
    plain, _ = _run(capsys)
    watched, err = _run(capsys, "--show-steps", "2")
    assert [r["response_token_ids"] for r in watched] == [r["response_token_ids"] for r in plain]
    assert [r["nfe_spent"] for r in watched] == [r["nfe_spent"] for r in plain] == [6] * 4
    assert [r["view_calls"] for r in watched] == [3] * 4   # steps 2, 4 and the last, 5: not in nfe_spent
    lines = [line for line in err.splitlines() if line.startswith("prompt ")]
    assert len(lines) == 4 * 3 and "\x1b[" not in err   # not a terminal: plain lines
    last = {(r["prompt_index"], r["sample_index"]): r["response"] for r in watched}
    for (p, s), text in last.items():
        mine = [line for line in lines if line.startswith(f"prompt {p} sample {s} ")]
        assert [line.split()[5] for line in mine] == ["2/5", "4/5", "5/5"]
        assert mine[-1].endswith(": " + json.dumps(text))   # early-stop: the last view is the answer
    _, err = _run(capsys, "--show-steps")
    assert len([line for line in err.splitlines() if line.startswith("prompt ")]) == 4 * 5   # K defaults to 1


def test_show_steps_refuses_a_bad_k(capsys):
    import pytest

    with pytest.raises(SystemExit):
        _args("--model", "m", "--prompt", "x", "--show-steps", "0")
    assert "--show-steps: need an integer" in capsys.readouterr().err


def test_the_live_view_redraws_a_batch_in_place():
    out = io.StringIO()
    printer = StepPrinter(out, live=True, width=60)

    def view(p, step, tokens, stable):
        return StepView(p, 0, step, 3, step / 4, "".join(tokens), list(range(len(tokens))), tokens, stable)

    printer([view(0, 1, ["a", " b"], [False, False]), view(1, 1, ["c"], [False])])
    printer([view(0, 2, ["a", " d"], [True, False]), view(1, 2, ["c"], [True])])
    printer([view(2, 1, ["e"], [False])])   # the next batch: new lines below
    text = out.getvalue()
    assert text.count("\x1b[2A") == 1 and "\x1b[1A" not in text
    assert "\x1b[32ma\x1b[0m\x1b[31m d\x1b[0m" in text   # kept: green, changed: red
    assert all(len(line) <= 60 + 40 for line in text.split("\n"))
