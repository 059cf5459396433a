"""``python -m sim``: run simulated vLLM replicas until SIGINT/SIGTERM."""

import sys

from sim.cli import main

sys.exit(main())
