import sys

from hpnlab.docgen import main

sys.exit(main())
