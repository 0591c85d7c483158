"""Generated edge cases: contents and conversation shapes that break naive encoders."""

from __future__ import annotations

import random

#: Contents that probe whitespace handling, Unicode, length and normalisation.
PLAIN_TEXTS: dict[str, str] = {
    "empty": "",
    "space": " ",
    "spaces": "   ",
    "newline": "\n",
    "two_newlines": "\n\n",
    "tab": "\t",
    "crlf": "\r\n",
    "mixed_ws": " \n \t\n",
    "leading_space": " leading space",
    "trailing_space": "trailing space ",
    "leading_newline": "\nleading newline",
    "trailing_newline": "trailing newline\n",
    "both_newlines": "\n\nboth sides\n\n",
    "python_only_ws": "\x1c\x1dtrimmed by Python, not by Rust\x1e\x1f",
    "unicode_ws": "\u00a0nbsp\u3000ideographic\u3000\u2028",
    "cjk_zh": "你好，世界！这是一个关于分词的测试。",
    "cjk_ja": "こんにちは、世界。カタカナとひらがな。",
    "korean": "안녕하세요 세계",
    "emoji": "👩‍👩‍👧‍👦 family, 🇺🇳 flag, 👍🏽 skin tone, ❤️ heart, 🧑🏿‍🚀",
    "combining": "e\u0301 vs \u00e9, A\u030a vs \u00c5, \u212b angstrom, \u1100\u1161 jamo",
    "rtl": "مرحبا بالعالم שלום עולם",
    "code": "def f(x):\n    return x ** 2\n\n```python\nprint('hi')\n```\n",
    "indent_runs": "a\n        b\n\t\tc\n \n  \n",
    "digits": "1234567890 3.14159 1e-10 0x1F",
    "zero_width": "zero\u200bwidth\u200djoiner\ufeff",
    "nul": "nul\x00char",
    # Other families' control tokens and the partial ones of the brief: plain text here or not.
    "foreign_controls": "<|eot_ <|im_end |> <|im_start|>user\n [INST] <s></s> <start_of_turn>model <|endoftext|> <think>",
    # transformers' sanitize markers: a documented deviation with sanitize_control_tokens=True.
    "private_markers": "icon \U000f0001 and \U000f0000 start",
    "long_100k": None,  # filled below
}

_WORDS = "the quick brown fox jumps over a lazy dog while 数据 and émigré code_path/x.py 42 !?".split()
PLAIN_TEXTS["long_100k"] = " ".join(random.Random(7).choice(_WORDS) for _ in range(14000))[:100_000]


def control_texts(control_tokens: list[str]) -> dict[str, str]:
    """Contents made of the model's control tokens, partial ones and near misses."""
    out: dict[str, str] = {}
    picked = sorted(control_tokens, key=lambda t: (len(t), t))
    # A representative few individually, every one of them together.
    for tok in picked[:3] + picked[-3:]:
        out[f"ctrl:{tok}"] = tok
        out[f"ctrl_in_text:{tok}"] = f"before {tok} after"
        out[f"ctrl_partial_head:{tok}"] = tok[:-1]
        out[f"ctrl_partial_tail:{tok}"] = tok[1:]
        if len(tok) > 3:
            mid = len(tok) // 2
            out[f"ctrl_split_space:{tok}"] = tok[:mid] + " " + tok[mid:]
            out[f"ctrl_split_zwsp:{tok}"] = tok[:mid] + "\u200b" + tok[mid:]
        out[f"ctrl_twice:{tok}"] = tok + tok + "\n" + tok
        out[f"ctrl_ws:{tok}"] = f"\n {tok} \n"
    out["ctrl_all"] = " ".join(picked)
    out["ctrl_all_glued"] = "".join(picked)
    return out


def shapes(content: str, fmt: str) -> dict[str, list[dict]]:
    """Conversation shapes around one content."""
    cases = {
        "user": [{"role": "user", "content": content}],
        "system_user": [{"role": "system", "content": content}, {"role": "user", "content": "hi"}],
        "user_assistant": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}],
        "multi": [
            {"role": "user", "content": content},
            {"role": "assistant", "content": content},
            {"role": "user", "content": content},
        ],
    }
    return cases


def special_conversations(fmt: str) -> dict[str, tuple[list[dict], dict]]:
    """Format-specific conversations: (messages, template kwargs)."""
    many = []
    for i in range(100):
        many += [{"role": "user", "content": f"question {i}?"}, {"role": "assistant", "content": f"answer {i}."}]
    out: dict[str, tuple[list[dict], dict]] = {
        "200_turns": (many, {}),
        "only_system": ([{"role": "system", "content": "Be brief."}], {}),
        "two_systems": (
            [{"role": "system", "content": "A"}, {"role": "user", "content": "q"}, {"role": "system", "content": "B"}],
            {},
        ),
        "ends_with_assistant": ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], {}),
        "extra_keys_ignored": ([{"role": "user", "content": "q", "name": "bob", "weight": 0.5}], {}),
        "content_parts": ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], {}),
        "content_none": ([{"role": "user", "content": None}], {}),
    }
    if fmt in ("llama-3", "llama-3.1", "llama-3.2", "chatml", "qwen2"):
        out["odd_roles"] = (
            [{"role": "narrator", "content": "x"}, {"role": "function", "content": "y"}, {"role": "User", "content": "z"}],
            {},
        )
        out["role_with_control_token"] = ([{"role": "user<|eot_id|><|im_end|>", "content": "x"}], {})
    if fmt in ("llama-3.1", "llama-3.2"):
        out["custom_date"] = ([{"role": "user", "content": "q"}], {"date_string": "01 Jan 2025"})
        out["empty_date"] = ([{"role": "user", "content": "q"}], {"date_string": ""})
        out["date_with_control_token"] = ([{"role": "user", "content": "q"}], {"date_string": "1 Jan<|eot_id|>2025"})
        out["system_trimmed"] = ([{"role": "system", "content": "  spaced system \n"}, {"role": "user", "content": "q"}], {})
    if fmt == "qwen3":
        reasoning_turns = [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "\n\na2", "reasoning_content": "\nr2\n"},
        ]
        out["reasoning_field"] = (reasoning_turns, {})
        out["reasoning_after_last_query"] = (reasoning_turns[:2] + [reasoning_turns[1]], {})
        out["thinking_alias"] = ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "thinking": "t"}], {})
        out["reasoning_empty"] = ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": ""}], {})
        out["inline_think"] = (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\nanswer"}],
            {},
        )
        out["inline_think_earlier_turn"] = (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "<think>r</think>a"},
                {"role": "user", "content": "q2"},
            ],
            {},
        )
        out["tool_response_user"] = (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "reasoning_content": "r"},
                {"role": "user", "content": "<tool_response>x</tool_response>"},
            ],
            {},
        )
        out["enable_thinking_false"] = ([{"role": "user", "content": "q"}], {"enable_thinking": False})
        out["enable_thinking_true"] = ([{"role": "user", "content": "q"}], {"enable_thinking": True})
    if fmt in ("qwen2.5", "qwen3"):
        out["unknown_role_dropped_by_template"] = ([{"role": "user", "content": "q"}, {"role": "narrator", "content": "x"}], {})
    return out
