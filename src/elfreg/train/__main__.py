"""``torchrun --nproc_per_node=N -m elfreg.train --config FILE --output DIR [key=value ...]``."""

import sys

from elfreg.train.cli import main

sys.exit(main())
