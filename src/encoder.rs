//! [`Encoder`]: a checkpoint's tokenizer plus what reproduces its chat formatting, on one of
//! two routes: a native format that reproduces the checkpoint's Hugging Face chat template
//! (exact against transformers' `apply_chat_template`), or, for checkpoints that ship
//! mistral-common's tokenizer files, the mistral-common route (exact against
//! `MistralTokenizer.encode_chat_completion`).

use std::path::Path;

use crate::checkpoint::Checkpoint;
use crate::control_tokens::{ControlTokens, TokenSplitter};
use crate::encoding::{EncodedChat, PieceEncoder, Tracking};
use crate::error::{Error, Refusal, Result, TemplateError};
use crate::formats::{self, ChatFormat, RenderRequest, SystemPolicy, TemplateArgs};
use crate::jinja::{JinjaFormat, JinjaRequest};
use crate::message::Message;
use crate::mistral_common::MistralCommon;
use crate::origin::Origin;
use crate::pieces::Pieces;
use crate::policies;
use crate::prefill;
use crate::probes::{self, DifferenceKind, ProbeReport};
use crate::template::{ChatTemplate, DateTime};
use crate::text::{EncoderChoice, Selected, TextEncoder, TextOptions};
use crate::tools;

/// Options of one `encode`/`render` call (transformers' argument names). The default is the
/// safe one: no generation prompt, control tokens in content sanitized, no template arguments.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Append the header of a new assistant turn.
    pub add_generation_prompt: bool,
    /// Encode control tokens that appear in content as plain text (transformers'
    /// `sanitize_control_tokens=True`). When false, content is parsed like template text, as
    /// plain `apply_chat_template` does, so content can forge turns.
    pub sanitize_control_tokens: bool,
    /// Template keyword arguments.
    pub kwargs: TemplateArgs,
    /// What to do with a system message the format has no slot for (`system=`).
    pub system: SystemPolicy,
    /// Join consecutive messages of the same role before rendering (see [`crate::policies`]).
    pub merge_consecutive: bool,
    /// What the template's `strftime_now()` returns on the Jinja path (the core never reads
    /// the clock; a template that calls it without `now` fails).
    pub now: Option<DateTime>,
    /// Leave the final (assistant) message open so the model continues it: the prompt ends
    /// right after that message's text, as transformers' `continue_final_message=True` cuts
    /// it (see [`crate::prefill`]). Excludes `add_generation_prompt`.
    pub continue_final_message: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            add_generation_prompt: false,
            sanitize_control_tokens: true,
            kwargs: TemplateArgs::new(),
            system: SystemPolicy::Template,
            merge_consecutive: false,
            now: None,
            continue_final_message: false,
        }
    }
}

/// The template arguments every template is given by transformers besides its special tokens
/// ([`crate::checkpoint::SPECIAL_TOKEN_NAMES`]), accepted whether or not the template reads them.
pub const ALWAYS_ACCEPTED: &[&str] = &["tools", "documents"];

/// Whether transformers gives every template the argument `name`.
fn always_accepted(name: &str) -> bool {
    ALWAYS_ACCEPTED.contains(&name) || crate::checkpoint::SPECIAL_TOKEN_NAMES.contains(&name)
}

/// What to do with a template argument the template does not read.
///
/// transformers passes every keyword argument to the template, which ignores the ones it does
/// not read, so a misspelled or misplaced argument (`enable_thinking` for a Llama template)
/// changes nothing without a word. chatids refuses it by default, naming it and the arguments
/// the template reads; pipelines that pass one set of arguments to many models choose
/// [`ArgsPolicy::Ignore`]. The names transformers gives every template (the special tokens,
/// `tools`, `documents`) are always accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgsPolicy {
    /// Raise [`TemplateError`] naming the argument (the default).
    #[default]
    Error,
    /// Leave it out, as transformers' template would ignore it.
    Ignore,
}

impl std::str::FromStr for ArgsPolicy {
    type Err = Error;

    /// Parse `"error"` / `"ignore"`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "error" => Ok(ArgsPolicy::Error),
            "ignore" => Ok(ArgsPolicy::Ignore),
            other => Err(Error::Load(format!(
                "unknown_template_args must be \"error\" or \"ignore\", not {other:?}"
            ))),
        }
    }
}

/// How to load a checkpoint (see [`Encoder::load_with`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions<'a> {
    /// Force a native format by name, or the Jinja path with `"jinja"`.
    pub format: Option<&'a str>,
    /// Choose the route (default: mistral-common when the directory ships its files).
    pub reference: Option<Route>,
    /// A named template of the checkpoint, or template text that replaces its template.
    pub chat_template: Option<&'a str>,
    /// Accept a template chatids' engine cannot compile (the caller renders it, see
    /// [`Encoder::encode_rendered`]) instead of failing.
    pub allow_external: bool,
    /// What to do with template arguments the template does not read.
    pub unknown_template_args: ArgsPolicy,
}

/// Which reference an [`Encoder`] reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The checkpoint's Hugging Face chat template with its `tokenizer.json`, exact against
    /// transformers' `apply_chat_template`.
    Transformers,
    /// mistral-common's own encoder, exact against `encode_chat_completion`.
    MistralCommon,
}

impl Route {
    /// Parse `"transformers"` / `"mistral-common"`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "transformers" => Ok(Route::Transformers),
            "mistral-common" => Ok(Route::MistralCommon),
            other => Err(Error::Load(format!(
                "reference must be \"transformers\" or \"mistral-common\", not {other:?}"
            ))),
        }
    }
}

