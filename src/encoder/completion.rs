//! Reading a completion back ([`crate::completion`]): the encoder's grammar and token table,
//! built on first use and shared by every parser it makes.
//!
//! A native format declares its grammar ([`ChatFormat::grammar`]); the encoder adds its stop
//! tokens (those that mean "waiting for a tool" flagged) and its control tokens. The Jinja path
//! and the mistral-common route have no grammar yet: they refuse, saying so.

use std::sync::Arc;

use super::{Encoder, Renderer};
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
            let table = match self.template() {
                Some(route) => TokenText::new(route.text.tokenizer())
                    .map(Arc::new)
                    .map_err(|e| format!("cannot decode completions: {e}")),
                None => {
                    Err("decoding is not available on the mistral-common route yet".to_string())
                }
            };
            CompletionTables {
                grammar: self.build_grammar(),
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

    fn build_grammar(&self) -> std::result::Result<Arc<Grammar>, String> {
        let Some(route) = self.template() else {
            return Err(
                "reading completions back is not available on the mistral-common route yet; \
                        load the checkpoint with reference=\"transformers\""
                    .to_string(),
            );
        };
        let format: &dyn ChatFormat = match &route.renderer {
            Renderer::Native(f) => f.as_ref(),
            Renderer::Jinja | Renderer::External { .. } => {
                return Err(format!(
                    "reading completions back needs the format's grammar; no native format serves this \
                     checkpoint's template (it is rendered on the Jinja path), and chatids does not derive \
                     the grammar of a template yet: {}",
                    route.template_source
                ))
            }
        };
        let tokenizer = route.text.tokenizer();
        let mut grammar = format.grammar(&|text| {
            route
                .control_tokens
                .tokens()
                .iter()
                .find(|(t, _)| t == text)
                .map(|&(_, id)| id)
                .or_else(|| tokenizer.token_to_id(text))
        });
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
        for (id, token) in tokenizer.get_added_tokens_decoder() {
            if token.special {
                control.insert(id);
            }
        }
        match grammar.calls {
            completion::CallSyntax::Tagged { open, close } => {
                control.insert(open);
                control.insert(close);
            }
            completion::CallSyntax::List { marker } => {
                control.insert(marker);
            }
            completion::CallSyntax::Llama3 { python_tag } => {
                control.insert(python_tag);
            }
            completion::CallSyntax::None => {}
        }
        if let Some((open, close)) = grammar.reasoning {
            control.insert(open);
            control.insert(close);
        }
        grammar.set_control(control);
        Ok(Arc::new(grammar))
    }

    /// How this encoder's format writes an assistant turn.
    pub fn completion_grammar(&self) -> Result<Arc<Grammar>> {
        Ok(self.completion_tables()?.0)
    }

    /// A parser of one completion, fed ids as they are generated.
    pub fn stream_parser(&self) -> Result<StreamParser> {
        let (grammar, table) = self.completion_tables()?;
        Ok(StreamParser::new(grammar, table))
    }

    /// Read `ids`, the ids generated after the generation prompt, back into an assistant
    /// message. An id outside the vocabulary is an error naming its index.
    pub fn parse_completion(&self, ids: &[u32]) -> Result<ParsedCompletion> {
        let (grammar, table) = self.completion_tables()?;
        completion::parse(grammar, table, ids).map_err(|e| {
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
