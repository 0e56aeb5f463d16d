"""Model organisms at length (issue 52): needle on the needle organism in every cell of 512 to 4,096 tokens × 5
depths, and on its saved checkpoint the same as on its TOML. Its own file, so the test runner can give it a worker of
its own while the rest of tests/test_organisms.py runs."""

from __future__ import annotations

from pathlib import Path

import pytest

NEEDLE_ORGANISM = str(Path(__file__).resolve().parent.parent / "sample_configs" / "organism_needle.toml")


@pytest.mark.slow  # 20 cells up to 4,096 tokens
def test_needle_retrieves_in_every_cell_up_to_4096_tokens_and_on_the_saved_checkpoint():
    from attnviz.api import needle
    from attnviz.organisms import organism_folder

    result = needle(NEEDLE_ORGANISM, lengths=[512, 1024, 2048, 4096], max_new_tokens=12)
    assert len(result.runs) == 20 and all(run.retrieved for run in result.runs)
    top = result.heads()[0]
    assert (top["layer"], top["head"]) == (1, 0) and top["retrieval_score"] >= 0.5
    # The checkpoint as it is saved (the folder the TOML was built into: save_organism writes the same files), run as
    # a plain checkpoint folder, its needle read from its config.json.
    saved = needle(str(organism_folder(NEEDLE_ORGANISM)[0]), lengths=[512], depths=[0.0, 1.0], max_new_tokens=12)
    same = needle(NEEDLE_ORGANISM, lengths=[512], depths=[0.0, 1.0], max_new_tokens=12)
    assert [r.answer for r in saved.runs] == [r.answer for r in same.runs]
    assert saved.heads() == [dict(h) for h in same.heads()]
