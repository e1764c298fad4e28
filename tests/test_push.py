"""ElfModel.push_to_hub and `elfreg push` against a mocked Hub API at the HTTP level (tests/_mock_hub.py)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, constants

from _mock_hub import MockHub
from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.pretrained import ElfModel

REPO = Path(__file__).resolve().parents[1]


def _model():
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=24, max_prompt_len=16),
                       backbones=BackboneConfig(encoder="Qwen/Qwen3-0.6B", encoder_layer=2, teacher=None,
                                                dtype="float32"))
    torch.manual_seed(0)
    return ElfModel.new(cfg)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with MockHub() as hub:
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)   # the plain LFS protocol, which the mock speaks
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)      # the mock is reachable, whatever the shell says
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))     # no token saved on this machine is used
        yield hub


def test_push_to_hub_uploads_the_model_and_its_card(hub, tmp_path):
    model = _model()
    folder = model.save_pretrained(tmp_path / "model")
    url = model.push_to_hub("alice/tiny-elf", token="hf_test")
    assert url.startswith(f"{hub.url}/alice/tiny-elf/commit/")
    files = hub.repos["alice/tiny-elf"]
    assert sorted(files) == ["README.md", "config.json", "model.safetensors", "stats.safetensors"]
    for name in ("config.json", "model.safetensors", "stats.safetensors"):
        assert files[name] == (folder / name).read_bytes(), name
    # the weights went through the LFS batch API and its PUT, by content hash
    oid = hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert ("PUT", f"/lfs-upload/{oid}", None) in [(m, p, None) for m, p, _ in hub.requests]
    assert all(auth == "Bearer hf_test" for m, p, auth in hub.requests if m == "POST")
    card_path = tmp_path / "pushed-README.md"
    card_path.write_bytes(files["README.md"])
    card = ModelCard.load(card_path)
    assert card.data.library_name == "elfreg" and card.data.model_name == "alice/tiny-elf"
    assert card.data.base_model == ["Qwen/Qwen3-0.6B"]
    assert files["README.md"] == (folder / "README.md").read_bytes()   # the folder's card has the repo's title now
    # a second push to the same repo (it exists: 409 on create) is another commit
    assert model.push_to_hub("alice/tiny-elf", token="hf_test").startswith(hub.url)


def test_a_model_never_saved_is_pushed_from_a_temporary_folder(hub):
    _model().push_to_hub("alice/fresh", token="hf_test", private=True)
    assert hub.private["alice/fresh"] is True
    assert set(hub.repos["alice/fresh"]) == {"README.md", "config.json", "model.safetensors", "stats.safetensors"}


def test_push_refuses_a_folder_that_is_no_model_and_a_bad_repo_id(hub, tmp_path):
    from elfreg.push import push_folder

    folder = _model().save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match="OWNER/NAME"):
        push_folder(folder, "no-owner", token="hf_test")
    (folder / "stats.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="missing stats.safetensors"):
        push_folder(folder, "alice/x", token="hf_test")
    assert hub.requests == []   # refused before any request


def test_elfreg_push_command_with_hf_endpoint(tmp_path):
    folder = _model().save_pretrained(tmp_path / "model")
    with MockHub() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf"),
               "PYTHONPATH": str(REPO / "src")}
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE"):
            env.pop(name, None)
        run = [sys.executable, "-m", "elfreg.cli", "push", "--model", str(folder), "--repo", "bob/elf"]
        no_token = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
        assert no_token.returncode == 2 and "elfreg push: error: cannot push to the Hub repo 'bob/elf'" in \
            no_token.stderr and no_token.stderr.count("\n") == 1
        ok = subprocess.run(run, env={**env, "HF_TOKEN": "hf_cli"}, capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith(f"{hub.url}/bob/elf/commit/")
        assert set(hub.repos["bob/elf"]) == {"README.md", "config.json", "model.safetensors", "stats.safetensors"}


def _tree(folder):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


def _push_cli(folder, endpoint, tmp_path):
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf"),
           "PYTHONPATH": str(REPO / "src"), "HF_TOKEN": "hf_cli"}
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run([sys.executable, "-m", "elfreg.cli", "push", "--model", str(folder), "--repo", "bob/elf"],
                          env=env, capture_output=True, text=True, timeout=300)


def _refused_port():
    import socket

    with socket.socket() as s:   # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("endpoint, cause", [
    (lambda hub: f"http://127.0.0.1:{_refused_port()}", "the connection was refused"),
    (lambda hub: "http://no-such-host.invalid", "the host name did not resolve (DNS)"),
    (lambda hub: hub.url, "HTTP 500"),
    (lambda hub: hub.url, "HTTP 404"),
])
def test_a_failed_push_is_one_line_exit_2_and_leaves_the_folder_as_it_was(tmp_path, endpoint, cause):
    folder = _model().save_pretrained(tmp_path / "model")
    before = _tree(folder)
    with MockHub() as hub:
        hub.fail_status = int(cause.split()[1]) if cause.startswith("HTTP") else None
        run = _push_cli(folder, endpoint(hub), tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("elfreg push: error: ") and run.stderr.count("\n") == 1, run.stderr
    assert cause in run.stderr and "bob/elf" in run.stderr
    assert _tree(folder) == before   # the card was not retitled: nothing was uploaded


def test_the_card_is_retitled_in_the_folder_only_after_the_upload(hub, tmp_path):
    from elfreg.push import push_folder

    folder = _model().save_pretrained(tmp_path / "model")
    before = (folder / "README.md").read_bytes()
    push_folder(folder, "alice/titled", token="hf_test")
    assert hub.repos["alice/titled"]["README.md"] == (folder / "README.md").read_bytes() != before
    assert b"alice/titled" in (folder / "README.md").read_bytes()


def test_a_tls_failure_and_a_timeout_are_named(hub, tmp_path, monkeypatch):
    import httpx2

    from elfreg.push import hub_failure, push_folder

    folder = _model().save_pretrained(tmp_path / "model")
    before = _tree(folder)
    # https to a server that speaks plain HTTP: the TLS handshake fails
    monkeypatch.setattr(constants, "ENDPOINT", hub.url.replace("http://", "https://"))
    with pytest.raises(OSError) as info:
        push_folder(folder, "alice/tls", token="hf_test")
    assert "the TLS handshake failed" in str(info.value) and "\n" not in str(info.value)
    assert _tree(folder) == before
    line = hub_failure(httpx2.ReadTimeout("The read operation timed out"), "alice/x", "https://hub")
    assert line == ("cannot reach the Hugging Face Hub at https://hub to push 'alice/x': the connection timed out "
                    "(The read operation timed out)")
