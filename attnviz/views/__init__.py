"""What each command shows, as data, computed from a loaded source one layer at a time.

``pages`` (the interactive page), ``pooled`` (heatmaps of inputs too long to draw cell by cell).
:mod:`attnviz.api` names them all for callers.
"""
