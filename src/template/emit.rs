//! jinja2 AST -> MiniJinja source.
//!
//! The output is fully parenthesized MiniJinja with no whitespace control (the lexer already
//! applied jinja2's), so MiniJinja's own grammar and whitespace rules never decide anything.
//! Operations whose MiniJinja semantics differ from Python's are routed through helper filters
//! (`__cj_*`, see [`super::ops`]): `~`, `/`, `//`, `%`, `*`, `**`, unary `-`/`+`, `+` unless
//! one side is a string literal, `==`/`!=` unless one side is a literal, ordering comparisons,
//! `in`, slices, computed subscripts, tuples, dict literals with non-string keys, loop
//! iterables, and attribute/item lookups that would find a Python method.
//!
//! Statements keep jinja2's semantics where MiniJinja's differ: macro defaults are evaluated
//! in the body (in order, only for parameters the call did not pass), `for ... else` with
//! `continue`, the frames of `set`/`filter` blocks and `generation`, names jinja2 starts
//! undefined in a frame ([`super::scope`]), and `break`/`continue` placement.

use super::filters::{FILTER_NAMES, UNSUPPORTED_FILTERS};
use super::methods::is_method_name;
use super::parser::{Args, BinOp, CmpOp, Const, Expr, Stmt, Target};
use super::predicates::{TEST_NAMES, UNSUPPORTED_TESTS};
use super::scope::{
    all_reads, collect_macros, collect_varargs_macros, has_loop_control, level_refs, loop_declared,
    loop_names, stored_first,
};

/// The most `+` steps one `__cj_addn` call takes (one bit each in its mask).
const ADD_CHAIN_MAX: usize = 32;

/// The result of translating a template.
pub struct Emitted {
    pub source: String,
    pub reads_clock: bool,
}

struct Emitter {
    out: String,
    line: usize,
    reads_clock: bool,
    markup_add: bool,
    /// jinja2's "soft frame" (inside `{% if %}` or an inline if): an unknown filter or test
    /// fails when it runs instead of at compile time.
    soft: bool,
    /// Inside a loop, macro or other inner frame.
    scoped: usize,
    /// The frames around the current statement.
    frames: Vec<Frame>,
    /// The names of the template's macros (calls to them say which arguments were passed).
    macros: Vec<String>,
    /// The template's macros that take extra arguments (`varargs`, `kwargs`).
    varargs_macros: Vec<String>,
    /// For unique helper names.
    counter: usize,
    /// The names each enclosing frame refers to (jinja2's symbol tables).
    outer_refs: Vec<Vec<String>>,
}

/// What encloses a statement, for `break` and `continue`.
#[derive(Clone, Copy)]
enum Frame {
    Loop,
    /// A macro, call block, `generation` or block body.
    Function,
    /// A `with`, `set` or `filter` block.
    Inline,
}

/// Translate parsed statements; `markup_add` routes `+` through Python's `Markup` rules
/// (set when the template uses `safe`/`escape`, the only sources of `Markup`).
pub fn emit(stmts: &[Stmt], markup_add: bool) -> Result<Emitted, String> {
    let mut e = Emitter {
        out: String::new(),
        line: 1,
        reads_clock: false,
        markup_add,
        soft: false,
        scoped: 0,
        frames: Vec::new(),
        macros: Vec::new(),
        varargs_macros: Vec::new(),
        counter: 0,
        outer_refs: Vec::new(),
    };
    collect_macros(stmts, &mut e.macros);
    collect_varargs_macros(stmts, &mut e.varargs_macros);
    e.frame_body(stmts, &[])?;
    Ok(Emitted {
        source: e.out,
        reads_clock: e.reads_clock,
    })
}

