"""``python -m flows.cli``: the same as the ``modelplane`` console script."""

from flows.cli import main

main()
