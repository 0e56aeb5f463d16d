"""Attention over sound (issue 61): a sound file read as untrusted input (:mod:`.read`), a Whisper checkpoint loaded
once (:mod:`.model`), a clip as the model hears it (:mod:`.hearing`: its log-mel window and the positions that hold
it), what the decoder reads (:mod:`.transcript`: the prompt, a given or greedy transcript), Whisper's encoder, decoder
and cross-attention as an ``AttentionResult`` (:mod:`.whisper`), word and token timings as openai-whisper's
``find_alignment`` computes them (:mod:`.timing`, with :mod:`.dtw`'s filters and :mod:`.words`' word splitting), a set
of alignment heads in the forms transformers, openai-whisper and whisper.cpp load (:mod:`.heads_format`), and sound
organisms: a tiny Whisper with planted heads built from a TOML (:mod:`.organism_spec`, :mod:`.organism`).

soundfile and soxr (the ``sound`` extra) are imported only when a sound file is read."""
