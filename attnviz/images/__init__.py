"""Attention over images (issue 53): a picture read as untrusted input (:mod:`.files`), where each image token of
a model's sequence sits in the picture (:mod:`.layouts`, records a plugin extends), and an image encoder's
attention over its patches (:mod:`.encoder`: ViT, CLIP's and SigLIP's vision towers, DINOv2), drawn as heat over
the picture (:mod:`attnviz.render.overlay`)."""
