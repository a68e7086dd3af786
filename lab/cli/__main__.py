"""``python -m hpnlab.cli``: the same as the ``hpnlab`` command."""

import sys

from hpnlab.cli import main

sys.exit(main())
