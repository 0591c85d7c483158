//! Hugging Face chat templates rendered exactly as transformers renders them.
//!
//! transformers runs templates with jinja2's `ImmutableSandboxedEnvironment(trim_blocks=True,
//! lstrip_blocks=True)`, the `{% generation %}` and loop-control extensions, the globals
//! `raise_exception`, `strftime_now`, `dict` and `namespace` (jinja2's `range`, `joiner`, `cycler`,
//! `lipsum` and `self` too: [`globals`]), and its own `tojson`. This module
//! reproduces that on the MiniJinja engine:
//!
//! * [`lexer`] and [`parser`] are jinja2's (same whitespace control, precedence, literals);
//! * [`emit`] translates the jinja2 syntax tree into fully parenthesized MiniJinja, routing
//!   every operation whose semantics differ from Python's through a helper ([`ops`]) and
//!   keeping jinja2's scoping ([`scope`]);
//! * [`pyvalue`], [`methods`], [`filters`], [`predicates`], [`format`], [`strftime`] and
//!   [`unicode`] implement Python's and jinja2's runtime behaviour: `str()`/`repr()` output,
//!   `json.dumps`, string methods, filters and tests.
//!
//! Whatever cannot be reproduced exactly (a bound method's memory address, `%`-formatting with
//! widths, `groupby`, ...) is an error, never a different string.
//!
//! A template whose only use of `add_generation_prompt` is a last top-level
//! `{% if add_generation_prompt %}` block (no `else`), or that has none, renders both prompts at once
//! ([`ChatTemplate::render_data_split`]): without the generation prompt, its output is the
//! output with it, cut where that block starts. A session renders once per step instead of twice.
//!
//! A split template whose message loop is proven to render each message from that message,
//! its index and the messages before it ([`resume`]) also renders *resumed*
//! ([`ChatTemplate::render_data_resume`]): only the iterations a session has not rendered,
//! with the kept text of the others spliced in.

mod args;
mod calls;
mod data;
mod emit;
mod filters;
mod format;
mod globals;
mod lexer;
mod methods;
mod ops;
mod parser;
mod predicates;
pub(crate) mod pyvalue;
mod resume;
mod scope;
mod strftime;
mod unicode;
pub mod variables;
#[rustfmt::skip]
mod unicode_tables;

use std::fmt;
use std::sync::Arc;

use minijinja::value::{Object, ObjectRepr, Value};
use minijinja::{Environment, Error, ErrorKind, State};

pub use self::data::{Data, JsonMemo};
pub use self::resume::{LoopState, Resumed};
pub use self::strftime::strftime;

use self::args::{bind, split_args};
use self::pyvalue::{as_int, err, kind, new_dict, py_iter, py_str, Dict, Kind, PyRange};

/// A civil date-time the template's `strftime_now` reads (the core never reads the clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// A fixed date-time for renders that must not depend on the clock (probes, tests): any date
/// that is not a template's hard-coded default.
pub const PROBE_NOW: DateTime = DateTime {
    year: 2025,
    month: 3,
    day: 14,
    hour: 9,
    minute: 26,
    second: 53,
};

/// Why rendering failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// The template called `raise_exception(msg)`.
    Raised(String),
    /// Any other error (jinja2 would raise too), with the message and the template line.
    Failed(String),
    /// The template called `strftime_now` but no date-time was given.
    NeedsClock,
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::Raised(m) => write!(f, "the chat template raised an exception: {m}"),
            RenderError::Failed(m) => write!(f, "the chat template failed: {m}"),
            RenderError::NeedsClock => write!(
                f,
                "the chat template reads the clock (strftime_now) but no date-time was given"
            ),
        }
    }
}

impl std::error::Error for RenderError {}

/// A compiled chat template (`Send + Sync`: render it from many threads at once).
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    reads_clock: bool,
    /// Whether the environment also holds the template with [`GENERATION_MARK`] before its
    /// generation-prompt block ([`generation_block`]).
    splits: bool,
    /// Where the environment also holds the resumable template ([`resume`]): its proof.
    resumes: Option<resume::Proof>,
    /// The names the template reads from its context ([`variables::undeclared`]).
    variables: std::collections::BTreeSet<String>,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("reads_clock", &self.reads_clock)
            .finish_non_exhaustive()
    }
}

const TEMPLATE_NAME: &str = "chat_template";
/// The template with [`GENERATION_MARK`] before its generation-prompt block.
const SPLIT_TEMPLATE_NAME: &str = "chat_template_split";
/// The split template with its message loop resumable ([`resume::instrument`]).
const RESUME_TEMPLATE_NAME: &str = "chat_template_resume";
/// Written where the generation-prompt block starts (a private-use character, next to the
/// sanitizer's markers U+F0000 and U+F0001); a render holding it more than once (caller text
/// held it) is not split.
const GENERATION_MARK: char = '\u{F0002}';
/// The context key holding the render's date-time (not a valid template identifier).
const NOW_KEY: &str = "\u{1}chatids_now";

