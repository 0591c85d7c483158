//! The transformers route's way from messages to pieces: the template-argument rule, one
//! preparation step ([`crate::input::prepare`]), one render (the native format, or the
//! checkpoint's template on the Jinja path for what the format hands over), and the finish.
//! Also the checks the mistral-common route makes before it encodes.

use super::*;
use crate::input;

/// How one render runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RenderMode<'m> {
    /// Mark control tokens in caller text, which the encoder then encodes as text.
    pub sanitize: bool,
    /// Locate message texts in the rendered prompt (a second render on the Jinja path).
    pub provenance: bool,
    /// Conversions kept from earlier renders of the same conversation (a session's).
    pub memo: Option<&'m RenderMemo>,
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

    /// Render `messages` into pieces, with the native format or the Jinja path (which marks
    /// caller control tokens when `sanitize` is set).
    fn render_pieces<'a>(
        &'a self,
        messages: &'a [Message],
        options: &'a EncodeOptions,
        mode: RenderMode<'_>,
    ) -> Result<Pieces<'a>, TemplateError> {
        match &self.renderer {
            Renderer::Native(_) if self.verified && tools::uses_tools(messages, &options.kwargs) => {
                self.delegated_pieces(messages, options, mode, "uses tools")
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
                    Err(e) if self.verified && e.template_decides() => {
                        let why = if e.refusal == Refusal::Unmodeled {
                            "has input the native format does not model"
                        } else {
                            "breaks a rule of the template"
                        };
                        self.delegated_pieces(messages, options, mode, why)
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
                let jinja = self
                    .jinja
                    .as_ref()
                    .expect("the Jinja path has a compiled template");
                if options.system != SystemPolicy::Template {
                    return Err(TemplateError::whole(
                        "system= applies to native formats; the Jinja path renders the template as it is",
                    ));
                }
                self.jinja_pieces(jinja, messages, options, mode)
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
        &'a self,
        messages: &'a [Message],
        options: &'a EncodeOptions,
        mode: RenderMode<'_>,
        why: &str,
    ) -> Result<Pieces<'a>, TemplateError> {
        let jinja = self
            .jinja
            .as_ref()
            .expect("a verified native format has the compiled template");
        if options.system != SystemPolicy::Template {
            return Err(TemplateError::whole(format!(
                "system= applies to conversations a native format renders; this one {why}, so the checkpoint's \
                 template renders it as it is"
            )));
        }
        self.jinja_pieces(jinja, messages, options, mode)
    }

    /// Render `messages` with the checkpoint's template on the Jinja path.
    fn jinja_pieces<'a>(
        &'a self,
        jinja: &'a JinjaFormat,
        messages: &'a [Message],
        options: &'a EncodeOptions,
        mode: RenderMode<'_>,
    ) -> Result<Pieces<'a>, TemplateError> {
        let RenderMode {
            sanitize,
            provenance,
            memo,
        } = mode;
        let request = JinjaRequest {
            add_generation_prompt: options.add_generation_prompt,
            kwargs: &options.kwargs,
            now: options.now,
            memo,
        };
        let provenance = provenance || self.edges_need_provenance(messages, sanitize);
        let pieces = jinja.pieces(
            messages,
            &request,
            sanitize.then_some(&self.control_tokens),
            provenance,
        )?;
        // On the caller's text: the rendered string itself holds sanitizer markers.
        tools::check_nothing_dropped(messages, &pieces.rendered())?;
        Ok(pieces)
    }

    /// Whether sanitizing `messages` needs provenance: template text next to a message text
    /// could complete a partial control token at its edge (`x<|eot` + `_id|>`), and the
    /// encoder sanitizes such tokens only where it knows the caller's text, so message texts
    /// are located then (a second render, rarely needed).
    fn edges_need_provenance(&self, messages: &[Message], sanitize: bool) -> bool {
        sanitize
            && messages
                .iter()
                .flat_map(Message::texts)
                .any(|s| self.control_tokens.has_partial_edge(s))
    }

    /// The piece encoder of this checkpoint; with `sanitize`, control tokens in content are
    /// encoded as text.
    pub(super) fn piece_encoder(&self, sanitize: bool) -> PieceEncoder<'_> {
        PieceEncoder {
            text: &*self.text,
            sanitizer: sanitize.then_some(&self.control_tokens),
            newline_ids: &self.newline_ids,
        }
    }

    /// The prompt as text, exactly `apply_chat_template(..., tokenize=False)`.
    pub(super) fn render(
        &self,
        policy: ArgsPolicy,
        messages: &[Message],
        options: &EncodeOptions,
    ) -> Result<String> {
        self.with_pieces(policy, messages, options, RenderMode::default(), |pieces| {
            Ok(pieces.render())
        })
    }

    /// The ids, with the provenance asked for in `tracking`, appended to `out`.
    pub(super) fn encode_into(
        &self,
        policy: ArgsPolicy,
        messages: &[Message],
        options: &EncodeOptions,
        tracking: Tracking,
        out: &mut EncodedChat,
    ) -> Result<()> {
        let encoder = self.piece_encoder(options.sanitize_control_tokens);
        let provenance = tracking.message_indices || tracking.from_content || tracking.body;
        self.with_pieces(
            policy,
            messages,
            options,
            RenderMode {
                sanitize: options.sanitize_control_tokens,
                provenance,
                memo: None,
            },
            |pieces| encoder.encode(pieces.as_slice(), tracking, out),
        )
    }

    /// Prepare the conversation (the template-argument rule, then [`input::prepare`]), render
    /// it once, finish the pieces ([`input::Prepared::finish`]) and hand them to `f`.
    pub(super) fn with_pieces<R>(
        &self,
        policy: ArgsPolicy,
        messages: &[Message],
        options: &EncodeOptions,
        mode: RenderMode<'_>,
        f: impl FnOnce(&Pieces<'_>) -> Result<R>,
    ) -> Result<R> {
        let kwargs = self.check_args(&options.kwargs, policy)?;
        let checked = mode.memo.map_or(0, |memo| memo.converted_prefix(messages));
        let prepared = input::prepare(messages, options, kwargs, checked)?;
        let mut pieces = self
            .render_pieces(&prepared.messages, &prepared.options, mode)
            .map_err(|e| prepared.error(e))?;
        prepared.finish(&mut pieces)?;
        f(&pieces)
    }
}

