"""``python -m attnviz``."""

from ._entry import main

main()
