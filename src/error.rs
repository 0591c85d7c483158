//! Error types of the chatids core.
//!
//! Two kinds of failure reach a caller: a conversation that a format cannot encode
//! ([`TemplateError`], which always names the message and the rule), and a checkpoint
//! or tokenizer that cannot be used ([`Error::Load`], [`Error::Tokenizer`]).

use std::fmt;

/// Why a conversation was refused: what decides whether the refusal is final.
///
/// A native format is a fast copy of the checkpoint's template, so only two of its refusals
/// are final: malformed input or an explicit policy ([`Refusal::Input`]), and a message the
/// template would leave out of the prompt without a word ([`Refusal::Dropped`]). For the
/// other two the checkpoint's template is asked: if it renders the conversation, its
/// rendering is used (see [`crate::Encoder`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed input, or a policy the caller chose (`system="error"`, ...): final.
    #[default]
    Input,
    /// The checkpoint's template raises for this input too (a native format's copy of one of
    /// its rules, e.g. role alternation).
    TemplateRaises,
    /// The template would silently leave (part of) this message out of the prompt: the one
    /// refusal chatids adds to what the template does.
    Dropped,
    /// The native format does not model this input (content parts, tool calls, a template
    /// argument...): the checkpoint's template renders it.
    Unmodeled,
}

/// A conversation broke a rule of its chat format.
///
/// Either the checkpoint's own template would raise for it, or chatids refuses it because
/// the template would silently drop part of it (each such rule is documented on the format).
/// The message always says which message and which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// Index of the conversation in a batch, when the error comes from `encode_batch`.
    pub conversation: Option<usize>,
    /// Index of the offending message, when one message is to blame.
    pub message: Option<usize>,
    /// What is wrong, in one sentence.
    pub rule: String,
    /// What kind of refusal this is.
    pub refusal: Refusal,
}

impl TemplateError {
    /// An error about message `index`.
    pub fn at(index: usize, rule: impl Into<String>) -> Self {
        TemplateError {
            conversation: None,
            message: Some(index),
            rule: rule.into(),
            refusal: Refusal::Input,
        }
    }

    /// An error about the conversation as a whole.
    pub fn whole(rule: impl Into<String>) -> Self {
        TemplateError {
            conversation: None,
            message: None,
            rule: rule.into(),
            refusal: Refusal::Input,
        }
    }

    /// The same error, of kind `refusal`.
    pub fn with(mut self, refusal: Refusal) -> Self {
        self.refusal = refusal;
        self
    }

    /// Whether the checkpoint's template should be asked before the refusal stands (see
    /// [`Refusal`]).
    pub fn template_decides(&self) -> bool {
        matches!(self.refusal, Refusal::TemplateRaises | Refusal::Unmodeled)
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
    /// A completion's ids cannot be read (an id outside the vocabulary).
    Completion(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Template(e) => e.fmt(f),
            Error::Load(msg) => write!(f, "{msg}"),
            Error::Tokenizer(msg) => write!(f, "tokenizer error: {msg}"),
            Error::Completion(msg) => write!(f, "{msg}"),
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