impl TemplateRoute {
    /// [`TemplateRoute::with_pieces`] of `messages` without and with the generation prompt,
    /// from one render of the Jinja path (`options` are those with it): `f` gets both piece
    /// lists and what is known of their text ([`JinjaFormat::pieces_split`]). `None` when one
    /// render cannot give both (a native format renders, the template does not split, the
    /// render needs provenance, or any check fails: the caller then renders each, which
    /// raises what there is to raise).
    pub(super) fn with_pieces_split<R>(
        &self,
        policy: ArgsPolicy,
        messages: &[Message],
        options: &EncodeOptions,
        mode: RenderMode<'_>,
        f: impl FnOnce(SplitPieces) -> Result<R>,
    ) -> Result<Option<R>> {
        if !options.add_generation_prompt
            || options.continue_final_message
            || options.system != SystemPolicy::Template
            || mode.provenance
        {
            return Ok(None);
        }
        let Ok(kwargs) = self.check_args(&options.kwargs, policy) else {
            return Ok(None);
        };
        let checked = mode.memo.map_or(0, |memo| memo.converted_prefix(messages));
        let Ok(prepared) = input::prepare(messages, options, kwargs, checked) else {
            return Ok(None);
        };
        let (messages, options) = (&prepared.messages[..], &*prepared.options);
        // The route render_pieces takes to the template (a native format renders itself).
        let jinja = match (&self.renderer, &self.jinja) {
            (Renderer::Jinja, Some(jinja)) => jinja,
            (Renderer::Native(_), Some(jinja))
                if self.verified && tools::uses_tools(messages, &options.kwargs) =>
            {
                jinja
            }
            _ => return Ok(None),
        };
        if self.edges_need_provenance(messages, mode.sanitize) {
            return Ok(None);
        }
        let request = JinjaRequest {
            add_generation_prompt: true,
            kwargs: &options.kwargs,
            now: options.now,
            memo: mode.memo,
        };
        let sanitizer = mode.sanitize.then_some(&self.control_tokens);
        let Ok(Some(mut split)) = jinja.pieces_split(messages, &request, sanitizer) else {
            return Ok(None);
        };
        let finished = match &mut split.text {
            // One text: one search checks both renders. Its one piece is template text of no
            // message, which finishing leaves as it is unless it cuts the text.
            SplitText::Whole { text, at } => {
                tools::check_nothing_dropped_before(messages, text, *at, mode.memo).is_ok()
                    && !prepared.cuts_text()
            }
            SplitText::Pieces { without, with } => {
                tools::check_nothing_dropped(messages, &without.rendered()).is_ok()
                    && tools::check_nothing_dropped(messages, &with.rendered()).is_ok()
                    && prepared.finish(without).is_ok()
                    && prepared.finish(with).is_ok()
            }
        };
        if !finished {
            return Ok(None);
        }
        f(split).map(Some)
    }
}

/// Checks of `options` that only the mistral-common route makes, and what it passes on:
/// the `tools` argument (the only template argument mistral-common takes; `None` is no
/// tools) and `continue_final_message` (which excludes `add_generation_prompt`).
/// The checks every mistral-common call makes before encoding or rendering: tool calls'
/// shape (arguments are left to the route's own validation) and the options it accepts.
pub(super) fn mistral_common_options<'o>(
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
            ("tools", crate::message::TemplateValue::Json(v)) if v.is_array() => {
                tools = Some(&**v)
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