/// The error payloads that carry `raise_exception` and a missing clock through MiniJinja.
#[derive(Debug)]
enum Signal {
    Raised(String),
    NeedsClock,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Signal::Raised(m) => f.write_str(m),
            Signal::NeedsClock => f.write_str("strftime_now needs a date-time"),
        }
    }
}

impl std::error::Error for Signal {}

impl ChatTemplate {
    /// Compile; `Err(message)` when the template has a syntax error or uses something jinja2
    /// has and chatids does not reproduce (an unknown tag, filter or test is an error in jinja2
    /// too).
    pub fn compile(source: &str) -> Result<ChatTemplate, String> {
        let tokens = lexer::tokenize(source)
            .map_err(|e| format!("syntax error: {} (line {})", e.message, e.line))?;
        let markup = uses_markup(&tokens);
        let generation_reads = tokens
            .iter()
            .filter(|t| matches!(&t.tok, lexer::Tok::Name(n) if n == GENERATION_VARIABLE))
            .count();
        let stmts = parser::parse(tokens)
            .map_err(|e| format!("syntax error: {} (line {})", e.message, e.line))?;
        let emitted = emit::emit(&stmts, markup)?;
        let variables = variables::undeclared(&stmts);
        let mut env = new_environment();
        add_template(&mut env, TEMPLATE_NAME, emitted.source)?;
        let mut resumes = None;
        let split = match generation_block(&stmts, generation_reads) {
            Some(at) => {
                let mut marked = stmts.clone();
                marked.insert(at, parser::Stmt::Data(GENERATION_MARK.to_string()));
                // The message loop comes before the generation-prompt block.
                resumes = resume::analyse(&stmts)
                    .filter(|p| p.at < at)
                    .filter(|proof| {
                        resume::instrument(&marked, proof)
                            .ok_or_else(String::new)
                            .and_then(|s| emit::emit(&s, markup))
                            .and_then(|e| add_template(&mut env, RESUME_TEMPLATE_NAME, e.source))
                            .is_ok()
                    });
                // The same statements with one more text: it compiles as the template did.
                emit::emit(&marked, markup)
                    .and_then(|e| add_template(&mut env, SPLIT_TEMPLATE_NAME, e.source))
                    .is_ok()
            }
            None => false,
        };
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            reads_clock: emitted.reads_clock,
            splits: split,
            resumes: resumes.filter(|_| split),
            variables,
        })
    }

    /// Render with `context` (top-level variables: messages, add_generation_prompt, tools,
    /// documents, bos_token, ... as JSON values, key order preserved).
    pub fn render(
        &self,
        context: &serde_json::Map<String, serde_json::Value>,
        now: Option<DateTime>,
    ) -> Result<String, RenderError> {
        if context.values().any(|v| json_depth(v) > pyvalue::MAX_DEPTH) {
            return Err(RenderError::Failed(
                "the context is nested too deeply".into(),
            ));
        }
        let mut root = Dict::with_capacity(context.len() + 1);
        for (k, v) in context {
            root.insert(Value::from(k.as_str()), pyvalue::from_json(v));
        }
        self.render_root(root, now)
    }

    /// [`ChatTemplate::render`] from values converted beforehand ([`Data`], kept between
    /// renders), with a [`JsonMemo`] that keeps what `tojson` writes between renders.
    pub fn render_data(
        &self,
        context: Vec<(&str, Data)>,
        now: Option<DateTime>,
        memo: Option<&mut JsonMemo>,
    ) -> Result<String, RenderError> {
        let root = root_of(context)?;
        data::with_memo(memo, || self.render_root(root, now))
    }

    /// Whether [`ChatTemplate::render_data_split`] can split this template's renders.
    pub fn splits(&self) -> bool {
        self.splits
    }

    /// [`ChatTemplate::render_data`] of a context whose `add_generation_prompt` is true, and
    /// where the output without the generation prompt ends: `Some((text, at))`, where
    /// `text[..at]` is what the render with `add_generation_prompt` false gives. `None` when
    /// the template does not split ([`ChatTemplate::splits`]) or this render cannot be split
    /// (its text holds [`GENERATION_MARK`] itself).
    ///
    /// Exact because the template reads `add_generation_prompt` in one place, the test of its
    /// last top-level statement, an `if` without `else` ([`generation_block`]): up to that
    /// statement both renders run the same, it writes nothing when the test is false, and
    /// nothing follows it. (A template that never reads it renders the same text both ways.)
    pub fn render_data_split(
        &self,
        context: Vec<(&str, Data)>,
        now: Option<DateTime>,
        memo: Option<&mut JsonMemo>,
    ) -> Result<Option<(String, usize)>, RenderError> {
        if !self.splits {
            return Ok(None);
        }
        let root = root_of(context)?;
        let text = data::with_memo(memo, || self.render_root_of(SPLIT_TEMPLATE_NAME, root, now))?;
        let mut marks = text.match_indices(GENERATION_MARK);
        let (Some((at, mark)), None) = (marks.next(), marks.next()) else {
            return Ok(None);
        };
        let mut whole = String::with_capacity(text.len() - mark.len());
        whole.push_str(&text[..at]);
        whole.push_str(&text[at + mark.len()..]);
        Ok(Some((whole, at)))
    }

    /// Whether [`ChatTemplate::render_data_resume`] can resume this template's renders.
    pub fn resumes(&self) -> bool {
        self.resumes.is_some()
    }

    /// [`ChatTemplate::render_data_split`], rendering only the message-loop iterations that
    /// `kept` (the state of an earlier render of the same conversation, shorter or as long)
    /// does not hold, and taking the others' text from it ([`resume`]). `kept` must come from a
    /// render of this template whose messages, in the same order, are the first ones of this
    /// context's (the same values), with the same other variables and date-time: the caller
    /// checks that. `None` when the template does not resume or the render holds the marks
    /// itself (caller text held one).
    pub fn render_data_resume(
        &self,
        context: Vec<(&str, Data)>,
        now: Option<DateTime>,
        memo: Option<&mut JsonMemo>,
        kept: Option<LoopState>,
    ) -> Result<Option<Resumed>, RenderError> {
        let Some(proof) = &self.resumes else {
            return Ok(None);
        };
        let messages = context
            .iter()
            .find(|(k, _)| *k == "messages")
            .and_then(|(_, d)| d.value.len())
            .unwrap_or(0);
        let root = root_of(context)?;
        data::with_memo(memo, || {
            let mut skip = resume::skip_of(kept.as_ref());
            let mut kept = kept;
            loop {
                let mut root = root.clone();
                root.insert(Value::from(resume::SKIP_NAME), Value::from(skip));
                resume::REL_FLOOR.with(|f| f.set(usize::MAX));
                let raw = self.render_root_of(RESUME_TEMPLATE_NAME, root, now)?;
                let floor = resume::REL_FLOOR.with(|f| f.get());
                let kept = kept.take().filter(|_| skip > 0);
                match resume::assemble(
                    &raw,
                    GENERATION_MARK,
                    messages,
                    skip,
                    kept,
                    proof.lookahead,
                    floor,
                ) {
                    Some(r) => return Ok(Some(r)),
                    // The loop's items moved against the kept ones: render them all.
                    None if skip > 0 => skip = 0,
                    None => return Ok(None),
                }
            }
        })
    }

    fn render_root(&self, root: Dict, now: Option<DateTime>) -> Result<String, RenderError> {
        self.render_root_of(TEMPLATE_NAME, root, now)
    }

    fn render_root_of(
        &self,
        name: &str,
        mut root: Dict,
        now: Option<DateTime>,
    ) -> Result<String, RenderError> {
        if let Some(now) = now {
            root.insert(Value::from(NOW_KEY), Value::from_object(Clock(now)));
        }
        let template = self
            .env
            .get_template(name)
            .map_err(|e| RenderError::Failed(describe(&e)))?;
        template
            .render(new_dict(root))
            .map_err(|e| to_render_error(&e))
    }

    /// Whether the template calls `strftime_now` (so the caller knows it needs a date).
    pub fn reads_clock(&self) -> bool {
        self.reads_clock
    }

    /// The names the template reads from its context, as jinja2's
    /// `meta.find_undeclared_variables` gives them (without the environment's globals):
    /// `messages`, `add_generation_prompt`, the special tokens, and its template arguments.
    pub fn variables(&self) -> &std::collections::BTreeSet<String> {
        &self.variables
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The top-level variables of a render from values converted beforehand.
fn root_of(context: Vec<(&str, Data)>) -> Result<Dict, RenderError> {
    if context.iter().any(|(_, d)| d.depth > pyvalue::MAX_DEPTH) {
        return Err(RenderError::Failed(
            "the context is nested too deeply".into(),
        ));
    }
    let mut root = Dict::with_capacity(context.len() + 1);
    for (k, d) in context {
        root.insert(Value::from(k), d.value);
    }
    Ok(root)
}

/// Add the emitted `source` to `env` as template `name`.
fn add_template(
    env: &mut Environment<'static>,
    name: &'static str,
    source: String,
) -> Result<(), String> {
    let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        env.add_template_owned(name, source)
    }))
    .map_err(|_| "internal error in the template engine".to_string())?;
    added.map_err(|e| format!("unsupported template: {}", describe(&e)))
}

