"""``python -m flows.cli``: the same as the ``modelplane`` console script."""

from flows.cli import main

if __name__ == "__main__":  # importing the package's modules (tests walk them all) must not run the CLI
    main()
