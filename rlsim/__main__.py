import sys

from rlsim.cli import main

sys.exit(main())
