"""``python -m spade.cli``: the same as the ``spade`` console script."""

from spade.cli import main

main()
