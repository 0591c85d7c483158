//! Grammars of the families a template on the Jinja path may write: gpt-oss harmony, DeepSeek
//! V3, Hermes-style fine-tunes, and the call syntaxes of native families a fine-tune keeps
//! (Llama 3.1's JSON calls, Mistral's `[TOOL_CALLS]` list). Each is built from the checkpoint's own
//! tokens and is used only after the encoder proves it against the template
//! (`crate::encoder::completion`): the template's rendering of probe turns must read back into
//! the probe messages.

use super::{CallSyntax, DeepSeekTokens, Grammar, HarmonyTokens, Trim};

/// gpt-oss harmony (`<|channel|>analysis` is read as `thinking`, the key gpt-oss's template
/// reads).
pub fn harmony(token: &dyn Fn(&str) -> Option<u32>) -> Option<Grammar> {
    let tokens = HarmonyTokens {
        start: token("<|start|>")?,
        channel: token("<|channel|>")?,
        message: token("<|message|>")?,
        end: token("<|end|>")?,
        constrain: token("<|constrain|>"),
    };
    let mut g = Grammar::plain("harmony", Trim::None);
    g.reasoning_key = "thinking";
    g.reasoning_trim = Trim::None;
    g.calls = CallSyntax::Harmony(tokens);
    Some(g)
}

/// DeepSeek V3 (its template writes the calls only when the content is null, and concatenates
/// the arguments as a string).
pub fn deepseek_v3(token: &dyn Fn(&str) -> Option<u32>) -> Option<Grammar> {
    let tokens = DeepSeekTokens {
        calls_begin: token("<｜tool▁calls▁begin｜>")?,
        call_begin: token("<｜tool▁call▁begin｜>")?,
        sep: token("<｜tool▁sep｜>")?,
        call_end: token("<｜tool▁call▁end｜>")?,
        calls_end: token("<｜tool▁calls▁end｜>")?,
    };
    let mut g = Grammar::plain("deepseek-v3", Trim::None);
    g.calls = CallSyntax::DeepSeek(tokens);
    g.null_content_with_calls = true;
    g.arguments_as_text = true;
    Some(g)
}

/// Hermes-style calls (`<tool_call>` JSON `</tool_call>`), with a `<think>` block when the
/// vocabulary has one and `think` asks for it.
pub fn hermes(token: &dyn Fn(&str) -> Option<u32>, think: bool, content: Trim) -> Option<Grammar> {
    let mut g = Grammar::plain("hermes", content);
    g.calls = CallSyntax::Tagged {
        open: token("<tool_call>")?,
        close: token("</tool_call>")?,
    };
    if think {
        g.reasoning = Some((token("<think>")?, token("</think>")?));
        g.reasoning_trim = Trim::Newlines;
        g.content_after_reasoning = Trim::LeadingNewlines;
    }
    Some(g)
}

/// Llama 3.1/3.2 calls: a JSON call is the whole turn (`{"name": ..., "parameters": ...}`, no
/// marker), `<|python_tag|>` opens a built-in's call; the content is trimmed (`content | trim`).
pub fn llama3_json(token: &dyn Fn(&str) -> Option<u32>) -> Option<Grammar> {
    let mut g = Grammar::plain("llama3-json-calls", Trim::Whitespace);
    g.calls = CallSyntax::Llama3 {
        python_tag: token("<|python_tag|>")?,
    };
    Some(g)
}

/// Mistral's calls: `[TOOL_CALLS]`, then a JSON list of `{"name", "arguments", "id"}`.
pub fn mistral_list(token: &dyn Fn(&str) -> Option<u32>, content: Trim) -> Option<Grammar> {
    let mut g = Grammar::plain("mistral-tool-calls", content);
    g.calls = CallSyntax::List {
        marker: token("[TOOL_CALLS]")?,
    };
    g.writes_call_ids = true;
    Some(g)
}
