//! The token sets of the call syntaxes that are more than one marker, and the reading of a
//! gpt-oss harmony message header.
//!
//! A harmony header is the text between the start of a message and `<|message|>`, control
//! tokens written out: `<|channel|>analysis`, ` to=functions.get_weather<|channel|>commentary
//! json` (as the template writes a call), or `<|channel|>commentary to=functions.get_weather
//! <|constrain|>json` (as the model usually does). [`harmony_header`] reads it into what the
//! message is; anything else is not read (the parser keeps it verbatim).

/// gpt-oss harmony's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HarmonyTokens {
    /// `<|start|>`: opens the next message (then `assistant` and its header).
    pub start: u32,
    /// `<|channel|>`.
    pub channel: u32,
    /// `<|message|>`: ends the header.
    pub message: u32,
    /// `<|end|>`: ends a message that is not the last.
    pub end: u32,
    /// `<|constrain|>`, in a call's header (`<|constrain|>json`).
    pub constrain: Option<u32>,
}

impl HarmonyTokens {
    pub(super) fn markers(&self) -> Vec<u32> {
        let mut m = vec![self.start, self.channel, self.message, self.end];
        m.extend(self.constrain);
        m
    }
}

/// DeepSeek V3's tool-call tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeepSeekTokens {
    /// `<｜tool▁calls▁begin｜>`.
    pub calls_begin: u32,
    /// `<｜tool▁call▁begin｜>`.
    pub call_begin: u32,
    /// `<｜tool▁sep｜>`, between the call's type and its name.
    pub sep: u32,
    /// `<｜tool▁call▁end｜>`.
    pub call_end: u32,
    /// `<｜tool▁calls▁end｜>`.
    pub calls_end: u32,
}

impl DeepSeekTokens {
    pub(super) fn markers(&self) -> Vec<u32> {
        vec![
            self.calls_begin,
            self.call_begin,
            self.sep,
            self.call_end,
            self.calls_end,
        ]
    }
}

/// What a harmony message is, read from its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HarmonyMessage {
    /// `analysis`, no recipient: the reasoning.
    Analysis,
    /// `final`, no recipient: the content.
    Final,
    /// `commentary` to `functions.NAME`: a call of NAME.
    Call(String),
}

/// Read a harmony header. `role` says whether it starts with the author (`assistant`): every
/// message does except the first of a completion, whose `<|start|>assistant` is the generation
/// prompt. `channel` is the text of `<|channel|>`. `None`: not a header the grammar reads (a
/// preamble on `commentary` without a recipient, a built-in tool, another author, ...).
pub(super) fn harmony_header(header: &str, role: bool, channel: &str) -> Option<HarmonyMessage> {
    let header = if role {
        header.strip_prefix("assistant")?
    } else {
        header
    };
    let (before, after) = header.split_once(channel)?;
    let mut recipient = None;
    match before.trim() {
        "" => {}
        words => recipient = Some(words.strip_prefix("to=")?),
    }
    // `before` may only be ` to=NAME` (whitespace-separated, one word).
    if recipient.is_some_and(|r| r.is_empty() || r.contains(char::is_whitespace)) {
        return None;
    }
    let mut words = after.split_whitespace();
    let channel_name = words.next()?;
    let mut content_type = None;
    for word in words {
        if let Some(r) = word.strip_prefix("to=") {
            if recipient.replace(r).is_some() {
                return None;
            }
        } else if content_type.replace(word).is_some() {
            return None;
        }
    }
    match (channel_name, recipient) {
        ("analysis", None) if content_type.is_none() => Some(HarmonyMessage::Analysis),
        ("final", None) if content_type.is_none() => Some(HarmonyMessage::Final),
        ("commentary", Some(r)) => {
            let name = r.strip_prefix("functions.")?;
            (!name.is_empty()).then(|| HarmonyMessage::Call(name.to_string()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CH: &str = "<|channel|>";

    #[test]
    fn headers() {
        use HarmonyMessage::*;
        let read = |h: &str, role| harmony_header(h, role, CH);
        assert_eq!(read("<|channel|>analysis", false), Some(Analysis));
        assert_eq!(read("assistant<|channel|>final", true), Some(Final));
        assert_eq!(read("<|channel|>final", true), None);
        assert_eq!(
            read(" to=functions.get_weather<|channel|>commentary json", false),
            Some(Call("get_weather".into()))
        );
        assert_eq!(
            read(
                "assistant<|channel|>commentary to=functions.f <|constrain|>json",
                true
            ),
            Some(Call("f".into()))
        );
        // A preamble, a built-in tool, two recipients, a content type on analysis.
        assert_eq!(read("<|channel|>commentary", false), None);
        assert_eq!(read("<|channel|>analysis to=python", false), None);
        assert_eq!(
            read(" to=functions.a<|channel|>commentary to=functions.b", false),
            None
        );
        assert_eq!(read("<|channel|>analysis json", false), None);
    }
}
