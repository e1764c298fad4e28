"""``python -m elfreg.distill`` (e.g. under ``torchrun``)."""

import sys

from elfreg.distill.cli import main

sys.exit(main())
