"""``python -m hpnlab``: the same as the ``hpnlab`` command (e.g. ``sudo .venv/bin/python -m hpnlab up``)."""

import sys

from hpnlab.entry import main

sys.exit(main())
