//! Reading a completion back ([`crate::completion`]): the encoder's grammar and token table,
//! built on first use and shared by every parser it makes.
//!
//! A native format declares its grammar ([`ChatFormat::grammar`]); the encoder adds its stop
//! tokens (those that mean "waiting for a tool" flagged) and its control tokens.
//!
//! On the Jinja path the grammar is derived ([`derive`]): the checkpoint's own template
//! renders probe turns (content; reasoning under each key templates read; one and two tool
//! calls), and a candidate family ([`completion::harmony`], [`completion::deepseek_v3`],
//! [`completion::hermes`], or none) serves only if it reads every probe turn the template
//! writes whole back into the probe message, its markers being the ones the template wrote.
//! No candidate, or two that differ: the encoder refuses, saying why.
//!
//! The mistral-common route reads completions as mistral-common does
//! ([`crate::mistral_common::MistralCommon::grammar`]), decoding ids as its `decode` does.

mod derive;

use std::sync::Arc;

use super::{Backend, Encoder, Renderer, TemplateRoute};
use crate::completion::{self, Grammar, ParsedCompletion, StopToken, StreamParser};
use crate::error::{Error, Result, TemplateError};
use crate::render::native::ChatFormat;
use crate::text::TokenText;

/// What every parser of one encoder shares: the grammar and the token table, or why not.
#[derive(Debug, Clone)]
pub(crate) struct CompletionTables {
    grammar: std::result::Result<Arc<Grammar>, String>,
    table: std::result::Result<Arc<TokenText>, String>,
}

impl Encoder {
    fn tables(&self) -> &CompletionTables {
        self.completion.get_or_init(|| {
            let table = match &self.backend {
                Backend::Template(route) => route
                    .text
                    .tokenizer()
                    .map_err(|e| e.to_string())
                    .and_then(|t| TokenText::new(t).map_err(|e| e.to_string()))
                    .map(Arc::new)
                    .map_err(|e| format!("cannot decode completions: {e}")),
                Backend::MistralCommon(mc) => Ok(Arc::new(mc.token_text())),
            };
            CompletionTables {
                grammar: self.build_grammar(table.as_ref().ok()),
                table,
            }
        })
    }

    /// The grammar and token table, built once.
    fn completion_tables(&self) -> Result<(Arc<Grammar>, Arc<TokenText>)> {
        let tables = self.tables();
        let fail = |e: &String| Error::Template(TemplateError::whole(e.clone()));
        Ok((
            tables.grammar.clone().map_err(|e| fail(&e))?,
            tables.table.clone().map_err(|e| fail(&e))?,
        ))
    }

    fn build_grammar(
        &self,
        table: Option<&Arc<TokenText>>,
    ) -> std::result::Result<Arc<Grammar>, String> {
        let route = match &self.backend {
            Backend::Template(route) => route,
            Backend::MistralCommon(mc) => return Ok(Arc::new(mc.grammar())),
        };
        let tokenizer = route.text.lazy_tokenizer();
        let token = |text: &str| {
            route
                .control_tokens
                .tokens()
                .iter()
                .find(|(t, _)| t == text)
                .map(|&(_, id)| id)
                .or_else(|| tokenizer.token_to_id(text))
        };
        match &route.renderer {
            Renderer::Native(f) => {
                let format: &dyn ChatFormat = f.as_ref();
                Ok(Arc::new(
                    self.complete_grammar(route, format.grammar(&token)),
                ))
            }
            Renderer::Jinja => {
                let table = table.ok_or("the vocabulary cannot be decoded")?;
                derive::derive(self, &token, table).map(Arc::new)
            }
            Renderer::External { .. } => Err(format!(
                "reading completions back needs the template's grammar, and this checkpoint's \
                 template cannot be compiled (the caller renders it): {}",
                route.template_source
            )),
        }
    }

    /// A format's grammar with the encoder's stop tokens and control tokens.
    fn complete_grammar(&self, route: &TemplateRoute, mut grammar: Grammar) -> Grammar {
        grammar.stops = self
            .stop_token_ids
            .iter()
            .map(|&id| StopToken {
                id,
                awaits_tool: self.stop_token_ids_for_tool_calls.contains(&id),
            })
            .collect();
        let mut control: std::collections::HashSet<u32> = route
            .control_tokens
            .tokens()
            .iter()
            .map(|&(_, id)| id)
            .collect();
        // Every special added token is a control token too, whether or not the template writes it.
        if let crate::origin::Origin::Checkpoint(state) = &self.origin {
            control.extend(state.special_token_ids());
        }
        control.extend(grammar.calls.markers());
        if let Some((open, close)) = grammar.reasoning {
            control.insert(open);
            control.insert(close);
        }
        grammar.set_control(control);
        grammar
    }

    /// How this encoder's format writes an assistant turn.
    pub fn completion_grammar(&self) -> Result<Arc<Grammar>> {
        Ok(self.completion_tables()?.0)
    }

    /// A parser of one completion, fed ids as they are generated.
    pub fn stream_parser(&self) -> Result<StreamParser> {
        self.stream_parser_for(None)
    }

    /// [`Encoder::stream_parser`], checking call names against `tools` (the names offered).
    pub fn stream_parser_for(&self, tools: Option<Arc<Vec<String>>>) -> Result<StreamParser> {
        let (grammar, table) = self.completion_tables()?;
        Ok(StreamParser::new(grammar, table).with_tools(tools))
    }

    /// Read `ids`, the ids generated after the generation prompt, back into an assistant
    /// message. An id outside the vocabulary is an error naming its index.
    pub fn parse_completion(&self, ids: &[u32]) -> Result<ParsedCompletion> {
        self.parse_completion_for(ids, None)
    }

    /// [`Encoder::parse_completion`], checking call names against `tools` (the names
    /// offered: a call to another is a [`completion::ProblemKind::UnknownTool`]).
    pub fn parse_completion_for(
        &self,
        ids: &[u32],
        tools: Option<Arc<Vec<String>>>,
    ) -> Result<ParsedCompletion> {
        let (grammar, table) = self.completion_tables()?;
        completion::parse(grammar, table, ids, tools).map_err(|e| {
            Error::Completion(format!(
                "completion id {} at index {} is not in the vocabulary",
                e.id, e.index
            ))
        })
    }

    /// The text of `ids` as the tokenizer decodes them (special tokens included).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let table = self
            .tables()
            .table
            .clone()
            .map_err(|e| Error::Template(TemplateError::whole(e)))?;
        table.decode(ids).map_err(|i| {
            Error::Completion(format!(
                "id {} at index {i} is not in the vocabulary",
                ids[i]
            ))
        })
    }
}
