"""A vision-language model's processor, loaded as transformers loads it; where its video processor needs torchvision
and torchvision is missing (Qwen2-VL's, Qwen2.5-VL's, SmolVLM's on a machine with the CPU build of torch), the same processor
without videos: attnviz reads pictures only, and the image processor has a torchvision-free backend. An option the
checkpoint's image processor was saved with is kept where the processor's class would override it (Gemma 3's
pan-and-scan)."""

from __future__ import annotations

from typing import Any


def load_processor(ref: str, options: dict[str, Any]) -> Any:
    """``AutoProcessor.from_pretrained(ref)``, or the picture-only processor (see the module); a package the
    processor needs that is missing (SmolVLM's num2words) is one line naming it."""
    import transformers

    from ..errors import ModelNotFoundError

    try:
        try:
            processor = transformers.AutoProcessor.from_pretrained(ref, **options)
        except ImportError as exc:
            if "torchvision" not in str(exc).lower():
                raise
            processor = without_videos(ref, options)
    except ImportError as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ModelNotFoundError(f"{ref}: its processor needs a package that is not installed ({first})") from None
    return saved_options_kept(processor)


def saved_options_kept(processor: Any) -> Any:
    """The processor, where its class fixes an option for every call to its image processor (its ``images_kwargs``)
    that the image processor's class leaves unset but this checkpoint's image processor was saved with, keeping the
    saved one (Gemma 3's ``do_pan_and_scan`` and its ``pan_and_scan_*``: Gemma3Processor turns pan-and-scan off for
    a call without keywords, whatever the checkpoint says)."""
    fixed = getattr(type(processor), "images_kwargs", None)
    image = getattr(processor, "image_processor", None)
    if not isinstance(fixed, dict) or image is None:
        return processor
    saved = {key: getattr(image, key) for key in fixed
             if getattr(type(image), key, None) is None and getattr(image, key, None) is not None}
    if saved:
        processor.images_kwargs = {**fixed, **saved}
    return processor


def without_videos(ref: str, options: dict[str, Any]) -> Any:
    """The processor named by the checkpoint, built from its image processor, tokenizer and processor config's own
    settings, with no video processor."""
    import inspect
    import json

    import transformers
    from transformers.models.auto.processing_auto import processor_class_from_name

    from ..errors import ModelNotFoundError

    name = None
    settings: dict[str, Any] = {}  # the processor config's own (SmolVLM's image_seq_len)
    for file in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        try:
            found = transformers.utils.cached_file(ref, file, _raise_exceptions_for_missing_entries=False,
                                                   **{k: v for k, v in options.items() if k != "trust_remote_code"})
        except OSError:
            found = None
        if found:
            with open(found, encoding="utf-8") as handle:
                read = json.load(handle)
            name = read.get("processor_class") or name
            settings = read if file == "processor_config.json" else settings
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
    own = [key for key in inspect.signature(base.__init__).parameters
           if key not in ("self", "image_processor", "tokenizer", "video_processor", "chat_template")]
    return PicturesOnly(image_processor=image_processor, tokenizer=tokenizer,
                        chat_template=getattr(tokenizer, "chat_template", None),
                        **{key: settings[key] for key in own if key in settings})
