import pytest

from elfreg.data.sources import BadRowError, RowFilter, SourceSpec, preset, preset_names


def test_spec_validation_names_the_field():
    cols = {"prompt": "q", "response": "a"}
    with pytest.raises(ValueError, match="task"):
        SourceSpec(name="s", task="poetry", path="x.jsonl", columns=cols)
    with pytest.raises(ValueError, match="exactly one of `path` / `hub_id`"):
        SourceSpec(name="s", task="math", path="x.jsonl", hub_id="a/b", columns=cols)
    with pytest.raises(ValueError, match="'response'"):
        SourceSpec(name="s", task="math", path="x.jsonl", columns={"prompt": "q"})
    with pytest.raises(ValueError, match="unknown column roles"):
        SourceSpec(name="s", task="math", path="x.jsonl", columns={**cols, "label": "y"})
    with pytest.raises(ValueError, match="on_bad_row"):
        SourceSpec(name="s", task="math", path="x.jsonl", columns=cols, on_bad_row="ignore")
    with pytest.raises(ValueError, match="values"):
        RowFilter("problem_source")
    with pytest.raises(ValueError, match="unknown fields"):
        SourceSpec.from_dict({"name": "s", "task": "math", "path": "x", "columns": cols, "colour": 1})


def test_from_dict_builds_filters():
    spec = SourceSpec.from_dict({"name": "s", "task": "code", "path": "x.jsonl",
                                 "columns": {"prompt": "input", "response": "output"},
                                 "filters": [{"column": "average_test_score", "min_value": 0.5}]})
    assert spec.filters == (RowFilter("average_test_score", min_value=0.5),)
    assert spec.map_row({"input": "i", "output": "o", "average_test_score": "0.4"}, "f:1") is None
    assert spec.map_row({"input": "i", "output": "o", "average_test_score": "0.6"}, "f:1")["prompt"] == "i"


def test_openmathinstruct_presets_split_gsm8k_and_math():
    gsm, mth = preset("openmathinstruct2-gsm8k"), preset("openmathinstruct2-math")
    assert gsm.hub_id == "nvidia/OpenMathInstruct-2" and gsm.task == "math"
    row = {"problem": "P", "generated_solution": "S", "expected_answer": "3", "problem_source": "augmented_gsm8k"}
    ex = gsm.map_row(row, "omi2 row 0")
    assert ex == {"source": "openmathinstruct2-gsm8k", "id": "omi2 row 0", "prompt": "P", "response": "S",
                  "answer": "3"}
    assert mth.map_row(row, "omi2 row 0") is None
    assert mth.map_row({**row, "problem_source": "math"}, "omi2 row 0") is not None
    assert {"metamathqa", "opencodeinstruct-python", "gsm8k-train"} <= set(preset_names())


def test_preset_path_override_drops_hub_id():
    spec = preset("metamathqa", path="/tmp/mmqa.parquet")
    assert spec.hub_id is None and spec.path == "/tmp/mmqa.parquet"
    assert spec.columns == {"prompt": "query", "response": "response"}


def test_map_row_errors_name_location():
    spec = preset("gsm8k-train", path="train.jsonl")
    with pytest.raises(BadRowError, match=r"train.jsonl:7: missing column 'answer'"):
        spec.map_row({"question": "q"}, "train.jsonl:7")
    with pytest.raises(BadRowError, match=r"train.jsonl:8: column 'question' must be a string, got int"):
        spec.map_row({"question": 3, "answer": "a"}, "train.jsonl:8")
    with pytest.raises(BadRowError, match="expected a JSON object"):
        spec.map_row([1, 2], "train.jsonl:9")
