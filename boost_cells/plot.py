"""``python -m boost_cells.plot RUN.jsonl -o RUN.png``: the command; the drawing is ``diagnostics.plot``."""
import sys

from .diagnostics.plot import main

if __name__ == "__main__":
    sys.exit(main())
