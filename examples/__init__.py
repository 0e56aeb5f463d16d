"""The example texts the README's commands read, installed with attnviz so they work from any folder."""
