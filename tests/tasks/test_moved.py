"""Old import paths of the moved task modules keep working: each warns and gives the very same object."""

import importlib

import pytest

ALIASES = [
    ("elfreg.demo.answers", "extract_answer", "elfreg.tasks.synthetic", "extract_answer"),
    ("elfreg.demo.answers", "score", "elfreg.tasks.synthetic", "score"),
    ("elfreg.data.templates", "apply_template", "elfreg.tasks.formats", "apply_template"),
    ("elfreg.data.templates", "last_boxed", "elfreg.tasks.formats", "last_boxed"),
    ("elfreg.eval.answers", "extract_choice", "elfreg.tasks.answers", "extract_choice"),
    ("elfreg.eval.answers", "extract_gsm8k", "elfreg.tasks.answers", "extract_gsm8k"),
    ("elfreg.eval.mathcheck", "verify_answer", "elfreg.tasks.mathcheck", "verify_answer"),
    ("elfreg.eval.prompts", "choice_prompt", "elfreg.tasks.formats", "choice_prompt"),
    ("elfreg.demo.task", "make_split", "elfreg.tasks.chain", "make_split"),
    ("elfreg.demo.arith", "all_problems", "elfreg.tasks.arith", "all_problems"),
    ("elfreg.demo.benchmark", "load_demo_arith", "elfreg.eval.demo_benchmarks", "load_demo_arith"),
    ("elfreg.sampling.answers", "answer_for", "elfreg.tasks.registry", "extract_for"),
    ("elfreg.sampling.answers", "text_answers", "elfreg.sampling.decode", "text_answers"),
    ("elfreg.sampling.answers", "extractor", "elfreg.tasks.answers", "extractor"),
]


@pytest.mark.parametrize("old, name, new, new_name", ALIASES)
def test_old_path_warns_and_is_the_same_object(old, name, new, new_name):
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{new_name}: import {new_name} from {new}"):
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(importlib.import_module(new), new_name)
    with pytest.warns(DeprecationWarning):
        exec(f"from {old} import {name} as again", ns := {})
    assert ns["again"] is got


def test_an_unknown_name_of_an_old_path_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        importlib.import_module("elfreg.sampling.answers").nope


@pytest.mark.parametrize("name, new", [("load_elf_model", "elfreg.loading"), ("LoadedModel", "elfreg.loading"),
                                       ("ElfModelEncoder", "elfreg.pretrained")])
def test_the_loader_s_old_home_warns_and_is_the_same_object(name, new):
    import elfreg.sampling.cli as old

    with pytest.warns(DeprecationWarning, match=f"elfreg.sampling.cli.{name} moved"):
        got = getattr(old, name)
    assert got is getattr(importlib.import_module(new), name)
