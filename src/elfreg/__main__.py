import sys

from elfreg.console import run

sys.exit(run())