/// The variable that asks for the generation prompt.
const GENERATION_VARIABLE: &str = "add_generation_prompt";

/// Where the generation-prompt block starts, when the template's output without the
/// generation prompt is its output with it cut there: the last top-level statement that
/// writes anything is `{% if add_generation_prompt %}...{% endif %}` (one branch, no `else`),
/// and that test is the template's only mention of the name; or the end, when the template
/// never names it (Llama 2, Mistral: no generation prompt) (`reads`: how many times its
/// tokens name it; a mention anywhere else, even an assignment, attribute or parameter of the
/// same name, rules the split out).
fn generation_block(stmts: &[parser::Stmt], reads: usize) -> Option<usize> {
    use parser::{Expr, Stmt};
    match reads {
        // Never read: both outputs are the same, cut at the end.
        0 => return Some(stmts.len()),
        1 => {}
        _ => return None,
    }
    let at = stmts
        .iter()
        .rposition(|s| !matches!(s, Stmt::Data(text) if text.is_empty()))?;
    match &stmts[at] {
        Stmt::If { branches, else_ } if else_.is_empty() && branches.len() == 1 => {
            matches!(&branches[0].0, Expr::Name(n) if n == GENERATION_VARIABLE).then_some(at)
        }
        _ => None,
    }
}

/// The nesting depth of a JSON value (iteratively, so any depth is safe).
fn json_depth(v: &serde_json::Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            serde_json::Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            serde_json::Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    max
}

