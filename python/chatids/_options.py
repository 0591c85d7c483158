"""The options of one call as one object: :class:`CallOptions`.

Every public method of :class:`chatids.Encoder` takes its options as keyword arguments (that is
the API) and hands them on as one dict, its own arguments by name (:func:`call_options`), to
its route: the compiled core, which converts the dict once into its Rust options
(``src/python/options.rs``), or the jinja2 fallback, which reads the same keys. A new option is
one key here, one field in the Rust conversion, and a parameter of the public methods that
offer it. Building the dict from ``locals()`` costs about 1.5 microseconds, which matters on a
serving hot path where a short prompt takes ten; so ``Encoder.encode``, when every option but
the generation prompt, sanitizing and the template arguments has its default, sends only those
keys (a missing key is the default). ``tests/test_options.py`` checks that every parameter of
every public method reaches the core.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional, TypedDict, cast

Clock = tuple[int, int, int, int, int, int]
"""(year, month, day, hour, minute, second): what the template's ``strftime_now()`` reads."""


class CallOptions(TypedDict, total=False):
    """The options of one call, by the public methods' parameter names. A missing key (or
    ``None``) has the public default: no generation prompt, sanitizing on, no template
    arguments or clock, no input policy, no training columns, ``on_error="raise"``,
    ``on_rewrite="error"``. Other keys (``self``, ``messages``) are not read."""

    add_generation_prompt: bool
    sanitize_control_tokens: bool
    template_kwargs: dict[str, Any]
    """The template's keyword arguments (``now`` taken out)."""
    now: Optional[Clock]
    """The template's clock; None when the template does not read it and none was given."""
    system: Optional[str]
    merge_consecutive: bool
    continue_final_message: bool
    return_assistant_mask: bool
    train_on: str
    max_length: Optional[int]
    truncation: Optional[str]
    provenance: bool
    """Return each token's message index and origin (``encode_detailed``)."""
    num_threads: Optional[int]
    on_error: str
    for_generation: bool
    add_special_tokens: bool
    on_rewrite: str


def call_options(arguments: dict[str, Any], reads_clock: bool) -> CallOptions:
    """The :class:`CallOptions` of a public method's call: ``arguments`` is the method's
    ``locals()``, whose keys are its parameter names.

    ``now=`` among the template arguments (``**template_kwargs``) is taken out and becomes the
    template's clock. A template that reads the clock (``strftime_now()``: Llama 3.2's date,
    Mistral Small's) gets the current time when it is not given, here and never in the core.
    """
    kwargs = arguments.get("template_kwargs")
    now = kwargs.pop("now", None) if kwargs else None
    if now is not None and not isinstance(now, datetime):
        raise TypeError(f"now must be a datetime.datetime, not {type(now).__name__}")
    if now is None and reads_clock:
        now = datetime.now()
    arguments["now"] = None if now is None else (now.year, now.month, now.day, now.hour, now.minute, now.second)
    return cast(CallOptions, arguments)

