import sys

from kda_lab.cli import main

sys.exit(main())