/// Whether the template can make `Markup` (`|safe`, `|e`, ...), whose `+` escapes.
fn uses_markup(tokens: &[lexer::Token]) -> bool {
    let markup = |n: &str| matches!(n, "safe" | "e" | "escape" | "forceescape");
    tokens.windows(2).any(|w| match (&w[0].tok, &w[1].tok) {
        (lexer::Tok::Op("|"), lexer::Tok::Name(n)) => markup(n),
        // `map('e')` and friends
        (_, lexer::Tok::Str(n)) => markup(n),
        _ => false,
    })
}

fn describe(e: &Error) -> String {
    let mut msg = match (e.kind(), e.detail()) {
        (ErrorKind::UndefinedError, Some(d)) => format!("undefined value: {d}"),
        (_, Some(d)) => d.to_string(),
        (kind, None) => kind.to_string(),
    };
    if let Some(line) = e.line() {
        msg.push_str(&format!(" (line {line})"));
    }
    msg
}

fn to_render_error(e: &Error) -> RenderError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(signal) = s.downcast_ref::<Signal>() {
            return match signal {
                Signal::Raised(m) => RenderError::Raised(m.clone()),
                Signal::NeedsClock => RenderError::NeedsClock,
            };
        }
        source = s.source();
    }
    RenderError::Failed(describe(e))
}

/// The render's date-time, stored in the context under [`NOW_KEY`].
#[derive(Debug)]
struct Clock(DateTime);

impl Object for Clock {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
}

fn new_environment() -> Environment<'static> {
    let mut env = Environment::empty();
    env.set_keep_trailing_newline(true);
    env.set_formatter(|out, _state, value| {
        if let Some(s) = value.as_str() {
            return out.write_str(s).map_err(|_| err("write failed"));
        }
        let s = py_str(value)?;
        out.write_str(&s).map_err(|_| err("write failed"))
    });
    env.set_unknown_method_callback(methods::unknown_method);
    filters::register(&mut env);
    predicates::register(&mut env);
    ops::register(&mut env);
    env.add_function(
        "raise_exception",
        |args: &[Value]| -> Result<Value, Error> {
            let b = bind("raise_exception", args, &["message"], true)?;
            let msg = match &b[0] {
                Some(m) => py_str(m)?,
                None => {
                    return Err(err(
                        "raise_exception() missing 1 required positional argument: 'message'",
                    ))
                }
            };
            Err(Error::new(ErrorKind::InvalidOperation, msg.clone())
                .with_source(Signal::Raised(msg)))
        },
    );
    env.add_function(
        "strftime_now",
        |state: &State, args: &[Value]| -> Result<Value, Error> {
            let b = bind("strftime_now", args, &["format"], true)?;
            let fmt = match &b[0] {
                Some(f) if kind(f) == Kind::Str => f.as_str().unwrap_or_default().to_string(),
                Some(_) => return Err(err("strftime() argument 1 must be str")),
                None => {
                    return Err(err(
                        "strftime_now() missing 1 required positional argument: 'format'",
                    ))
                }
            };
            let now = state
                .lookup(NOW_KEY)
                .and_then(|v| v.downcast_object_ref::<Clock>().map(|c| c.0))
                .ok_or_else(|| {
                    Error::new(ErrorKind::InvalidOperation, "no clock")
                        .with_source(Signal::NeedsClock)
                })?;
            strftime::strftime(&fmt, &now).map(Value::from).map_err(err)
        },
    );
    env.add_function("range", range);
    // The resumable template's record of relative reads outside the list (`resume`).
    env.add_function(resume::REL_NAME, |args: &[Value]| -> Result<Value, Error> {
        let [index, iteration, length] = args else {
            return Err(err("__cj_rel takes 3 arguments"));
        };
        let inside = match (as_int(index), length.as_usize()) {
            (Some(i), Some(n)) => i >= 0 && (i as u128) < n as u128,
            _ => false,
        };
        if !inside {
            let at = iteration.as_usize().unwrap_or(0);
            resume::REL_FLOOR.with(|f| f.set(f.get().min(at)));
        }
        Ok(index.clone())
    });
    env.add_global("dict", Value::from_object(DictFn));
    env.add_function("namespace", namespace);
    env.add_function("__cj_call", calls::call);
    globals::register(&mut env);
    env
}

