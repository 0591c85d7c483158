//! Grammars of families that no native format renders: templates on the Jinja path (gpt-oss
//! harmony, DeepSeek V3, Hermes-style fine-tunes). Each is built from the checkpoint's own
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
