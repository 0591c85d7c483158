//! Loading an [`Encoder`]: the route (transformers or mistral-common), the checkpoint's files,
//! and the format choice: which native format, if any, reproduces the checkpoint's template
//! on every probe conversation (see [`crate::render::probes`]), else the Jinja path.

use std::path::Path;

use super::*;

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
            completion: Default::default(),
        })
    }

    /// Build a transformers-route encoder from a loaded checkpoint (see [`Encoder::from_dir`]).
    ///
    /// Without `format`, the checkpoint's template decides: a native format is used only if it
    /// renders every probe conversation exactly as the template does ([`crate::render::probes`]);
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
        let mut checkpoint = state.to_checkpoint(t.text.lazy_tokenizer().clone());
        checkpoint.select_template(template)?;
        Ok(Self::build(
            checkpoint,
            format,
            state.allow_external(),
            Some(t.text.clone()),
        )?
        .with_unknown_template_args(self.unknown_template_args))
    }

    /// Build the encoder over text encoders already made (a state's native core, see
    /// [`crate::persist`]).
    pub(crate) fn build_with_text(
        checkpoint: Checkpoint,
        format: Option<&str>,
        allow_external: bool,
        text: std::sync::Arc<Selected>,
    ) -> Result<Self> {
        Self::build(checkpoint, format, allow_external, Some(text))
    }

    fn build(
        mut checkpoint: Checkpoint,
        format: Option<&str>,
        allow_external: bool,
        text: Option<std::sync::Arc<Selected>>,
    ) -> Result<Self> {
        let compiled = ChatTemplate::compile(&checkpoint.chat_template)
            .map(|t| JinjaFormat::new(t, &checkpoint));
        let official = native::identify(&checkpoint.chat_template);
        let (renderer, format_choice) = match format {
            Some(crate::render::jinja::FORMAT_NAME) => {
                if let Err(e) = &compiled {
                    return Err(Error::Load(format!(
                        "the chat template cannot be compiled by chatids' Jinja engine: {e}"
                    )));
                }
                (Renderer::Jinja, FormatChoice::ExplicitJinja)
            }
            Some(name) => {
                let native = native::build(name, &checkpoint)?;
                let report = compiled
                    .as_ref()
                    .ok()
                    .map(|j| probes::check(native.as_ref(), j));
                (Renderer::Native(native), FormatChoice::Explicit { report })
            }
            None => match &compiled {
                Ok(jinja) => {
                    let (native, choice) =
                        crate::render::choose::choose(&checkpoint, jinja, official.map(|(n, _)| n));
                    (native.map_or(Renderer::Jinja, Renderer::Native), choice)
                }
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
        let native_model = checkpoint.native_model.take();
        let text = text.unwrap_or_else(|| {
            std::sync::Arc::new(Selected::with_model(
                checkpoint.tokenizer.clone(),
                EncoderChoice::from_env(),
                native_model,
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
            .first_id_with_specials()
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
            template_fingerprint: native::template_fingerprint(&checkpoint.chat_template),
        };
        Ok(Encoder {
            backend: Backend::Template(Box::new(route)),
            unknown_template_args: ArgsPolicy::default(),
            stop_token_ids,
            stop_token_ids_for_tool_calls,
            origin: Origin::checkpoint(checkpoint, format, allow_external),
            completion: Default::default(),
        })
    }
}