/// jinja2's sandboxed `range` (at most 100000 items).
fn range(args: &[Value]) -> Result<Value, Error> {
    let (pos, kw) = split_args(args)?;
    if !kw.is_empty() {
        return Err(err("range() takes no keyword arguments"));
    }
    let ints: Vec<i128> = pos
        .iter()
        .map(|v| {
            as_int(v).ok_or_else(|| {
                err(format!(
                    "'{}' object cannot be interpreted as an integer",
                    pyvalue::type_name(v)
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let (start, stop, step) = match ints.as_slice() {
        [stop] => (0, *stop, 1),
        [start, stop] => (*start, *stop, 1),
        [start, stop, step] => (*start, *stop, *step),
        _ => {
            return Err(err(format!(
                "range expected at most 3 arguments, got {}",
                ints.len()
            )))
        }
    };
    if step == 0 {
        return Err(err("range() arg 3 must not be zero"));
    }
    let fits = |x: i128| i64::try_from(x).is_ok();
    if !(fits(start) && fits(stop) && fits(step)) {
        return Err(err("range too big"));
    }
    let r = PyRange {
        start: start as i64,
        stop: stop as i64,
        step: step as i64,
    };
    if r.len() > 100_000 {
        return Err(err(
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).",
        ));
    }
    Ok(Value::from_object(r))
}

/// `dict(*args, **kwargs)` as Python builds it.
fn build_dict(args: &[Value]) -> Result<Dict, Error> {
    let (pos, kw) = split_args(args)?;
    let mut d = Dict::new();
    match pos.as_slice() {
        [] => {}
        [src] => {
            match kind(src) {
                Kind::Dict => d = Dict::clone(src.downcast_object_ref::<Dict>().expect("dict")),
                _ => {
                    for (i, pair) in py_iter(src)?.iter().enumerate() {
                        let kv = py_iter(pair).map_err(|_| {
                        err(format!("cannot convert dictionary update sequence element #{i} to a sequence"))
                    })?;
                        let [k, v] = kv.as_slice() else {
                            return Err(err(format!(
                            "dictionary update sequence element #{i} has length {}; 2 is required",
                            kv.len()
                        )));
                        };
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        _ => {
            return Err(err(format!(
                "dict expected at most 1 argument, got {}",
                pos.len()
            )))
        }
    }
    for (k, v) in kw {
        d.insert(Value::from(k), v);
    }
    Ok(d)
}

/// transformers' `TemplateDict`: callable, with `fromkeys`.
#[derive(Debug)]
struct DictFn;

impl Object for DictFn {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn call(self: &Arc<Self>, _state: &State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        build_dict(args).map(new_dict)
    }
    fn call_method(
        self: &Arc<Self>,
        _state: &State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        if method != "fromkeys" {
            return Err(Error::from(ErrorKind::UnknownMethod));
        }
        let b = bind("fromkeys", args, &["iterable", "value"], false)?;
        let keys = py_iter(
            b[0].as_ref()
                .ok_or_else(|| err("fromkeys expected at least 1 argument"))?,
        )?;
        let v = b[1].clone().unwrap_or(Value::from(()));
        Ok(new_dict(keys.into_iter().map(|k| (k, v.clone())).collect()))
    }
}

/// transformers' `TemplateNamespace`: jinja2's namespace refusing underscore-prefixed names.
fn namespace(args: &[Value]) -> Result<Value, Error> {
    let d = build_dict(args)?;
    for k in d.keys() {
        if let Some(name) = k.as_str() {
            if name.starts_with('_') {
                return Err(err(format!(
                    "SecurityError: Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{name}'."
                )));
            }
        }
    }
    minijinja::functions::namespace(Some(new_dict(d)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, ctx: serde_json::Value) -> Result<String, RenderError> {
        let t = ChatTemplate::compile(src).map_err(RenderError::Failed)?;
        t.render(ctx.as_object().unwrap(), None)
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ChatTemplate>();
    }

    #[test]
    fn renders_a_chatml_template() {
        let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let ctx = serde_json::json!({"messages": [{"role": "user", "content": " hi "}], "add_generation_prompt": true});
        assert_eq!(
            render(src, ctx).unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn pathological_nesting_is_an_error_not_a_crash() {
        let cases = [
            format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000)),
            format!("{{{{ 1{} }}}}", " + 1".repeat(100_000)),
            format!("{{{{ {}1 }}}}", "not ".repeat(100_000)),
            format!("{{{{ x{} }}}}", ".a".repeat(100_000)),
            format!("{{{{ x{} }}}}", "|trim".repeat(100_000)),
            "{% if true %}".repeat(5000),
            format!("{{{{ {}1{} }}}}", "[".repeat(5000), "]".repeat(5000)),
        ];
        let h = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                cases
                    .iter()
                    .map(|c| ChatTemplate::compile(c).is_err())
                    .collect::<Vec<_>>()
            })
            .unwrap();
        assert!(h.join().unwrap().iter().all(|&failed| failed));
        for src in [
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            "{{ ['x' * 1000000] * 300 }}",
            "{{ ('\t' * 1000000).expandtabs(1000) }}",
            "{{ ('\n' * 1000000) | indent(1000) }}",
            "{{ ('a' * 5000000).replace('', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') }}",
            "{{ (['x' * 1000000] * 300) | join }}",
        ] {
            let t = ChatTemplate::compile(src).unwrap();
            assert!(matches!(t.render(&serde_json::Map::new(), None), Err(RenderError::Failed(_))), "{src}");
        }
        let deep = serde_json::json!({"x": (0..1000).fold(serde_json::json!(1), |acc, _| serde_json::json!([acc]))});
        let t = ChatTemplate::compile("{{ x }}").unwrap();
        assert!(matches!(
            t.render(deep.as_object().unwrap(), None),
            Err(RenderError::Failed(_))
        ));
    }

    #[test]
    fn python_formatting_and_errors() {
        let ctx = serde_json::json!({"x": {"a": [1, null, 1.0, "it's"]}});
        assert_eq!(
            render("{{ x }}", ctx.clone()).unwrap(),
            "{'a': [1, None, 1.0, \"it's\"]}"
        );
        assert_eq!(
            render("{{ raise_exception('no') }}", ctx.clone()),
            Err(RenderError::Raised("no".into()))
        );
        assert_eq!(
            render("{{ strftime_now('%Y') }}", ctx.clone()),
            Err(RenderError::NeedsClock)
        );
        assert!(matches!(
            render("{{ x.items }}", ctx),
            Err(RenderError::Failed(_))
        ));
    }

    /// The templates of the repository's corpus, and the shared checkpoints' when
    /// `CHATIDS_MODELS_DIR` is set: `(name, source)`.
    fn template_sources() -> Vec<(String, String)> {
        let mut sources: Vec<(String, String)> = Vec::new();
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/template_corpus/templates");
        let mut dirs = vec![corpus];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "jinja") {
                    sources.push((
                        path.display().to_string(),
                        std::fs::read_to_string(&path).unwrap(),
                    ));
                }
            }
        }
        if let Ok(base) = std::env::var("CHATIDS_MODELS_DIR") {
            for entry in std::fs::read_dir(base).unwrap().flatten() {
                let (dir, name) = (
                    entry.path(),
                    entry.file_name().to_string_lossy().to_string(),
                );
                if let Ok(text) = std::fs::read_to_string(dir.join("chat_template.jinja")) {
                    sources.push((name.clone(), text));
                }
                let config =
                    std::fs::read_to_string(dir.join("tokenizer_config.json")).unwrap_or_default();
                if let Ok(serde_json::Value::Object(c)) = serde_json::from_str(&config) {
                    if let Some(serde_json::Value::String(t)) = c.get("chat_template") {
                        sources.push((name, t.clone()));
                    }
                }
            }
        }
        sources
    }

    /// Every template of the repository's corpus (and the shared checkpoints' when
    /// `CHATIDS_MODELS_DIR` is set) that splits renders, cut at the mark, exactly what it
    /// renders without the generation prompt, and, mark removed, what it renders with it.
    #[test]
    fn split_renders_are_the_two_renders() {
        let sources = template_sources();
        let conversations = [
            serde_json::json!([{"role": "user", "content": "Hi"}]),
            serde_json::json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi there"},
                {"role": "user", "content": "Why?"}
            ]),
        ];
        let (mut split, mut compared, mut whole) = (0, 0, 0);
        for (name, source) in &sources {
            let Ok(template) = ChatTemplate::compile(source) else {
                continue;
            };
            if !template.splits() {
                whole += 1;
                if std::env::var("CHATIDS_SHOW_SPLITS").is_ok() {
                    eprintln!("whole: {name}");
                }
                continue;
            }
            split += 1;
            for messages in &conversations {
                let context = |agp: bool| -> Vec<(&str, Data)> {
                    let mut none = |_: &str| None;
                    vec![
                        ("bos_token", Data::string("<s>", &mut none)),
                        ("eos_token", Data::string("</s>", &mut none)),
                        ("messages", Data::from_json(messages, &mut none)),
                        ("add_generation_prompt", Data::bool(agp)),
                    ]
                };
                let without = template.render_data(context(false), Some(PROBE_NOW), None);
                let with = template.render_data(context(true), Some(PROBE_NOW), None);
                match template.render_data_split(context(true), Some(PROBE_NOW), None) {
                    Ok(Some((text, at))) => {
                        compared += 1;
                        assert_eq!(
                            with.as_deref().ok(),
                            Some(text.as_str()),
                            "{name}: with the prompt"
                        );
                        assert_eq!(
                            without.as_deref().ok(),
                            Some(&text[..at]),
                            "{name}: without it"
                        );
                    }
                    Ok(None) => {
                        panic!("{name}: a render without the mark in caller text did not split")
                    }
                    Err(_) => assert!(with.is_err(), "{name}: only the split render failed"),
                }
            }
        }
        eprintln!("{split} templates split ({compared} renders compared), {whole} do not");
        assert!(
            split > 100 && compared > 100 && whole > 10,
            "{split} split, {compared} compared, {whole} not"
        );
        // A template that names the variable anywhere else, or has an else, does not split.
        for source in [
            "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}A{% else %}B{% endif %}",
            "{{ add_generation_prompt }}{% if add_generation_prompt %}A{% endif %}",
            "{% if add_generation_prompt %}A{% endif %}{{ messages | length }}",
            "{% set add_generation_prompt = true %}{% if add_generation_prompt %}A{% endif %}",
        ] {
            assert!(!ChatTemplate::compile(source).unwrap().splits(), "{source}");
        }
        let t = ChatTemplate::compile(
            "{{ messages[0].content }}{% if add_generation_prompt %}A{% endif %}",
        )
        .unwrap();
        assert!(t.splits());
        // Caller text holding the mark: not split.
        let mut none = |_: &str| None;
        let messages = serde_json::json!([{"role": "user", "content": "x\u{F0002}y"}]);
        let context = vec![
            ("messages", Data::from_json(&messages, &mut none)),
            ("add_generation_prompt", Data::bool(true)),
        ];
        assert!(matches!(t.render_data_split(context, None, None), Ok(None)));
    }

    /// Every template that resumes renders, message by message with the state of the last
    /// render kept, exactly its split renders of the same messages (corpus and checkpoints).
    #[test]
    fn resumed_renders_are_full_renders() {
        let call = |id: &str| {
            serde_json::json!({"id": id, "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
        };
        let conversations = [
            serde_json::json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi there"},
                {"role": "user", "content": "Why?"},
                {"role": "assistant", "content": " Because. "},
                {"role": "user", "content": "Ok\n"}
            ]),
            serde_json::json!([
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi there"},
                {"role": "user", "content": "Why?"},
                {"role": "assistant", "content": "Because."}
            ]),
            serde_json::json!([
                {"role": "system", "content": "Use tools."},
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [call("a1")]},
                {"role": "tool", "tool_call_id": "a1", "name": "get_weather", "content": "sunny"},
                {"role": "tool", "tool_call_id": "a1", "name": "get_weather", "content": "warm"},
                {"role": "assistant", "content": "Sunny and warm."},
                {"role": "user", "content": "Thanks"},
                {"role": "assistant", "content": "", "tool_calls": [call("b2")]},
                {"role": "tool", "tool_call_id": "b2", "name": "get_weather", "content": "rain"},
                {"role": "user", "content": "And?"}
            ]),
        ];
        // Written: every counter the proof allows, in the loop's scope and beside a nested
        // loop's (whose `else` is the outer loop's scope), over `messages` and a slice of it.
        let written = [
            "{% for m in messages %}{{ loop.index0 }}/{{ loop.index }}{% if loop.first %}F{% endif %}{{ loop.first }}\
             {% if loop.previtem is defined %}<{{ loop.previtem.role }}>{% endif %}{{ loop.previtem }}\
             {{ loop.previtem.content if loop.previtem }}{% if loop.last %}L{% endif %}{{ loop.nextitem.role if loop.nextitem }}\
             {% for c in range(loop.index0 % 3) %}{{ loop.index0 }}{{ loop.first }}{% else %}E{{ loop.index }}{% endfor %}\
             {% set i = loop.index0 * 2 %}{{ i }}[{{ m.content }}]{% endfor %}{% if add_generation_prompt %}G{% endif %}",
            "{% if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% set loop_messages = messages[1:] %}\
             {% else %}{% set sys = '' %}{% set loop_messages = messages %}{% endif %}{% for m in loop_messages %}\
             {% if loop.first %}{{ sys }}{% endif %}{% if loop.index0 > 0 and loop_messages[loop.index0 - 1].role == m.role %}DUP{% endif %}\
             {{ loop_messages[loop.index0 + 1].role if not loop.last }}{{ loop_messages[0].role }}{{ m.role }}:{{ m.content }}\
             {{ loop.previtem.role if loop.previtem is defined }}{% endfor %}{% if add_generation_prompt %}G{% endif %}",
            // The text before the loop changes as the conversation grows (the kept text cannot
            // be extended in place).
            "{{ messages|length }} messages, last {{ messages[-1].role }}\n{% for m in messages %}{{ m.role }}:{{ m.content }}\n\
             {% endfor %}{% if add_generation_prompt %}G{% endif %}",
        ];
        let sources = template_sources().into_iter().chain(
            written
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("written {i}"), t.to_string())),
        );
        let (mut resumable, mut compared, mut resumed, mut known) = (0, 0, 0, 0);
        for (name, source) in sources {
            let Ok(template) = ChatTemplate::compile(&source) else {
                assert!(!name.starts_with("written"), "{name}");
                continue;
            };
            assert!(!name.starts_with("written") || template.resumes(), "{name}");
            if !template.resumes() {
                if std::env::var("CHATIDS_SHOW_SPLITS").is_ok() && template.splits() {
                    eprintln!("not resumable: {name}");
                }
                continue;
            }
            resumable += 1;
            for conversation in &conversations {
                let all = conversation.as_array().unwrap();
                for step in [1, 2] {
                    let mut kept: Option<LoopState> = None;
                    let mut previous = String::new();
                    let mut n = 1;
                    while n <= all.len() {
                        let messages = serde_json::Value::Array(all[..n].to_vec());
                        let context = || -> Vec<(&str, Data)> {
                            let mut none = |_: &str| None;
                            vec![
                                ("bos_token", Data::string("<s>", &mut none)),
                                ("eos_token", Data::string("</s>", &mut none)),
                                (
                                    "tools",
                                    Data::from_json(
                                        &serde_json::json!([{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]),
                                        &mut none,
                                    ),
                                ),
                                ("messages", Data::from_json(&messages, &mut none)),
                                ("add_generation_prompt", Data::bool(true)),
                            ]
                        };
                        let full = template.render_data_split(context(), Some(PROBE_NOW), None);
                        let resumable = kept.as_ref().is_some_and(|k| k.reusable > 0);
                        let got = template.render_data_resume(
                            context(),
                            Some(PROBE_NOW),
                            None,
                            kept.take(),
                        );
                        match (full, got) {
                            (Ok(Some((text, at))), Ok(Some(r))) => {
                                assert_eq!(text, r.text, "{name}: {n} messages (step {step})");
                                assert_eq!(at, r.at, "{name}: {n} messages (step {step})");
                                // The bytes said to be the kept render's are the last text's.
                                assert!(
                                    r.known <= r.at
                                        && (r.known == 0
                                            || previous.get(..r.known) == r.text.get(..r.known)),
                                    "{name}: {n} messages (step {step}): {} known",
                                    r.known
                                );
                                assert!(r.known == 0 || resumable, "{name}: known, not resumed");
                                compared += 1;
                                resumed += usize::from(resumable);
                                known += r.known;
                                kept = Some(r.state);
                                previous = r.text;
                            }
                            (Err(_), Err(_)) => break,
                            (full, got) => panic!(
                                "{name}: {n} messages (step {step}): full {:?}, resumed {:?}",
                                full.map(|f| f.is_some()),
                                got.map(|g| g.is_some())
                            ),
                        }
                        n += step;
                    }
                }
            }
        }
        eprintln!(
            "{resumable} templates resume ({compared} renders compared, {resumed} resumed, {known} bytes known)"
        );
        assert!(
            resumable > 100 && resumed > 1000 && known > 100_000,
            "{resumable} resume, {resumed} renders resumed, {known} bytes known"
        );
        // Caller text holding a mark: not resumed (the marks are not the template's own).
        let t = ChatTemplate::compile(
            "{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}A{% endif %}",
        )
        .unwrap();
        assert!(t.resumes());
        let mut none = |_: &str| None;
        for mark in ['\u{F0003}', '\u{F0004}', '\u{F0005}'] {
            let messages =
                serde_json::json!([{"role": "user", "content": format!("x{mark}1{mark}y")}]);
            let context = vec![
                ("messages", Data::from_json(&messages, &mut none)),
                ("add_generation_prompt", Data::bool(true)),
            ];
            assert!(
                matches!(t.render_data_resume(context, None, None, None), Ok(None)),
                "{mark:?}"
            );
        }
    }
}
