"""``python -m bench.sim``: run simulated vLLM replicas until SIGINT/SIGTERM."""

import sys

from bench.sim.cli import main

sys.exit(main())