/// How the format of an [`Encoder`] was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatChoice {
    /// The native format renders every probe conversation exactly as the checkpoint's template
    /// does (see [`crate::probes`]).
    Probed {
        /// The probe results (including inputs the native format refuses or delegates).
        report: ProbeReport,
        /// Where the official template comes from, when the checkpoint's template is
        /// byte-for-byte that one.
        official: Option<&'static str>,
        /// The other native formats probed, and why each was not chosen.
        rejected: Vec<(&'static str, String)>,
    },
    /// No native format reproduces the template: the Jinja path renders it. For each native
    /// format whose tokens the vocabulary has, the first probe where it differs.
    Jinja {
        /// `(format, why it was not used)`.
        rejected: Vec<(&'static str, String)>,
    },
    /// The caller named the native format.
    Explicit {
        /// The probe results against the checkpoint's template (`None`: the template cannot
        /// be compiled, so it was not checked).
        report: Option<ProbeReport>,
    },
    /// The caller asked for the Jinja path (`format="jinja"`).
    ExplicitJinja,
    /// The template cannot be compiled; the caller renders it (see [`Encoder::encode_rendered`]).
    External,
}

/// What renders the conversation on the transformers route.
enum Renderer {
    /// A native format.
    Native(Box<dyn ChatFormat>),
    /// The checkpoint's template on the Jinja path.
    Jinja,
    /// The template cannot be compiled by chatids' engine: the caller renders it (the Python
    /// layer falls back to jinja2) and hands the rendered text to
    /// [`Encoder::encode_rendered`].
    External {
        /// Why the template could not be compiled.
        reason: String,
    },
}

/// The transformers route: a native format over the checkpoint's tokenizer.json.
struct TemplateRoute {
    renderer: Renderer,
    /// The checkpoint's template, compiled (`None` if it cannot be: then only an explicit
    /// native format is possible).
    jinja: Option<JinjaFormat>,
    template_source: String,
    template_text: String,
    special_tokens_map: Vec<(String, String)>,
    format_choice: FormatChoice,
    /// The text encoders (shared by the encoders [`Encoder::with_chat_template`] makes).
    text: std::sync::Arc<Selected>,
    control_tokens: ControlTokens,
    newline_ids: Vec<u32>,
    post_processor_bos: Option<u32>,
    checkpoint_note: Option<String>,
    template_fingerprint: String,
    /// The native format was verified against the checkpoint's template, which compiles: what
    /// the format does not model (tool conversations, content parts, arguments...) and what it
    /// refuses as the template's own error goes to that template on the Jinja path.
    verified: bool,
    /// The template arguments the checkpoint's template reads, plus the names transformers
    /// gives every template (`None`: the template cannot be compiled).
    template_args: Option<std::collections::BTreeSet<String>>,
    /// Where a session may resume encoding inside template text.
    token_splitter: TokenSplitter,
}

impl TemplateRoute {
    /// The template-argument rule: an argument the template does not read raises, naming it
    /// and the arguments the template reads, or with [`ArgsPolicy::Ignore`] is left out
    /// (`Ok(Some(kwargs))`: the arguments that remain; `Ok(None)`: all of them).
    fn check_args(
        &self,
        kwargs: &TemplateArgs,
        policy: ArgsPolicy,
    ) -> Result<Option<TemplateArgs>, TemplateError> {
        let format_args;
        let accepted: &std::collections::BTreeSet<String> =
            match (&self.template_args, &self.renderer) {
                (Some(names), _) => names,
                // Without a compiled template, a forced native format takes what it models.
                (None, Renderer::Native(f)) => {
                    format_args = f
                        .template_args()
                        .iter()
                        .map(|(n, _)| n.to_string())
                        .chain(self.special_tokens_map.iter().map(|(k, _)| k.clone()))
                        .chain(
                            ALWAYS_ACCEPTED
                                .iter()
                                .chain(&crate::checkpoint::SPECIAL_TOKEN_NAMES)
                                .map(|n| n.to_string()),
                        )
                        .collect();
                    &format_args
                }
                // The caller renders it (the jinja2 fallback checks its own arguments).
                (None, _) => return Ok(None),
            };
        let unknown = |name: &String| !accepted.contains(name);
        let Some(first) = kwargs.keys().find(|n| unknown(n)) else {
            return Ok(None);
        };
        if policy == ArgsPolicy::Ignore {
            return Ok(Some(
                kwargs
                    .iter()
                    .filter(|(n, _)| !unknown(n))
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect(),
            ));
        }
        let standard = |n: &str| {
            matches!(n, "messages" | "add_generation_prompt")
                || always_accepted(n)
                || self.special_tokens_map.iter().any(|(k, _)| k == n)
        };
        let reads: Vec<&str> = accepted
            .iter()
            .map(String::as_str)
            .filter(|n| !standard(n))
            .collect();
        let reads = if reads.is_empty() {
            "none besides messages, tools, documents and the special tokens".to_string()
        } else {
            reads.join(", ")
        };
        Err(TemplateError::whole(format!(
            "the chat template does not read the template argument {first:?} (it reads: {reads}); transformers would \
             ignore it silently. Load with unknown_template_args=\"ignore\" to leave such arguments out"
        )))
    }
}

enum Backend {
    Template(Box<TemplateRoute>),
    MistralCommon(Box<MistralCommon>),
}

/// Encodes conversations for one checkpoint.
pub struct Encoder {
    backend: Backend,
    /// What to do with template arguments the template does not read.
    unknown_template_args: ArgsPolicy,
    stop_token_ids: Vec<u32>,
    stop_token_ids_for_tool_calls: Vec<u32>,
    /// What it was built from, for [`Encoder::to_bytes`] (see [`crate::persist`]).
    origin: Origin,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("format", &self.format_name())
            .finish()
    }
}

impl Encoder {
    /// Load the checkpoint in `dir`. A directory with mistral-common's tokenizer file
    /// (`tekken.json`, `tokenizer.model.v*`) takes the mistral-common route; any other the
    /// transformers route, where the native format is chosen by the checkpoint's chat template
    /// (it must be one of the official templates chatids reproduces) or forced by `format`.
    pub fn from_dir(dir: impl AsRef<Path>, format: Option<&str>) -> Result<Self> {
        Self::load(dir, format, None)
    }

    /// Like [`Encoder::from_dir`], choosing the route explicitly with `reference`.
    pub fn load(
        dir: impl AsRef<Path>,
        format: Option<&str>,
        reference: Option<Route>,
    ) -> Result<Self> {
        Self::load_with(
            dir,
            &LoadOptions {
                format,
                reference,
                ..LoadOptions::default()
            },
        )
    }

