"""docs/tutorial.ipynb runs from top to bottom (a real Jupyter kernel) on a demo-size model, so it never goes stale."""

import os
from pathlib import Path

import pytest

from helpers import make_tiny_elf_model

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "tutorial.ipynb"


@pytest.mark.slow
def test_the_tutorial_notebook_runs(tmp_path, tiny_lm_dir, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the notebook test needs the test extras (nbformat)")
    nbclient = pytest.importorskip("nbclient", reason="the notebook test needs the test extras (nbclient)")
    pytest.importorskip("ipykernel", reason="the notebook test needs the test extras (ipykernel)")
    model = make_tiny_elf_model(tmp_path / "model", tiny_lm_dir)
    src = str(Path(__file__).resolve().parents[1] / "src")
    monkeypatch.setenv("ELFREG_MODEL", str(model))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.delenv("MPLBACKEND", raising=False)   # the kernel's inline backend shows the plot
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "stored without outputs"
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"{model}: " in text and "step " in text and "NFE 16: " in text
    assert any(o.get("data", {}).get("image/png") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
