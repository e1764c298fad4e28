"""The generation run's own types live below the model layer: the sampling package imports neither the loader
(elfreg.loading), nor ElfModel (elfreg.pretrained), nor any command."""

import subprocess
import sys


def test_the_sampling_package_imports_no_model_layer_and_no_command():
    code = ("import sys, elfreg.sampling, elfreg.sampling.generate, elfreg.sampling.flags, elfreg.sampling.files; "
            "above = ('elfreg.loading', 'elfreg.pretrained', 'elfreg.hub', 'elfreg.cli', 'elfreg.generate', "
            "'elfreg.eval', 'elfreg.serve', 'elfreg.diagnose', 'elfreg.demo', 'elfreg.train'); "
            "bad = sorted(m for m in sys.modules if m in above or m.startswith(tuple(a + '.' for a in above))); "
            "print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