    /// Load a checkpoint directory, or a GGUF file (its tokenizer and chat template metadata).
    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions<'_>) -> Result<Self> {
        let path = path.as_ref();
        let LoadOptions {
            format,
            reference,
            chat_template,
            allow_external,
            unknown_template_args,
        } = *options;
        let transformers_checkpoint = || -> Result<Checkpoint> {
            let mut checkpoint = if path.is_file()
                && path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
            {
                crate::checkpoint::gguf::load(path)?
            } else {
                Checkpoint::load(path)?
            };
            if let Some(choice) = chat_template {
                checkpoint.select_template(choice)?;
            }
            Ok(checkpoint)
        };
        if path.is_file() {
            if reference == Some(Route::MistralCommon) {
                return Err(Error::Load(format!(
                    "{}: the mistral-common route needs a checkpoint directory",
                    path.display()
                )));
            }
            return Self::from_checkpoint_with(transformers_checkpoint()?, format, allow_external)
                .map(|e| e.with_unknown_template_args(unknown_template_args));
        }
        let dir = path;
        let mistral_file = MistralCommon::find_in(dir)?;
        let route = match (reference, &mistral_file, format, chat_template) {
            (Some(r), _, _, _) => r,
            (None, Some(_), None, None) => Route::MistralCommon,
            _ => Route::Transformers,
        };
        let encoder = match route {
            Route::Transformers => {
                Self::from_checkpoint_with(transformers_checkpoint()?, format, allow_external)
            }
            Route::MistralCommon => {
                if let Some(f) = format {
                    return Err(Error::Load(format!(
                        "format={f:?} applies to the transformers route; pass reference=\"transformers\" to use it"
                    )));
                }
                if chat_template.is_some() {
                    return Err(Error::Load(
                        "chat_template= applies to the transformers route; pass reference=\"transformers\" to use it".into(),
                    ));
                }
                let file = mistral_file.ok_or_else(|| {
                    Error::Load(format!(
                        "{} has no mistral-common tokenizer file (tekken.json or tokenizer.model.v1/v2/v3/v7)",
                        dir.display()
                    ))
                })?;
                let bytes = std::fs::read(&file)
                    .map_err(|e| Error::Load(format!("cannot read {}: {e}", file.display())))?;
                Self::from_mistral_common_bytes(&file, bytes)
            }
        }?;
        Ok(encoder.with_unknown_template_args(unknown_template_args))
    }

    /// The same encoder with `policy` for template arguments the template does not read.
    pub fn with_unknown_template_args(mut self, policy: ArgsPolicy) -> Self {
        self.unknown_template_args = policy;
        self
    }

    /// What the encoder does with template arguments the template does not read.
    pub fn unknown_template_args(&self) -> ArgsPolicy {
        self.unknown_template_args
    }

    /// A mistral-common-route encoder from the content of its tokenizer file (`file` is only
    /// its name, see [`MistralCommon::from_bytes`]).
    pub(crate) fn from_mistral_common_bytes(file: &Path, bytes: Vec<u8>) -> Result<Self> {
        let mc = MistralCommon::from_bytes(file, &bytes)?;
        let stop_token_ids = vec![mc.eos()];
        let origin = Origin::mistral_common(&mc, bytes);
        Ok(Encoder {
            backend: Backend::MistralCommon(Box::new(mc)),
            unknown_template_args: ArgsPolicy::default(),
            stop_token_ids,
            stop_token_ids_for_tool_calls: Vec::new(),
            origin,
        })
    }

    /// Build a transformers-route encoder from a loaded checkpoint (see [`Encoder::from_dir`]).
    ///
    /// Without `format`, the checkpoint's template decides: a native format is used only if it
    /// renders every probe conversation exactly as the template does ([`crate::probes`]);
    /// otherwise the Jinja path renders the template itself. `format="jinja"` forces the
    /// Jinja path; a native format name forces that format (the probes still report whether
    /// it matches, see [`Encoder::explain`]).
    pub fn from_checkpoint(checkpoint: Checkpoint, format: Option<&str>) -> Result<Self> {
        Self::from_checkpoint_with(checkpoint, format, false)
    }

    /// [`Encoder::from_checkpoint`]; with `allow_external`, a template chatids' engine cannot
    /// compile gives an encoder that only encodes text the caller rendered
    /// ([`Encoder::encode_rendered`]) instead of an error.
    pub fn from_checkpoint_with(
        checkpoint: Checkpoint,
        format: Option<&str>,
        allow_external: bool,
    ) -> Result<Self> {
        Self::build(checkpoint, format, allow_external, None)
    }

    /// The same tokenizer with another chat template (`template`'s text), the format chosen
    /// for it again (or forced with `format`). The text encoders are shared, not rebuilt, so
    /// this costs only the template's compilation and the probes. Transformers route only.
    pub fn with_chat_template(&self, template: &str, format: Option<&str>) -> Result<Self> {
        let (Some(t), Origin::Checkpoint(state)) = (self.template(), &self.origin) else {
            return Err(Error::Load(
                "with_chat_template applies to the transformers route (the mistral-common route has no template)".into(),
            ));
        };
        let mut checkpoint = state.to_checkpoint(t.text.tokenizer().clone());
        checkpoint.select_template(template)?;
        Ok(Self::build(
            checkpoint,
            format,
            state.allow_external(),
            Some(t.text.clone()),
        )?
        .with_unknown_template_args(self.unknown_template_args))
    }

    fn build(
        checkpoint: Checkpoint,
        format: Option<&str>,
        allow_external: bool,
        text: Option<std::sync::Arc<Selected>>,
    ) -> Result<Self> {
        let compiled = ChatTemplate::compile(&checkpoint.chat_template)
            .map(|t| JinjaFormat::new(t, &checkpoint));
        let official = formats::identify(&checkpoint.chat_template);
        let (renderer, format_choice) = match format {
            Some(crate::jinja::FORMAT_NAME) => {
                if let Err(e) = &compiled {
                    return Err(Error::Load(format!(
                        "the chat template cannot be compiled by chatids' Jinja engine: {e}"
                    )));
                }
                (Renderer::Jinja, FormatChoice::ExplicitJinja)
            }
            Some(name) => {
                let native = formats::build(name, &checkpoint)?;
                let report = compiled
                    .as_ref()
                    .ok()
                    .map(|j| probes::check(native.as_ref(), j));
                (Renderer::Native(native), FormatChoice::Explicit { report })
            }
            None => match &compiled {
                Ok(jinja) => choose_format(&checkpoint, jinja, official.map(|(n, _)| n)),
                Err(e) if allow_external => (
                    Renderer::External { reason: e.clone() },
                    FormatChoice::External,
                ),
                Err(e) => {
                    return Err(Error::Load(format!(
                        "the chat template cannot be compiled by chatids' Jinja engine ({e}); \
                         pass format=... to force a native format (the Python API falls back to jinja2)"
                    )))
                }
            },
        };
        let template_source = checkpoint.chat_template_source.clone();
        let format_choice = match format_choice {
            FormatChoice::Probed {
                report, rejected, ..
            } => FormatChoice::Probed {
                report,
                official: official
                    .filter(|(n, _)| matches!(&renderer, Renderer::Native(f) if f.name() == *n))
                    .map(|(_, source)| source),
                rejected,
            },
            other => other,
        };
        let control_tokens =
            ControlTokens::for_template(&checkpoint.added_tokens, &checkpoint.chat_template);
        let text = text.unwrap_or_else(|| {
            std::sync::Arc::new(Selected::new(
                checkpoint.tokenizer.clone(),
                EncoderChoice::from_env(),
            ))
        });
        let mut newline_ids = Vec::new();
        text.encode(
            "\n",
            TextOptions {
                added_tokens: true,
                at_start: true,
            },
            &mut newline_ids,
        )?;
        let token_id = |t: &str| checkpoint.tokenizer.token_to_id(t);
        let format_stops: &[&str] = match &renderer {
            Renderer::Native(f) => f.stop_tokens(),
            Renderer::Jinja | Renderer::External { .. } => &[],
        };
        // Tool-call stops: the format's own where it names them, else those the template writes.
        let mut stop_token_ids_for_tool_calls: Vec<u32> = tools::TOOL_CALL_STOP_TOKENS
            .iter()
            .filter(|t| match &renderer {
                Renderer::Native(f) => f.stop_tokens().contains(t),
                Renderer::Jinja | Renderer::External { .. } => {
                    checkpoint.chat_template.contains(*t)
                }
            })
            .filter_map(|t| token_id(t))
            .collect();
        stop_token_ids_for_tool_calls.sort_unstable();
        let mut stop_token_ids: Vec<u32> = format_stops
            .iter()
            .filter_map(|t| token_id(t))
            .chain(checkpoint.special_tokens.eos.as_deref().and_then(token_id))
            .chain(checkpoint.generation_eos_ids.iter().copied())
            .chain(stop_token_ids_for_tool_calls.iter().copied())
            .collect();
        stop_token_ids.sort_unstable();
        stop_token_ids.dedup();
        let bos_id = checkpoint.special_tokens.bos.as_deref().and_then(token_id);
        let post_processor_bos = checkpoint
            .tokenizer
            .encode("x", true)
            .ok()
            .and_then(|e| e.get_ids().first().copied())
            .filter(|&first| Some(first) == bos_id);
        let verified = match &format_choice {
            FormatChoice::Probed { .. } => true,
            FormatChoice::Explicit { report: Some(r) } => r.matches(),
            _ => false,
        };
        let verified = verified && matches!(renderer, Renderer::Native(_)) && compiled.is_ok();
        let template_args = compiled.as_ref().ok().map(|j| {
            let mut names = j.template().variables().clone();
            names.extend(checkpoint.special_tokens_map.iter().map(|(k, _)| k.clone()));
            names.extend(
                ALWAYS_ACCEPTED
                    .iter()
                    .chain(&crate::checkpoint::SPECIAL_TOKEN_NAMES)
                    .map(|n| n.to_string()),
            );
            names
        });
        let route = TemplateRoute {
            token_splitter: TokenSplitter::new(&checkpoint.added_tokens),
            verified,
            template_args,
            renderer,
            jinja: compiled.ok(),
            template_source,
            template_text: checkpoint.chat_template.clone(),
            special_tokens_map: checkpoint.special_tokens_map.clone(),
            format_choice,
            text,
            control_tokens,
            newline_ids,
            post_processor_bos,
            checkpoint_note: checkpoint.compat_note.clone(),
            template_fingerprint: formats::template_fingerprint(&checkpoint.chat_template),
        };
        Ok(Encoder {
            backend: Backend::Template(Box::new(route)),
            unknown_template_args: ArgsPolicy::default(),
            stop_token_ids,
            stop_token_ids_for_tool_calls,
            origin: Origin::checkpoint(checkpoint, format, allow_external),
        })
    }

    /// What the encoder was built from (see [`crate::persist`]).
    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The mistral-common backend, on that route.
    pub(crate) fn mistral_common(&self) -> Option<&MistralCommon> {
        match &self.backend {
            Backend::MistralCommon(mc) => Some(mc),
            Backend::Template(_) => None,
        }
    }

    fn template(&self) -> Option<&TemplateRoute> {
        match &self.backend {
            Backend::Template(t) => Some(t),
            Backend::MistralCommon(_) => None,
        }
    }

    /// Which reference this encoder reproduces.
    pub fn route(&self) -> Route {
        match &self.backend {
            Backend::Template(_) => Route::Transformers,
            Backend::MistralCommon(_) => Route::MistralCommon,
        }
    }

    /// The format's name (`"llama-3.1"`, or `"mistral-common-v3"` on the mistral-common route).
    pub fn format_name(&self) -> &'static str {
        match &self.backend {
            Backend::Template(t) => match &t.renderer {
                Renderer::Native(f) => f.name(),
                Renderer::Jinja => crate::jinja::FORMAT_NAME,
                Renderer::External { .. } => crate::jinja::EXTERNAL_FORMAT_NAME,
            },
            Backend::MistralCommon(mc) => mc.name(),
        }
    }

    /// The native format (transformers route with a native format only).
    pub fn format(&self) -> Option<&dyn ChatFormat> {
        match &self.template()?.renderer {
            Renderer::Native(f) => Some(f.as_ref()),
            Renderer::Jinja | Renderer::External { .. } => None,
        }
    }

    /// The chat template in use (transformers route).
    pub fn chat_template(&self) -> Option<&str> {
        self.template().map(|t| t.template_text.as_str())
    }

    /// The special-token variables the template sees (transformers' `special_tokens_map`).
    pub fn special_tokens_map(&self) -> &[(String, String)] {
        self.template().map_or(&[], |t| &t.special_tokens_map)
    }

    /// Whether the caller must render the template (see [`Encoder::encode_rendered`]).
    pub fn needs_external_renderer(&self) -> bool {
        self.template()
            .is_some_and(|t| matches!(t.renderer, Renderer::External { .. }))
    }

    /// Encode a prompt the caller rendered from the checkpoint's template, as transformers
    /// encodes `apply_chat_template`'s text: added tokens matched; with `marked`, the text was
    /// rendered from inputs marked as [`crate::jinja`] marks them, and every marked control
    /// token is encoded as plain text. Tokens carry no message index.
    pub fn encode_rendered(&self, rendered: &str, marked: bool) -> Result<Vec<u32>> {
        let t = self.template().ok_or_else(|| {
            Error::Load("encode_rendered applies to the transformers route".into())
        })?;
        let pieces =
            crate::jinja::split_rendered(rendered, &[], marked.then_some(&t.control_tokens))?;
        let encoder = PieceEncoder {
            text: &*t.text,
            sanitizer: marked.then_some(&t.control_tokens),
            newline_ids: &t.newline_ids,
        };
        let mut out = EncodedChat::default();
        encoder.encode(pieces.as_slice(), Tracking::default(), &mut out)?;
        Ok(out.ids)
    }

    /// Whether the Jinja path renders the checkpoint's template.
    pub fn is_jinja(&self) -> bool {
        self.template()
            .is_some_and(|t| matches!(t.renderer, Renderer::Jinja))
    }

    /// Whether rendering needs [`EncodeOptions::now`]: the template calls `strftime_now()`
    /// (on the Jinja path, or a native format that writes the template's date).
    pub fn reads_clock(&self) -> bool {
        self.template().is_some_and(|t| match &t.renderer {
            Renderer::Native(f) => {
                !f.clock_defaults().is_empty()
                    || (t.verified && t.jinja.as_ref().is_some_and(|j| j.template().reads_clock()))
            }
            Renderer::Jinja => t.jinja.as_ref().is_some_and(|j| j.template().reads_clock()),
            Renderer::External { .. } => false,
        })
    }

    /// The template arguments the checkpoint's template reads (its undeclared variables, as
    /// jinja2's `meta.find_undeclared_variables` gives them), plus the names transformers gives
    /// every template (the special tokens, `tools`, `documents`). `None` where they are not
    /// known (a template chatids' engine cannot compile; the mistral-common route, whose only
    /// argument is `tools`).
    pub fn template_args(&self) -> Option<&std::collections::BTreeSet<String>> {
        self.template().and_then(|t| t.template_args.as_ref())
    }

    /// How the format was chosen (transformers route only).
    pub fn format_choice(&self) -> Option<&FormatChoice> {
        self.template().map(|t| &t.format_choice)
    }

    /// Why this format was chosen, and what was adjusted to match the reference.
    pub fn explain(&self) -> String {
        let t = match &self.backend {
            Backend::MistralCommon(mc) => {
                return format!(
                    "format {}: the checkpoint ships mistral-common's tokenizer file {}; chatids encodes as \
                     mistral-common's encode_chat_completion does (pass reference=\"transformers\" for the \
                     Hugging Face template route)",
                    mc.name(),
                    mc.file().display()
                )
            }
            Backend::Template(t) => t,
        };
        let name = self.format_name();
        let mut lines = vec![format!(
            "chat template: {} (sha256 {})",
            t.template_source, t.template_fingerprint
        )];
        let refused = |report: &ProbeReport, lines: &mut Vec<String>| {
            for (probe, why) in &report.refused {
                lines.push(format!(
                    "  refuses probe \"{probe}\" (the template drops a message silently): {why}"
                ));
            }
            let mut kinds: Vec<&str> = Vec::new();
            for (_, why) in &report.delegated {
                if !kinds.contains(&why.as_str()) {
                    kinds.push(why);
                }
            }
            if !kinds.is_empty() {
                lines.push(format!(
                    "  hands {} probe conversations to the checkpoint's template (rendered on the jinja path): {}",
                    report.delegated.len(),
                    kinds.join("; ")
                ));
            }
        };
        match &t.format_choice {
            FormatChoice::Probed {
                report,
                official,
                rejected,
            } => {
                lines.push(format!(
                    "format {name}: renders all {} probe conversations exactly as the checkpoint's template does{}",
                    report.compared,
                    official
                        .map(|s| format!(" (the template is byte-for-byte the official one of {s})"))
                        .unwrap_or_default()
                ));
                refused(report, &mut lines);
                for (format, why) in rejected {
                    lines.push(format!("  not {format}: {why}"));
                }
            }
            FormatChoice::Jinja { rejected } => {
                lines.push(format!(
                    "format {name}: the Jinja path renders the checkpoint's template with chatids' Jinja engine; \
                     no native format reproduces it"
                ));
                for (format, why) in rejected {
                    lines.push(format!("  not {format}: {why}"));
                }
            }
            FormatChoice::Explicit { report: Some(report) } if report.matches() => {
                lines.push(format!(
                    "format {name}: chosen by the caller; it renders all {} probes as the checkpoint's template does",
                    report.compared
                ));
                refused(report, &mut lines);
            }
            FormatChoice::Explicit { report: Some(report) } => lines.push(format!(
                "format {name}: chosen by the caller; it does NOT reproduce the checkpoint's template (probe \"{}\" differs {}), \
                 so the output is not verified against it",
                report.difference.as_ref().map_or("", |d| d.probe.as_str()),
                report.difference.as_ref().map_or("", |d| d.detail.as_str()),
            )),
            FormatChoice::Explicit { report: None } => lines.push(format!(
                "format {name}: chosen by the caller; the checkpoint's template cannot be compiled, so it was not checked"
            )),
            FormatChoice::External => lines.push(format!(
                "format {name}: chatids' Jinja engine cannot compile the template ({}); the Python layer renders it with \
                 jinja2 (as transformers does) and chatids encodes the text",
                match &t.renderer {
                    Renderer::External { reason } => reason.as_str(),
                    _ => "",
                }
            )),
            FormatChoice::ExplicitJinja => lines.push(format!(
                "format {name}: the caller asked for the Jinja path (the checkpoint's template rendered by chatids' Jinja engine)"
            )),
        }
        if let Some(note) = &t.checkpoint_note {
            lines.push(format!("tokenizer: {note}"));
        }
        lines.push(t.text.describe());
        lines.join("\n")
    }

    /// What chatids changed in tokenizer.json to encode like transformers, if anything.
    pub fn checkpoint_note(&self) -> Option<&str> {
        self.template().and_then(|t| t.checkpoint_note.as_deref())
    }

    /// The BOS id the tokenizer's post-processor adds with `add_special_tokens=True`, if any.
    pub fn post_processor_bos(&self) -> Option<u32> {
        self.template().and_then(|t| t.post_processor_bos)
    }

    /// The ids that end an assistant turn: the format's end-of-turn tokens, the config's
    /// `eos_token`, and `generation_config.json`'s `eos_token_id` (on the mistral-common route,
    /// `</s>`).
    pub fn stop_token_ids(&self) -> &[u32] {
        &self.stop_token_ids
    }

    /// The stop tokens that mean "the model called a tool" (a subset of
    /// [`Encoder::stop_token_ids`]): Llama 3.1+ `<|eom_id|>`, gpt-oss `<|call|>`; empty where
    /// the format ends a tool call like any answer (see [`crate::tools::TOOL_CALL_STOP_TOKENS`]).
    pub fn stop_token_ids_for_tool_calls(&self) -> &[u32] {
        &self.stop_token_ids_for_tool_calls
    }

    /// The control tokens (special tokens plus added tokens in the template's text).
    pub fn control_tokens(&self) -> &ControlTokens {
        match &self.backend {
            Backend::Template(t) => &t.control_tokens,
            Backend::MistralCommon(mc) => mc.control_tokens(),
        }
    }

    /// The text encoders (the checkpoint's tokenizer.json), on the transformers route.
    pub fn text_encoder(&self) -> Option<&Selected> {
        self.template().map(|t| &*t.text)
    }

    /// Render `messages` into pieces, with the native format or the Jinja path (which marks
    /// caller control tokens when `sanitize` is set).
    fn render_pieces<'a>(
        t: &'a TemplateRoute,
        messages: &'a [Message],
        options: &'a EncodeOptions,
        sanitize: bool,
        provenance: bool,
    ) -> Result<Pieces<'a>, TemplateError> {
        match &t.renderer {
            Renderer::Native(_) if t.verified && tools::uses_tools(messages, &options.kwargs) => {
                Self::delegated_pieces(t, messages, options, sanitize, provenance, "uses tools")
            }
            Renderer::Native(format) => {
                let request = RenderRequest {
                    messages,
                    add_generation_prompt: options.add_generation_prompt,
                    kwargs: &options.kwargs,
                    system: options.system,
                    now: options.now,
                };
                let mut pieces = Pieces::new();
                match format.render(&request, &mut pieces) {
                    Ok(()) => Ok(pieces),
                    // The checkpoint's template is the authority: what the format does not
                    // model, or refuses as the template's own error, the template renders.
                    Err(e) if t.verified && e.template_decides() => {
                        let why = if e.refusal == Refusal::Unmodeled {
                            "has input the native format does not model"
                        } else {
                            "breaks a rule of the template"
                        };
                        Self::delegated_pieces(t, messages, options, sanitize, provenance, why)
                            .map_err(|mut template_error| match e.refusal {
                                // The native copy of the template's rule names the message.
                                Refusal::TemplateRaises => e,
                                // The template failed on the input the format flagged: name it.
                                _ => {
                                    if template_error.message.is_none() {
                                        template_error.message = e.message;
                                    }
                                    template_error
                                }
                            })
                    }
                    Err(e) => Err(e),
                }
            }
            Renderer::Jinja => {
                let jinja = t
                    .jinja
                    .as_ref()
                    .expect("the Jinja path has a compiled template");
                if options.system != SystemPolicy::Template {
                    return Err(TemplateError::whole(
                        "system= applies to native formats; the Jinja path renders the template as it is",
                    ));
                }
                Self::jinja_pieces(jinja, t, messages, options, sanitize, provenance)
            }
            Renderer::External { reason } => Err(TemplateError::whole(format!(
                "chatids' Jinja engine cannot compile this template ({reason}); render it in Python \
                 (chatids.Encoder does so with jinja2) and use encode_rendered"
            ))),
        }
    }

    /// Render a conversation the native format hands over with the checkpoint's template on
    /// the Jinja path (`why`: what makes it the template's).
    fn delegated_pieces<'a>(
        t: &'a TemplateRoute,
        messages: &'a [Message],
        options: &'a EncodeOptions,
        sanitize: bool,
        provenance: bool,
        why: &str,
    ) -> Result<Pieces<'a>, TemplateError> {
        let jinja = t
            .jinja
            .as_ref()
            .expect("a verified native format has the compiled template");
        if options.system != SystemPolicy::Template {
            return Err(TemplateError::whole(format!(
                "system= applies to conversations a native format renders; this one {why}, so the checkpoint's \
                 template renders it as it is"
            )));
        }
        Self::jinja_pieces(jinja, t, messages, options, sanitize, provenance)
    }

    /// Render `messages` with the checkpoint's template on the Jinja path.
    fn jinja_pieces<'a>(
        jinja: &'a JinjaFormat,
        t: &'a TemplateRoute,
        messages: &'a [Message],
        options: &'a EncodeOptions,
        sanitize: bool,
        provenance: bool,
    ) -> Result<Pieces<'a>, TemplateError> {
        let request = JinjaRequest {
            add_generation_prompt: options.add_generation_prompt,
            kwargs: &options.kwargs,
            now: options.now,
        };
        // Template text next to a message text could complete a partial control token at its
        // edge (`x<|eot` + `_id|>`); the encoder sanitizes such tokens only where it knows the
        // caller's text, so locate message texts then (a second render, rarely needed).
        let provenance = provenance
            || (sanitize
                && messages
                    .iter()
                    .flat_map(Message::texts)
                    .any(|s| t.control_tokens.has_partial_edge(s)));
        let pieces = jinja.pieces(
            messages,
            &request,
            sanitize.then_some(&t.control_tokens),
            provenance,
        )?;
        // On the caller's text: the rendered string itself holds sanitizer markers.
        tools::check_nothing_dropped(messages, &pieces.render())?;
        Ok(pieces)
    }

    /// Apply the input policies of `options`, render with the native format, and hand the
    /// pieces to `f`.
    #[allow(clippy::too_many_arguments)]
    fn with_pieces<R>(
        t: &TemplateRoute,
        policy: ArgsPolicy,
        messages: &[Message],
        options: &EncodeOptions,
        sanitize: bool,
        provenance: bool,
        f: impl FnOnce(&Pieces<'_>) -> Result<R>,
    ) -> Result<R> {
        let filtered;
        let options = match t.check_args(&options.kwargs, policy)? {
            Some(kwargs) => {
                filtered = EncodeOptions {
                    kwargs,
                    ..options.clone()
                };
                &filtered
            }
            None => options,
        };
        tools::check_tool_calls(messages, tools::ArgumentsCheck::DictOrJson)?;
        if options.continue_final_message {
            if options.add_generation_prompt {
                return Err(TemplateError::whole(
                    "continue_final_message and add_generation_prompt are not compatible: the first continues the \
                     final message, the second starts a new assistant message",
                )
                .into());
            }
            let (tagged, final_text) = prefill::tag_final_message(messages)?;
            let untagged = EncodeOptions {
                continue_final_message: false,
                ..options.clone()
            };
            return Self::with_policy_pieces(
                t,
                &tagged,
                &untagged,
                sanitize,
                provenance,
                |pieces| {
                    let mut pieces = pieces.clone();
                    prefill::cut_at_tag(&mut pieces, &final_text)?;
                    f(&pieces)
                },
            );
        }
        Self::with_policy_pieces(t, messages, options, sanitize, provenance, f)
    }

    /// [`Encoder::with_pieces`] after the prefill step: merge consecutive messages if asked,
    /// render, hand the pieces to `f`.
    fn with_policy_pieces<R>(
        t: &TemplateRoute,
        messages: &[Message],
        options: &EncodeOptions,
        sanitize: bool,
        provenance: bool,
        f: impl FnOnce(&Pieces<'_>) -> Result<R>,
    ) -> Result<R> {
        if !options.merge_consecutive {
            return f(&Self::render_pieces(
                t, messages, options, sanitize, provenance,
            )?);
        }
        let (merged, origin) = policies::merge_consecutive(messages)?;
        let mut pieces = Self::render_pieces(t, &merged, options, sanitize, provenance)
            .map_err(|e| policies::remap_error(e, &origin))?;
        pieces.remap_messages(&origin);
        f(&pieces)
    }

    /// Checks of `options` that only the mistral-common route makes, and what it passes on:
    /// the `tools` argument (the only template argument mistral-common takes; `None` is no
    /// tools) and `continue_final_message` (which excludes `add_generation_prompt`).
    /// The checks every mistral-common call makes before encoding or rendering: tool calls'
    /// shape (arguments are left to the route's own validation) and the options it accepts.
    fn mistral_common_options<'o>(
        messages: &[Message],
        options: &'o EncodeOptions,
        policy: ArgsPolicy,
    ) -> Result<crate::mistral_common::Options<'o>> {
        tools::check_tool_calls(messages, tools::ArgumentsCheck::LeftToRoute)?;
        let mut tools = None;
        for (name, value) in &options.kwargs {
            if name != "tools" && policy == ArgsPolicy::Ignore {
                continue;
            }
            match (name.as_str(), value) {
                ("tools", crate::message::TemplateValue::None) => {}
                ("tools", crate::message::TemplateValue::Json(v @ serde_json::Value::Array(_))) => {
                    tools = Some(v)
                }
                ("tools", other) => {
                    return Err(TemplateError::whole(format!(
                        "tools must be a list of {{\"type\": \"function\", \"function\": {{...}}}} dicts, not a {}",
                        other.type_name()
                    ))
                    .into())
                }
                _ => {
                    return Err(TemplateError::whole(format!(
                        "the mistral-common route has no template argument {name:?} (it takes: tools); an unknown argument \
                         would be ignored silently (load with unknown_template_args=\"ignore\" to leave such arguments out)"
                    ))
                    .into())
                }
            }
        }
        if options.system != SystemPolicy::Template {
            return Err(TemplateError::whole(
                "system= applies to template formats; mistral-common places system prompts itself",
            )
            .into());
        }
        if options.continue_final_message && options.add_generation_prompt {
            return Err(TemplateError::whole(
                "continue_final_message=True and add_generation_prompt=True exclude each other: continue the final (assistant) message, or start a new one",
            )
            .into());
        }
        Ok(crate::mistral_common::Options {
            tools,
            continue_final_message: options.continue_final_message,
        })
    }

    /// The prompt as text: on the transformers route exactly
    /// `apply_chat_template(..., tokenize=False)`; on the mistral-common route what it encodes,
    /// special tokens as text (see [`MistralCommon::render`]).
    pub fn render(&self, messages: &[Message], options: &EncodeOptions) -> Result<String> {
        match &self.backend {
            Backend::Template(t) => Self::with_pieces(
                t,
                self.unknown_template_args,
                messages,
                options,
                false,
                false,
                |pieces| Ok(pieces.render()),
            ),
            Backend::MistralCommon(mc) => {
                let mc_options =
                    Self::mistral_common_options(messages, options, self.unknown_template_args)?;
                mc.render(messages, mc_options)
            }
        }
    }

    /// The token ids of the conversation.
    pub fn encode(&self, messages: &[Message], options: &EncodeOptions) -> Result<Vec<u32>> {
        Ok(self
            .encode_tracked(messages, options, Tracking::default())?
            .ids)
    }

    /// The token ids with the per-token provenance asked for in `tracking`.
    pub fn encode_tracked(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        tracking: Tracking,
    ) -> Result<EncodedChat> {
        let mut out = EncodedChat::default();
        self.encode_into(messages, options, tracking, &mut out)?;
        Ok(out)
    }

    /// Like [`Encoder::encode_tracked`], appending to `out`.
    pub fn encode_into(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        match &self.backend {
            Backend::Template(t) => {
                let encoder = PieceEncoder {
                    text: &*t.text,
                    sanitizer: options.sanitize_control_tokens.then_some(&t.control_tokens),
                    newline_ids: &t.newline_ids,
                };
                let provenance = tracking.message_indices || tracking.from_content || tracking.body;
                Self::with_pieces(
                    t,
                    self.unknown_template_args,
                    messages,
                    options,
                    options.sanitize_control_tokens,
                    provenance,
                    |pieces| encoder.encode(pieces.as_slice(), tracking, out),
                )
            }
            Backend::MistralCommon(mc) => {
                let mc_options =
                    Self::mistral_common_options(messages, options, self.unknown_template_args)?;
                mc.encode_into(messages, mc_options, tracking, out)
            }
        }
    }

    /// Render `messages` and hand the pieces, with the encoder of this checkpoint's pieces, to
    /// `f` (what [`crate::session`] builds on). `None` on the mistral-common route, which has
    /// no piece stream.
    pub(crate) fn with_rendered_pieces<R>(
        &self,
        messages: &[Message],
        options: &EncodeOptions,
        provenance: bool,
        f: impl FnOnce(&Pieces<'_>, &PieceEncoder<'_>, &TokenSplitter) -> Result<R>,
    ) -> Result<Option<R>> {
        let Backend::Template(t) = &self.backend else {
            return Ok(None);
        };
        let encoder = PieceEncoder {
            text: &*t.text,
            sanitizer: options.sanitize_control_tokens.then_some(&t.control_tokens),
            newline_ids: &t.newline_ids,
        };
        Self::with_pieces(
            t,
            self.unknown_template_args,
            messages,
            options,
            options.sanitize_control_tokens,
            provenance,
            |pieces| f(pieces, &encoder, &t.token_splitter),
        )
        .map(Some)
    }
}

