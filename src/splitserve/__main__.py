"""``python -m splitserve``."""

from .cli import main

main()
