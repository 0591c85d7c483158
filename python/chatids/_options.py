"""The options of one call as one object: :class:`CallOptions`.

Every public method of :class:`chatids.Encoder` takes its options as keyword arguments (that is
the API), builds one :class:`CallOptions` from them (:func:`call_options`) and hands it to its
route: the compiled core, which converts it once into its Rust options
(``src/python/options.rs``), or the jinja2 fallback, which reads the same fields. A new option
is one field here, one in the Rust conversion, and a parameter of the public methods that offer
it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, NamedTuple, Optional

Clock = tuple[int, int, int, int, int, int]
"""(year, month, day, hour, minute, second): what the template's ``strftime_now()`` reads."""


class CallOptions(NamedTuple):
    """The options of one call, with the defaults of the public methods."""

    add_generation_prompt: bool = False
    sanitize_control_tokens: bool = True
    template_kwargs: Optional[dict[str, Any]] = None
    """The template's keyword arguments (``now`` taken out)."""
    now: Optional[Clock] = None
    """The template's clock; None when the template does not read it."""
    system: Optional[str] = None
    merge_consecutive: bool = False
    continue_final_message: bool = False
    return_assistant_mask: bool = False
    train_on: str = "all_assistant"
    max_length: Optional[int] = None
    truncation: Optional[str] = None
    provenance: bool = False
    """Return each token's message index and origin (``encode_detailed``)."""
    num_threads: Optional[int] = None
    on_error: str = "raise"
    for_generation: bool = False
    add_special_tokens: bool = False
    on_rewrite: str = "error"

    @property
    def training(self) -> bool:
        """Whether the call asks for anything beyond the ids (a mask, a length bound, provenance)."""
        return (
            self.return_assistant_mask
            or self.max_length is not None
            or self.truncation is not None
            or self.train_on != "all_assistant"
            or self.provenance
        )


_FIELDS = frozenset(CallOptions._fields) - {"template_kwargs", "now"}


def call_options(arguments: Mapping[str, Any], reads_clock: bool, **fixed: Any) -> CallOptions:
    """The :class:`CallOptions` of a public method's call.

    ``arguments`` is the method's ``locals()``: every parameter named like a field is taken,
    the others (``self``, ``messages``) are not, and ``template_kwargs`` (the method's
    ``**template_kwargs``) become the template's arguments. ``now=`` among them is the
    template's clock; a template that reads the clock (``strftime_now()``: Llama 3.2's date,
    Mistral Small's) gets the current time when it is not given, here and never in the core.
    ``fixed`` sets fields the method decides itself (``provenance=True``).
    """
    fields = {name: value for name, value in arguments.items() if name in _FIELDS}
    fields.update(fixed)
    kwargs = dict(arguments.get("template_kwargs") or {})
    now = kwargs.pop("now", None)
    if now is not None and not isinstance(now, datetime):
        raise TypeError(f"now must be a datetime.datetime, not {type(now).__name__}")
    if now is None and reads_clock:
        now = datetime.now()
    clock = None if now is None else (now.year, now.month, now.day, now.hour, now.minute, now.second)
    return CallOptions(template_kwargs=kwargs, now=clock, **fields)