/// Why a probed native format was not chosen, in one line.
fn rejection(report: &ProbeReport) -> String {
    match &report.difference {
        Some(d) => match d.kind {
            DifferenceKind::Refuses => format!(
                "it refuses probe \"{}\" that the template renders: {}",
                d.probe, d.detail
            ),
            DifferenceKind::TemplateRaises => format!("probe \"{}\": {}", d.probe, d.detail),
            DifferenceKind::Text => format!("probe \"{}\" differs {}", d.probe, d.detail),
        },
        None => format!(
            "it reproduces the template too, but refuses {} and hands {} probes to the template",
            report.refused.len(),
            report.delegated.len()
        ),
    }
}

/// Probe the native formats against the checkpoint's template. The format whose official
/// template it is byte for byte serves if it reproduces it; otherwise every native format
/// whose tokens the vocabulary has is probed, and of those that reproduce the template the
/// one with the fewest refusals wins, then the one that hands the fewest probes to the
/// template, then the first in [`formats::FORMAT_NAMES`]. If none does, the Jinja path.
fn choose_format(
    checkpoint: &Checkpoint,
    jinja: &JinjaFormat,
    official: Option<&'static str>,
) -> (Renderer, FormatChoice) {
    let mut rejected = Vec::new();
    if let Some(name) = official {
        if let Ok(native) = formats::build(name, checkpoint) {
            let report = probes::check(native.as_ref(), jinja);
            if report.matches() {
                let choice = FormatChoice::Probed {
                    report,
                    official: None,
                    rejected,
                };
                return (Renderer::Native(native), choice);
            }
            rejected.push((name, rejection(&report)));
        }
    }
    let mut best: Option<(Box<dyn ChatFormat>, ProbeReport)> = None;
    let rank = |r: &ProbeReport| (r.refused.len(), r.delegated.len());
    for name in formats::FORMAT_NAMES
        .iter()
        .copied()
        .filter(|n| Some(*n) != official)
    {
        let Ok(native) = formats::build(name, checkpoint) else {
            continue; // the vocabulary lacks the format's tokens
        };
        let report = probes::check(native.as_ref(), jinja);
        if !report.matches() {
            rejected.push((name, rejection(&report)));
            continue;
        }
        match &best {
            Some((_, b)) if rank(b) <= rank(&report) => rejected.push((name, rejection(&report))),
            _ => {
                if let Some((f, r)) = best.replace((native, report)) {
                    rejected.push((f.name(), rejection(&r)));
                }
            }
        }
    }
    match best {
        Some((native, report)) => (
            Renderer::Native(native),
            FormatChoice::Probed {
                report,
                official: None,
                rejected,
            },
        ),
        None => (Renderer::Jinja, FormatChoice::Jinja { rejected }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With sanitizing off, encoding the pieces must equal encoding the rendered string in
    /// one go, which is what transformers does. Runs on the real checkpoints when
    /// `CHATIDS_MODELS_DIR` is set (`make test` sets it).
    #[test]
    fn piece_encoding_equals_encoding_the_rendered_prompt() {
        let Ok(base) = std::env::var("CHATIDS_MODELS_DIR") else {
            eprintln!("CHATIDS_MODELS_DIR not set: skipped");
            return;
        };
        let conversations = vec![
            vec![Message::new("user", "Hello there!")],
            vec![
                Message::new("system", "  Be brief.\n"),
                Message::new("user", "\n\nWhy? <|eot_id|> <|im_end|>"),
                Message::new("assistant", "Because 你好 🙂\n"),
                Message::new("user", " trailing "),
            ],
        ];
        let mut checked = 0;
        for dir in [
            "meta-llama-3-8b-instruct",
            "llama-3.1-8b-instruct",
            "openhermes-2.5-mistral-7b",
            "qwen2.5-7b-instruct",
            "qwen3-0.6b",
        ] {
            let path = std::path::Path::new(&base).join(dir);
            if !path.is_dir() {
                continue;
            }
            let enc = Encoder::from_dir(&path, None).unwrap();
            for messages in &conversations {
                for agp in [false, true] {
                    let options = EncodeOptions {
                        add_generation_prompt: agp,
                        sanitize_control_tokens: false,
                        ..Default::default()
                    };
                    let text = enc.render(messages, &options).unwrap();
                    let whole = enc
                        .text_encoder()
                        .expect("a transformers-route checkpoint")
                        .tokenizer()
                        .encode(text.as_str(), false)
                        .unwrap();
                    // Twice: the second time the short runs come from the cache.
                    for _ in 0..2 {
                        let ids = enc.encode(messages, &options).unwrap();
                        assert_eq!(ids, whole.get_ids(), "{dir}");
                    }
                    checked += 1;
                }
            }
        }
        eprintln!("checked {checked} conversations");
    }
}
