"""A vision-language model's processor, loaded as transformers loads it; where its video processor needs torchvision
and torchvision is missing (Qwen2-VL's and Qwen2.5-VL's on a machine with the CPU build of torch), the same processor
without videos: attnviz reads pictures only, and the image processor has a torchvision-free backend."""

from __future__ import annotations

from typing import Any


def load_processor(ref: str, options: dict[str, Any]) -> Any:
    """``AutoProcessor.from_pretrained(ref)``, or the picture-only processor (see the module)."""
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(ref, **options)
    except ImportError as exc:
        if "torchvision" not in str(exc).lower():
            raise
        return without_videos(ref, options)


def without_videos(ref: str, options: dict[str, Any]) -> Any:
    """The processor named by the checkpoint, built from its image processor and tokenizer with no video processor."""
    import json

    import transformers
    from transformers.models.auto.processing_auto import processor_class_from_name

    from ..errors import ModelNotFoundError

    name = None
    for file in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        try:
            found = transformers.utils.cached_file(ref, file, _raise_exceptions_for_missing_entries=False,
                                                   **{k: v for k, v in options.items() if k != "trust_remote_code"})
        except OSError:
            found = None
        if found:
            with open(found, encoding="utf-8") as handle:
                name = json.load(handle).get("processor_class") or name
        if name:
            break
    base = processor_class_from_name(name) if name else None
    if base is None:
        raise ModelNotFoundError(f"{ref}: its processor needs torchvision for videos and names no processor class to "
                                 "build without it; install torchvision (pip install torchvision)")

    class PicturesOnly(base):  # type: ignore[valid-type, misc]
        """``base`` with its image processor and tokenizer only (the attributes come from this signature)."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                     **kwargs: Any) -> None:
            base.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)  # type: ignore[misc]

    PicturesOnly.__name__ = base.__name__
    image_processor = transformers.AutoImageProcessor.from_pretrained(ref, **options)
    tokenizer = transformers.AutoTokenizer.from_pretrained(ref, **options)
    return PicturesOnly(image_processor=image_processor, tokenizer=tokenizer,
                        chat_template=getattr(tokenizer, "chat_template", None))