/// A MiniJinja string literal holding `s`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Emitter {
    fn push(&mut self, s: &str) {
        self.line += s.matches('\n').count();
        self.out.push_str(s);
    }

    /// Open a tag (`{%` or `{{`), padding it with newlines so errors name the source line.
    fn open(&mut self, delim: &str, line: usize) {
        self.out.push_str(delim);
        while self.line < line {
            self.out.push('\n');
            self.line += 1;
        }
        self.out.push(' ');
    }

    fn tag(&mut self, line: usize, body: &str) {
        self.open("{%", line);
        self.push(body);
        self.out.push_str(" %}");
    }

    /// Run `f` with the soft flag set to `soft`.
    fn with_soft<T>(
        &mut self,
        soft: bool,
        f: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> Result<T, String> {
        let saved = std::mem::replace(&mut self.soft, soft);
        let rv = f(self);
        self.soft = saved;
        rv
    }

    /// Statements in a new (not soft) frame: loop, macro, call, filter, with and set blocks.
    /// `declared`: the names the frame binds itself (loop targets, parameters).
    fn inner_stmts(
        &mut self,
        stmts: &[Stmt],
        frame: Frame,
        declared: &[String],
    ) -> Result<(), String> {
        self.scoped += 1;
        self.frames.push(frame);
        let rv = self.with_soft(false, |e| e.frame_body(stmts, declared));
        self.frames.pop();
        self.scoped -= 1;
        rv
    }

    /// The statements of a frame. jinja2 starts a name undefined in a frame when the frame's
    /// first reference to it is an unconditional assignment (so a loop or macro that runs before
    /// the assignment sees it undefined, not the outer or context value); MiniJinja would see
    /// the outer value, so the frame starts by undefining such names.
    fn frame_body(&mut self, stmts: &[Stmt], declared: &[String]) -> Result<(), String> {
        for name in stored_first(stmts) {
            // In an inner frame, a name any enclosing frame refers to aliases that frame's.
            let outer = self.outer_refs.iter().any(|refs| refs.contains(&name));
            if declared.contains(&name) || outer {
                continue;
            }
            self.out
                .push_str(&format!("{{% set {name} = (none|__cj_undefined) %}}"));
        }
        let mut refs: Vec<String> = declared.to_vec();
        refs.extend(level_refs(stmts).into_iter().map(String::from));
        self.outer_refs.push(refs);
        let rv = self.stmts(stmts);
        self.outer_refs.pop();
        rv
    }

    /// `{% break %}` / `{% continue %}`: jinja2 compiles them to Python's, so they must be in a
    /// loop of the same function (macros, call blocks and `generation` are functions).
    fn loop_control(&mut self, what: &str, line: usize) -> Result<(), String> {
        // Only the innermost frame matters: a loop takes it, a function ends the search.
        match self.frames.last() {
            Some(Frame::Loop) => {
                self.tag(line, what);
                Ok(())
            }
            // MiniJinja cannot leave a `with`/`set`/`filter` block this way.
            Some(Frame::Inline) => Err(format!(
                "'{what}' inside with, set or filter blocks is not supported"
            )),
            Some(Frame::Function) | None => Err(format!("'{what}' outside loop (line {line})")),
        }
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        for s in stmts {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s {
            Stmt::Data(d) => {
                if d.contains("{{") || d.contains("{%") || d.contains("{#") || d.ends_with('{') {
                    self.out.push_str("{{ ");
                    self.out.push_str(&quote(d));
                    self.out.push_str(" }}");
                } else {
                    self.push(d);
                }
            }
            Stmt::Output(exprs, line) => {
                for e in exprs {
                    let code = self.expr(e)?;
                    self.open("{{", *line);
                    self.push(&code);
                    self.out.push_str(" }}");
                }
            }
            Stmt::For {
                target,
                iter,
                filter,
                recursive,
                body,
                else_,
                line,
            } => {
                let mut head = format!(
                    "for {} in {}|__cj_iter",
                    target_code(target)?,
                    self.atom(iter)?
                );
                if let Some(f) = filter {
                    head.push_str(" if ");
                    head.push_str(&self.with_soft(false, |e| e.expr(f))?);
                }
                if *recursive {
                    head.push_str(" recursive");
                }
                let (mut sets, mut reads) = (Vec::new(), Vec::new());
                loop_names(body, &mut sets, &mut reads, false);
                // jinja2 starts every iteration with fresh loop-body variables. MiniJinja clears
                // the frame's locals too, but a macro or call block defined in the loop keeps a
                // closure across iterations: re-bind such names to the value an iteration
                // starts with (the enclosing one) before anything runs, which resets the closure.
                let mut resets: Vec<&str> = Vec::new();
                for name in reads.iter().filter(|n| sets.contains(n)) {
                    if !resets.contains(name) {
                        resets.push(name);
                    }
                }
                let resets: String = resets
                    .iter()
                    .map(|n| format!("{{% set {n} = {n} %}}"))
                    .collect();
                if else_.is_empty() || !has_loop_control(body) {
                    self.tag(*line, &head);
                    self.out.push_str(&resets);
                    self.inner_stmts(body, Frame::Loop, &loop_declared(target))?;
                    if !else_.is_empty() {
                        self.tag(0, "else");
                        self.stmts(else_)?;
                    }
                    self.tag(0, "endfor");
                } else {
                    // jinja2 runs `else` unless an iteration reached the end of the body, so a
                    // `continue` in every iteration runs it too.
                    self.counter += 1;
                    let flag = format!("__cj_else_{}", self.counter);
                    self.tag(*line, &format!("set {flag} = namespace(run=true)"));
                    self.tag(0, &head);
                    self.out.push_str(&resets);
                    self.inner_stmts(body, Frame::Loop, &loop_declared(target))?;
                    self.tag(0, &format!("set {flag}.run = false"));
                    self.tag(0, "endfor");
                    self.tag(0, &format!("if {flag}.run"));
                    self.stmts(else_)?;
                    self.tag(0, "endif");
                }
            }
            Stmt::If { branches, else_ } => self.with_soft(true, |e| {
                for (i, (test, body, line)) in branches.iter().enumerate() {
                    let code = e.expr(test)?;
                    e.tag(
                        *line,
                        &format!("{} {code}", if i == 0 { "if" } else { "elif" }),
                    );
                    e.stmts(body)?;
                }
                if !else_.is_empty() {
                    e.tag(0, "else");
                    e.stmts(else_)?;
                }
                e.tag(0, "endif");
                Ok(())
            })?,
            Stmt::Set(target, value, line) => {
                if let Target::NsRef(_, attr) = target {
                    if attr.starts_with('_') {
                        return self.fail_stmt(
                            &format!("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{attr}'."),
                            *line,
                        );
                    }
                }
                let code = format!("set {} = {}", target_code(target)?, self.expr(value)?);
                self.tag(*line, &code);
            }
            Stmt::SetBlock(target, filter, body, line) => {
                let mut head = format!("set {}", target_code(target)?);
                if let Some(f) = filter {
                    head.push_str(&self.with_soft(false, |e| e.filter_chain(f))?);
                }
                self.tag(*line, &head);
                // jinja2 gives the body a frame of its own; MiniJinja's `with` is one.
                self.tag(0, "with");
                self.inner_stmts(body, Frame::Inline, &[])?;
                self.tag(0, "endwith");
                self.tag(0, "endset");
            }
            Stmt::Macro {
                name,
                params,
                body,
                line,
            } => {
                let (mut sig, mut prologue) =
                    self.with_soft(false, |e| e.signature(params, true))?;
                extra_params(body, &mut sig, &mut prologue, false);
                self.tag(*line, &format!("macro {name}({sig})"));
                self.out.push_str(&prologue);
                let mut declared: Vec<String> = params.iter().map(|p| p.0.clone()).collect();
                declared.extend(
                    ["caller", "varargs", "kwargs", "__cj_pos", "__cj_kw"].map(String::from),
                );
                self.inner_stmts(body, Frame::Function, &declared)?;
                self.tag(0, "endmacro");
            }
            Stmt::CallBlock {
                params,
                call,
                body,
                line,
            } => {
                let (mut sig, mut prologue) =
                    self.with_soft(false, |e| e.signature(params, false))?;
                extra_params(body, &mut sig, &mut prologue, true);
                let call = self.expr(call)?;
                let call = call
                    .strip_prefix('(')
                    .and_then(|c| c.strip_suffix(')'))
                    .unwrap_or(&call)
                    .to_string();
                self.tag(*line, &format!("call({sig}) {call}"));
                self.out.push_str(&prologue);
                let mut declared: Vec<String> = params.iter().map(|p| p.0.clone()).collect();
                declared.extend(["caller", "varargs", "kwargs"].map(String::from));
                self.inner_stmts(body, Frame::Function, &declared)?;
                self.tag(0, "endcall");
            }
            Stmt::FilterBlock(filter, body, line) => {
                let chain = self.with_soft(false, |e| e.filter_chain(filter))?;
                self.tag(
                    *line,
                    &format!("filter {}", chain.trim_start_matches(['|', ' '])),
                );
                self.tag(0, "with");
                self.inner_stmts(body, Frame::Inline, &[])?;
                self.tag(0, "endwith");
                self.tag(0, "endfilter");
            }
            Stmt::With(assignments, body, line) => {
                let mut parts = Vec::new();
                for (t, v) in assignments {
                    parts.push(format!("{} = {}", target_code(t)?, self.expr(v)?));
                }
                self.tag(*line, &format!("with {}", parts.join(", ")));
                let declared: Vec<String> = assignments
                    .iter()
                    .flat_map(|(t, _)| loop_declared(t))
                    .collect();
                self.inner_stmts(body, Frame::Inline, &declared)?;
                self.tag(0, "endwith");
            }
            Stmt::Block(name, body, line) => {
                if self.scoped > 0 {
                    // jinja2 renders such a block without the enclosing frame's variables.
                    return Err(
                        "blocks inside loops, macros or other blocks are not supported".into(),
                    );
                }
                self.tag(*line, &format!("block {name}"));
                self.inner_stmts(body, Frame::Function, &[])?;
                self.tag(0, "endblock");
            }
            Stmt::Generation(body, line) => {
                // jinja2 renders the body as a caller macro: a scope of its own, output unchanged.
                self.tag(*line, "with");
                self.inner_stmts(body, Frame::Function, &[])?;
                self.tag(0, "endwith");
            }
            Stmt::Break(line) => self.loop_control("break", *line)?,
            Stmt::Continue(line) => self.loop_control("continue", *line)?,
            Stmt::Fail(msg, line) => self.fail_stmt(msg, *line)?,
        }
        Ok(())
    }

    fn fail_stmt(&mut self, msg: &str, line: usize) -> Result<(), String> {
        self.open("{{", line);
        self.push(&format!("none|__cj_fail({})", quote(msg)));
        self.out.push_str(" }}");
        Ok(())
    }

    /// A macro signature, and the statements that must open the body.
    ///
    /// jinja2 evaluates a default inside the macro, in parameter order, only for a parameter
    /// the call did not pass (an undefined value passed stays undefined). MiniJinja evaluates
    /// defaults before binding the earlier parameters and for any undefined value, so the
    /// defaults move into the body: calls to the template's macros say which arguments they
    /// passed (`__cj_pos`, `__cj_kw`); other calls (a macro used as a value) fall back to
    /// "undefined means not passed".
    fn signature(
        &mut self,
        params: &[(String, Option<Expr>)],
        hidden: bool,
    ) -> Result<(String, String), String> {
        let mut parts = Vec::new();
        let mut prologue = String::new();
        for (i, (name, default)) in params.iter().enumerate() {
            parts.push(name.clone());
            if let Some(d) = default {
                let code = self.expr(d)?;
                let missing = if hidden {
                    format!(
                        "((__cj_pos is none and {name} is undefined) or (__cj_pos is not none and __cj_pos <= {i} and {} not in __cj_kw))",
                        quote(name)
                    )
                } else {
                    format!("({name} is undefined)")
                };
                prologue.push_str(&format!(
                    "{{% if {missing} %}}{{% set {name} = {code} %}}{{% endif %}}"
                ));
            }
        }
        if hidden {
            parts.push("__cj_pos=none".into());
            parts.push("__cj_kw=none".into());
        }
        Ok((parts.join(", "), prologue))
    }

    /// A filter chain without its head value: `|f(a)|g`.
    fn filter_chain(&mut self, e: &Expr) -> Result<String, String> {
        match e {
            Expr::Filter(base, name, args) => {
                let mut out = match base {
                    Some(b) => self.filter_chain(b)?,
                    None => String::new(),
                };
                out.push_str(&format!("|{}", self.filter_call(name, args)?));
                Ok(out)
            }
            _ => Err("invalid filter chain".into()),
        }
    }

    fn filter_call(&mut self, name: &str, args: &Args) -> Result<String, String> {
        if UNSUPPORTED_FILTERS.contains(&name) {
            return Ok(format!(
                "__cj_fail({})",
                quote(&format!("the '{name}' filter is not supported by chatids"))
            ));
        }
        if !FILTER_NAMES.contains(&name) {
            if self.soft {
                return Ok(format!(
                    "__cj_fail({})",
                    quote(&format!("No filter named '{name}'."))
                ));
            }
            return Err(format!("No filter named '{name}'."));
        }
        if args.args.is_empty() && args.kwargs.is_empty() && !args.dynamic() {
            Ok(name.to_string())
        } else {
            Ok(format!("{name}({})", self.args(args)?))
        }
    }

    fn args(&mut self, args: &Args) -> Result<String, String> {
        if args.dynamic() {
            return Err("*args and **kwargs in filter and test calls are not supported".into());
        }
        let mut parts = Vec::new();
        for a in &args.args {
            parts.push(self.expr(a)?);
        }
        for (k, v) in &args.kwargs {
            parts.push(format!("{k}={}", self.expr(v)?));
        }
        Ok(parts.join(", "))
    }

    /// An expression usable before a postfix operator (`.x`, `[x]`, `(x)`, `|f`).
    fn atom(&mut self, e: &Expr) -> Result<String, String> {
        let code = self.expr(e)?;
        Ok(match e {
            Expr::Name(_) | Expr::List(_) | Expr::Dict(_) => code,
            _ if code.starts_with('(') && code.ends_with(')') => code,
            _ => format!("({code})"),
        })
    }

    /// `a + b + c ...` (two or more `+` along the left side) as one `__cj_addn` call: the
    /// operands are evaluated in order, as before, and added left to right with each step's own
    /// rule (MiniJinja's `+` where one side is a string literal, Python's otherwise; see
    /// [`super::ops::add_chain`]), but a chain of plain strings is built in one allocation
    /// instead of a new string per step. At most [`ADD_CHAIN_MAX`] steps per call: a longer
    /// chain's head is itself a chain.
    fn add_chain(&mut self, e: &Expr) -> Result<String, String> {
        let mut steps: Vec<&Expr> = Vec::new();
        let mut head = e;
        while let Expr::BinOp(BinOp::Add, x, y) = head {
            if steps.len() == ADD_CHAIN_MAX {
                break;
            }
            steps.push(y);
            head = x;
        }
        steps.reverse();
        let is_str = |e: &Expr| matches!(e, Expr::Const(Const::Str(_)));
        let mut native: u64 = 0;
        for (i, y) in steps.iter().enumerate() {
            if !self.markup_add && ((i == 0 && is_str(head)) || is_str(y)) {
                native |= 1 << i;
            }
        }
        let head = self.atom(head)?;
        let mut args = vec![native.to_string()];
        for y in steps {
            args.push(self.expr(y)?);
        }
        Ok(format!("({head}|__cj_addn({}))", args.join(", ")))
    }

    fn expr(&mut self, e: &Expr) -> Result<String, String> {
        Ok(match e {
            Expr::Name(n) => {
                if n == "strftime_now" {
                    self.reads_clock = true;
                }
                n.clone()
            }
            Expr::Const(c) => const_code(c)?,
            Expr::Tuple(items) => format!("([{}]|__cj_tuple)", self.list(items)?),
            Expr::List(items) => format!("[{}]", self.list(items)?),
            Expr::Dict(items) => {
                let string_keys = items
                    .iter()
                    .all(|(k, _)| matches!(k, Expr::Const(Const::Str(_))));
                let mut parts = Vec::new();
                for (k, v) in items {
                    let (k, v) = (self.expr(k)?, self.expr(v)?);
                    parts.push(if string_keys {
                        format!("{k}: {v}")
                    } else {
                        format!("{k}, {v}")
                    });
                }
                if string_keys {
                    format!("{{{}}}", parts.join(", "))
                } else {
                    // Python merges keys that compare equal (`1`, `1.0`, `True`).
                    format!("([{}]|__cj_dict)", parts.join(", "))
                }
            }
            Expr::CondExpr(test, body, else_) => self.with_soft(true, |e| {
                let (t, b) = (e.expr(test)?, e.expr(body)?);
                Ok(match else_ {
                    Some(x) => format!("({b} if {t} else {})", e.expr(x)?),
                    None => format!("({b} if {t})"),
                })
            })?,
            Expr::Or(a, b) | Expr::And(a, b) => {
                let op = if matches!(e, Expr::Or(..)) {
                    "or"
                } else {
                    "and"
                };
                let mut left = self.expr(a)?;
                if is_literal(a) && is_literal(b) {
                    // MiniJinja folds `const and const` into a bool; Python keeps the operand.
                    left = format!("({left}|__cj_id)");
                }
                format!("({left} {op} {})", self.expr(b)?)
            }
            Expr::Not(a) => format!("(not {})", self.expr(a)?),
            Expr::Compare(first, ops) => self.compare(first, ops)?,
            Expr::BinOp(BinOp::Add, x, _) if matches!(x.as_ref(), Expr::BinOp(BinOp::Add, ..)) => {
                self.add_chain(e)?
            }
            Expr::BinOp(op, x, y) => {
                // MiniJinja's `+` is Python's when one side is a string literal (str + str, or
                // an error); otherwise tuples, lists and Markup need Python's rules.
                let str_literal = matches!(x.as_ref(), Expr::Const(Const::Str(_)))
                    || matches!(y.as_ref(), Expr::Const(Const::Str(_)));
                let (a, b) = (self.atom(x)?, self.expr(y)?);
                match op {
                    BinOp::Add if str_literal && !self.markup_add => format!("({a} + {b})"),
                    BinOp::Add => format!("({a}|__cj_add({b}))"),
                    BinOp::Sub => format!("({a} - {b})"),
                    BinOp::Mul => format!("({a}|__cj_mul({b}))"),
                    BinOp::Pow => format!("({a}|__cj_pow({b}))"),
                    BinOp::Div => format!("({a}|__cj_div({b}))"),
                    BinOp::FloorDiv => format!("({a}|__cj_floordiv({b}))"),
                    BinOp::Mod => format!("({a}|__cj_mod({b}))"),
                }
            }
            Expr::Concat(items) => {
                let head = self.atom(&items[0])?;
                format!("({head}|__cj_concat({}))", self.list(&items[1..])?)
            }
            Expr::Neg(a) => format!("({}|__cj_neg)", self.atom(a)?),
            Expr::Pos(a) => format!("({}|__cj_pos)", self.atom(a)?),
            Expr::Getattr(obj, name) => {
                let o = self.atom(obj)?;
                if is_method_name(name) || name.starts_with('_') {
                    format!("({o}|__cj_getattr({}))", quote(name))
                } else {
                    format!("{o}.{name}")
                }
            }
            Expr::Getitem(obj, key) => {
                let o = self.atom(obj)?;
                match key.as_ref() {
                    Expr::Slice(start, stop, step) => {
                        let mut parts = Vec::new();
                        for p in [start, stop, step] {
                            parts.push(match p {
                                Some(x) => self.expr(x)?,
                                None => "none".into(),
                            });
                        }
                        format!("({o}|__cj_slice({}))", parts.join(", "))
                    }
                    Expr::Const(Const::Str(s)) if is_method_name(s) || s.starts_with('_') => {
                        format!("({o}|__cj_getitem({}))", quote(s))
                    }
                    k @ Expr::Const(Const::Str(_) | Const::Int(_)) => {
                        format!("{o}[{}]", self.expr(k)?)
                    }
                    // A computed key: Python's lookup rules (and the method fallback) apply.
                    k => format!("({o}|__cj_item({}))", self.expr(k)?),
                }
            }
            Expr::Slice(..) => return Err("a slice outside of a subscript".into()),
            Expr::Call(func, args) if self.python_call(func, args) => {
                // `__cj_call(callee, method, star, dstar, *args, **kwargs)`
                let (callee, method) = match func.as_ref() {
                    Expr::Getattr(obj, name) => (self.expr(obj)?, quote(name)),
                    other => (self.expr(other)?, "none".to_string()),
                };
                let mut parts = vec![callee, method];
                for operand in [&args.dyn_args, &args.dyn_kwargs] {
                    parts.push(match operand {
                        Some(x) => self.expr(x)?,
                        None => "none".into(),
                    });
                }
                for a in &args.args {
                    parts.push(self.expr(a)?);
                }
                for (k, v) in &args.kwargs {
                    parts.push(format!("{k}={}", self.expr(v)?));
                }
                format!("__cj_call({})", parts.join(", "))
            }
            Expr::Call(func, args) => {
                let f = match func.as_ref() {
                    Expr::Getattr(obj, name) => format!("{}.{name}", self.atom(obj)?),
                    Expr::Name(n) => self.expr(&Expr::Name(n.clone()))?,
                    other => self.atom(other)?,
                };
                let mut code = self.args(args)?;
                if matches!(func.as_ref(), Expr::Name(n) if self.macros.contains(n)) {
                    // Tell the macro which parameters this call passed.
                    let kw: Vec<String> = args.kwargs.iter().map(|(k, _)| quote(k)).collect();
                    let hidden =
                        format!("__cj_pos={}, __cj_kw=[{}]", args.args.len(), kw.join(", "));
                    code = if code.is_empty() {
                        hidden
                    } else {
                        format!("{code}, {hidden}")
                    };
                }
                format!("{f}({code})")
            }
            Expr::Filter(base, name, args) => {
                let b = match base {
                    Some(b) => self.atom(b)?,
                    None => return Err("a filter without a value".into()),
                };
                format!("({b}|{})", self.filter_call(name, args)?)
            }
            Expr::Test(base, name, args) => {
                let b = self.atom(base)?;
                if UNSUPPORTED_TESTS.contains(&name.as_str()) {
                    return Ok(format!(
                        "({b}|__cj_fail({}))",
                        quote(&format!("the '{name}' test is not supported by chatids"))
                    ));
                }
                if !TEST_NAMES.contains(&name.as_str()) {
                    if self.soft {
                        return Ok(format!(
                            "({b}|__cj_fail({}))",
                            quote(&format!("No test named '{name}'."))
                        ));
                    }
                    return Err(format!("No test named '{name}'."));
                }
                if args.args.is_empty() && args.kwargs.is_empty() && !args.dynamic() {
                    format!("({b} is {name})")
                } else {
                    format!("({b} is {name}({}))", self.args(args)?)
                }
            }
        })
    }

    /// Whether a call needs Python's binding rules ([`super::calls`]): `*args`/`**kwargs`, a
    /// macro taking `varargs`/`kwargs`, or a callee that may be a macro held in a value.
    fn python_call(&self, func: &Expr, args: &Args) -> bool {
        args.dynamic()
            || match func {
                // `caller` may be a call block taking `varargs`/`kwargs`.
                Expr::Name(n) => n == "caller" || self.varargs_macros.contains(n),
                Expr::Getattr(..) => false,
                _ => true,
            }
    }

    fn list(&mut self, items: &[Expr]) -> Result<String, String> {
        let mut parts = Vec::new();
        for i in items {
            parts.push(self.expr(i)?);
        }
        Ok(parts.join(", "))
    }

    fn compare(&mut self, first: &Expr, ops: &[(CmpOp, Expr)]) -> Result<String, String> {
        let a = self.atom(first)?;
        if let [(op, b)] = ops {
            let b = self.expr(b)?;
            // Against a literal MiniJinja's `==` is Python's; otherwise tuples and lists differ.
            let literal = matches!(first, Expr::Const(_)) || matches!(ops[0].1, Expr::Const(_));
            match op {
                CmpOp::Eq if literal => return Ok(format!("({a} == {b})")),
                CmpOp::Ne if literal => return Ok(format!("({a} != {b})")),
                CmpOp::Eq => return Ok(format!("({a}|__cj_eq({b}))")),
                CmpOp::Ne => return Ok(format!("({a}|__cj_ne({b}))")),
                CmpOp::In => return Ok(format!("({a}|__cj_in({b}))")),
                CmpOp::NotIn => return Ok(format!("(not ({a}|__cj_in({b})))")),
                _ => {}
            }
        }
        let mut parts = Vec::new();
        for (op, b) in ops {
            parts.push(quote(cmp_name(*op)));
            parts.push(self.expr(b)?);
        }
        Ok(format!("({a}|__cj_compare({}))", parts.join(", ")))
    }
}

/// jinja2 gives a macro or call block a `varargs` tuple and a `kwargs` dict when its body reads
/// them, taking extra positional and keyword arguments: add the hidden parameters `__cj_call`
/// fills ([`super::calls`]) to the signature `sig` (with `__cj_pos`/`__cj_kw`, by which it
/// recognises the template's own, when `positions`), and bind the names first in `prologue`.
fn extra_params(body: &[Stmt], sig: &mut String, prologue: &mut String, positions: bool) {
    let mut reads = Vec::new();
    all_reads(body, &mut reads);
    let (varargs, kwargs) = (reads.contains(&"varargs"), reads.contains(&"kwargs"));
    if positions && (varargs || kwargs) {
        sig.push_str(if sig.is_empty() { "" } else { ", " });
        sig.push_str("__cj_pos=none, __cj_kw=none");
    }
    if varargs {
        sig.push_str(", __cj_va=none");
        prologue.insert_str(
            0,
            "{% set varargs = (__cj_va if __cj_va is not none else ([]|__cj_tuple)) %}",
        );
    }
    if kwargs {
        sig.push_str(", __cj_kwa=none");
        prologue.insert_str(
            0,
            "{% set kwargs = (__cj_kwa if __cj_kwa is not none else dict()) %}",
        );
    }
}

/// A literal MiniJinja may evaluate at compile time.
fn is_literal(e: &Expr) -> bool {
    match e {
        Expr::Const(_) => true,
        Expr::List(items) | Expr::Tuple(items) => items.iter().all(is_literal),
        Expr::Dict(items) => items.iter().all(|(k, v)| is_literal(k) && is_literal(v)),
        _ => false,
    }
}

fn cmp_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
        CmpOp::Lt => "lt",
        CmpOp::LtEq => "lteq",
        CmpOp::Gt => "gt",
        CmpOp::GtEq => "gteq",
        CmpOp::In => "in",
        CmpOp::NotIn => "notin",
    }
}

fn const_code(c: &Const) -> Result<String, String> {
    Ok(match c {
        Const::None => "none".into(),
        Const::Bool(b) => b.to_string(),
        Const::Int(i) => {
            if i64::try_from(*i).is_err() {
                format!("(\"{i}\"|__cj_int)")
            } else {
                i.to_string()
            }
        }
        Const::Float(f) => {
            if !f.is_finite() {
                return Err("infinite float literals are not supported".into());
            }
            let s = format!("{f:?}");
            if s.contains('.') || s.contains('e') {
                s
            } else {
                format!("{s}.0")
            }
        }
        Const::Str(s) => quote(s),
    })
}

fn target_code(t: &Target) -> Result<String, String> {
    Ok(match t {
        Target::Name(n) => n.clone(),
        Target::NsRef(n, a) => format!("{n}.{a}"),
        Target::Tuple(items) => {
            let mut parts = Vec::new();
            for i in items {
                if matches!(i, Target::NsRef(..)) {
                    return Err(
                        "namespace attributes inside tuple assignments are not supported".into(),
                    );
                }
                parts.push(target_code(i)?);
            }
            if parts.len() == 1 {
                format!("({},)", parts[0])
            } else {
                format!("({})", parts.join(", "))
            }
        }
    })
}
