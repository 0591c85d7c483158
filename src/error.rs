//! Error types of the chatids core.
//!
//! Two kinds of failure reach a caller: a conversation that a format cannot encode
//! ([`TemplateError`], which always names the message and the rule), and a checkpoint
//! or tokenizer that cannot be used ([`Error::Load`], [`Error::Tokenizer`]).

use std::fmt;

/// A conversation broke a rule of its chat format.
///
/// Either the checkpoint's own template would raise for it, or chatids refuses it because
/// the template would silently drop or mangle part of it (each such rule is documented on
/// the format). The message always says which message and which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Index of the conversation in a batch, when the error comes from `encode_batch`.
    pub conversation: Option<usize>,
    /// Index of the offending message, when one message is to blame.
    pub message: Option<usize>,
    /// What is wrong, in one sentence.
    pub rule: String,
}

impl TemplateError {
    /// An error about message `index`.
    pub fn at(index: usize, rule: impl Into<String>) -> Self {
        TemplateError {
            conversation: None,
            message: Some(index),
            rule: rule.into(),
        }
    }

    /// An error about the conversation as a whole.
    pub fn whole(rule: impl Into<String>) -> Self {
        TemplateError {
            conversation: None,
            message: None,
            rule: rule.into(),
        }
    }

    /// The same error, located in conversation `index` of a batch.
    pub fn in_conversation(mut self, index: usize) -> Self {
        self.conversation = Some(index);
        self
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.conversation, self.message) {
            (Some(c), Some(m)) => write!(f, "conversation {c}, message {m}: {}", self.rule),
            (Some(c), None) => write!(f, "conversation {c}: {}", self.rule),
            (None, Some(m)) => write!(f, "message {m}: {}", self.rule),
            (None, None) => write!(f, "{}", self.rule),
        }
    }
}

impl std::error::Error for TemplateError {}

/// Any failure of the chatids core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The conversation cannot be encoded with this format.
    Template(TemplateError),
    /// A checkpoint directory, its files or the chosen format could not be loaded.
    Load(String),
    /// The text encoder failed on some input.
    Tokenizer(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Template(e) => e.fmt(f),
            Error::Load(msg) => write!(f, "{msg}"),
            Error::Tokenizer(msg) => write!(f, "tokenizer error: {msg}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<TemplateError> for Error {
    fn from(e: TemplateError) -> Self {
        Error::Template(e)
    }
}

/// Result type of the chatids core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
