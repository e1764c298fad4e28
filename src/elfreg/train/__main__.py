"""``torchrun --nproc_per_node=N -m elfreg.train --config FILE --output DIR [key=value ...]``."""

import sys

from elfreg.console import guarded

sys.exit(guarded("python -m elfreg.train", "elfreg.train.cli:main"))
