"""``attnviz tui``: a terminal explorer of every view (needs the ``tui`` extra: textual)."""
