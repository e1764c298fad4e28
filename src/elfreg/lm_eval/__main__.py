"""``python -m elfreg.lm_eval ...``: lm-eval's command line with the ``elfreg`` model type registered."""

import sys

from elfreg.lm_eval.cli import main

sys.exit(main(sys.argv[1:]))
