"""Every option of every public method reaches the core: the one options dict (``CallOptions``).

Each public :class:`chatids.Encoder` method that takes options hands them to its route as one
dict. ``Encoder.encode`` has a hot path that builds a smaller dict when every option but the
generation prompt, sanitizing and the template arguments has its default. These tests replace
the route with a recorder and call each method with each parameter set to a non-default value
in turn: the value must arrive under its own key. A new parameter without an entry in
``NON_DEFAULT`` fails the test, so no option can be added and then lost on a fast path.
"""

from __future__ import annotations

import datetime as dt
import inspect
from typing import Any

import pytest

import chatids
import support

#: A value other than the default, for every option parameter of the public methods.
NON_DEFAULT: dict[str, Any] = {
    "add_generation_prompt": True,
    "sanitize_control_tokens": False,
    "system": "keep",
    "merge_consecutive": True,
    "continue_final_message": True,
    "return_assistant_mask": True,
    "train_on": "last_assistant",
    "max_length": 77,
    "truncation": "right",
    "num_threads": 2,
    "on_error": "skip",
    "for_generation": True,
    "add_special_tokens": True,
    "on_rewrite": "reencode",
}
#: Methods whose options cross to the route as one dict, and the route method that receives it.
METHODS = ["encode", "encode_detailed", "render", "encode_batch", "session", "lint"]
CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]


class _Stop(Exception):
    pass


class Recorder:
    """Stands in for the route: records the options dict of the first call, then stops it."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.options: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        def record(*args: Any) -> Any:
            found = [a for a in args if isinstance(a, dict)]
            assert found, f"route.{name} got no options dict: {args!r}"
            self.options = found[-1]
            raise _Stop

        return record


def _encoder(name: str) -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(support.require_model_path(name))


def _call(enc: chatids.Encoder, method: str, **kwargs: Any) -> dict[str, Any]:
    recorder = Recorder(enc._route)
    real = enc._route
    enc._route = recorder  # type: ignore[assignment]
    try:
        messages: Any = [CHAT] if method == "encode_batch" else CHAT
        with pytest.raises(_Stop):
            getattr(enc, method)(messages, **kwargs)
    finally:
        enc._route = real
    return recorder.options


def _parameters(method: str) -> list[str]:
    sig = inspect.signature(getattr(chatids.Encoder, method))
    # Skip self and the conversation(s), the first two parameters.
    return [p.name for p in list(sig.parameters.values())[2:] if p.kind is not inspect.Parameter.VAR_KEYWORD]


@pytest.mark.parametrize("method", METHODS)
def test_every_parameter_reaches_the_route(method):
    enc = _encoder("llama-3.1-8b-instruct")
    assert not enc.reads_clock
    for name in _parameters(method):
        assert name in NON_DEFAULT, f"{method}({name}=...): add a non-default value to NON_DEFAULT"
        options = _call(enc, method, **{name: NON_DEFAULT[name]})
        assert options.get(name) == NON_DEFAULT[name], f"{method}({name}=...) did not reach the core: {options!r}"


@pytest.mark.parametrize("method", METHODS)
def test_template_arguments_and_clock_reach_the_route(method):
    enc = _encoder("llama-3.1-8b-instruct")
    options = _call(enc, method, date_string="1 Jan 2025")
    assert options["template_kwargs"] == {"date_string": "1 Jan 2025"}
    assert options.get("now") is None
    now = dt.datetime(2025, 3, 9, 10, 30, 5)
    options = _call(enc, method, date_string="1 Jan 2025", now=now)
    assert options["template_kwargs"] == {"date_string": "1 Jan 2025"}
    assert options["now"] == (2025, 3, 9, 10, 30, 5)


def test_a_template_that_reads_the_clock_gets_the_current_time():
    """Llama 3.2 calls strftime_now(): the plain call must not take the hot path without a clock."""
    enc = _encoder("llama-3.2-3b-instruct")
    assert enc.reads_clock
    before = dt.datetime.now().replace(microsecond=0)
    options = _call(enc, "encode", add_generation_prompt=True)
    after = dt.datetime.now()
    assert options["now"] is not None
    assert before <= dt.datetime(*options["now"]) <= after


def test_the_hot_path_encodes_as_the_full_options():
    """The hot path's small dict and the full dict of the same call give the same ids."""
    from chatids._options import call_options

    for name in ("llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gemma-3-it"):
        enc = _encoder(name)
        chat = [{"role": "user", "content": "Say <|im_end|> and <end_of_turn> and <|eot_id|>."}]
        for agp in (False, True):
            for sanitize in (False, True):
                small = enc.encode(chat, agp, sanitize)
                full = enc._route.encode(
                    chat,
                    call_options(
                        {"add_generation_prompt": agp, "sanitize_control_tokens": sanitize, "template_kwargs": {}},
                        enc.reads_clock,
                    ),
                )
                assert small.tolist() == full.tolist(), (name, agp, sanitize)
