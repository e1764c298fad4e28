import sys

from elfreg.cli import main

sys.exit(main())
