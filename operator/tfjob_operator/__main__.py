"""`python -m tfjob_operator` is the `tfjob` command (`tfjob_operator.client.cli`)."""

import sys

from tfjob_operator.client.cli import main

sys.exit(main())
