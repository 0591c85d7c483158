//! The variables a template reads from its context: jinja2's
//! `meta.find_undeclared_variables`, which transformers and vLLM use to tell template
//! arguments apart.
//!
//! jinja2 answers it with its compiler's symbol tables (`jinja2/idtracking.py`): every frame
//! (the template, each loop body, `else` and filter test, macro, call block, `filter`, `with`
//! and `set` block, and each `{% block %}` on its own) records, per name, how the name gets its
//! value; a name it must *resolve* from the context, and that is not one of the environment's
//! globals, is undeclared. This module ports those tables over chatids' jinja2 syntax tree, so
//! the answer is jinja2's, quirks included: a name assigned only in some `{% if %}` branches
//! counts as read (the other branches see the context's value), and a loop body sees the
//! assignments of its whole parent frame, even those after the loop.

use std::collections::{BTreeMap, BTreeSet};

use super::parser::{Expr, Stmt, Target};

/// The globals of transformers' jinja2 environment (jinja2's defaults plus transformers'):
/// `meta.find_undeclared_variables` leaves them out.
pub const GLOBALS: &[&str] = &[
    "range",
    "dict",
    "lipsum",
    "cycler",
    "joiner",
    "namespace",
    "raise_exception",
    "strftime_now",
];

/// How a frame gives a name its value (jinja2's `VAR_LOAD_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Load {
    Parameter,
    Resolve(String),
    Alias,
    Undefined,
}

/// One frame's symbol table (jinja2's `Symbols`, without the parent link: the chain of
/// enclosing tables is passed alongside).
#[derive(Debug, Clone, Default)]
struct Symbols {
    level: usize,
    refs: BTreeMap<String, String>,
    loads: BTreeMap<String, Load>,
    stores: BTreeSet<String>,
}

/// A frame's table together with its enclosing frames' tables (outermost first).
struct Frame<'p> {
    parents: &'p [&'p Symbols],
    symbols: Symbols,
}

impl<'p> Frame<'p> {
    fn new(parents: &'p [&'p Symbols]) -> Self {
        Frame {
            parents,
            symbols: Symbols {
                level: parents.len(),
                ..Symbols::default()
            },
        }
    }

    fn define_ref(&mut self, name: &str, load: Option<Load>) -> String {
        let ident = format!("l_{}_{name}", self.symbols.level);
        self.symbols.refs.insert(name.to_string(), ident.clone());
        if let Some(load) = load {
            self.symbols.loads.insert(ident.clone(), load);
        }
        ident
    }

    fn parent_ref(&self, name: &str) -> Option<&str> {
        self.parents
            .iter()
            .rev()
            .find_map(|s| s.refs.get(name).map(String::as_str))
    }

    fn find_ref(&self, name: &str) -> Option<&str> {
        self.symbols
            .refs
            .get(name)
            .map(String::as_str)
            .or_else(|| self.parent_ref(name))
    }

    fn store(&mut self, name: &str) {
        self.symbols.stores.insert(name.to_string());
        if !self.symbols.refs.contains_key(name) {
            let load = if self.parent_ref(name).is_some() {
                Load::Alias
            } else {
                Load::Undefined
            };
            self.define_ref(name, Some(load));
        }
    }

    fn declare_parameter(&mut self, name: &str) {
        self.symbols.stores.insert(name.to_string());
        self.define_ref(name, Some(Load::Parameter));
    }

    fn load(&mut self, name: &str) {
        if self.find_ref(name).is_none() {
            self.define_ref(name, Some(Load::Resolve(name.to_string())));
        }
    }

    /// jinja2's `branch_update`: merge the tables of an `if`'s branches.
    fn branch_update(&mut self, branches: Vec<Symbols>) {
        let mut stores: BTreeSet<String> = BTreeSet::new();
        for b in &branches {
            stores.extend(b.stores.iter().cloned());
        }
        for name in &self.symbols.stores {
            stores.remove(name);
        }
        for b in branches {
            self.symbols.refs.extend(b.refs);
            self.symbols.loads.extend(b.loads);
            self.symbols.stores.extend(b.stores);
        }
        for name in stores {
            let target = self
                .find_ref(&name)
                .expect("a stored name has a reference")
                .to_string();
            let load = if self.parent_ref(&name).is_some() {
                Load::Alias
            } else {
                Load::Resolve(name.clone())
            };
            self.symbols.loads.insert(target, load);
        }
    }

    // ---- jinja2's FrameSymbolVisitor: a frame's own level ----

    fn expr(&mut self, e: &Expr) {
        let mut names = Vec::new();
        e.names(&mut names);
        for n in names {
            self.load(n);
        }
    }

    fn target(&mut self, t: &Target, as_param: bool) {
        match t {
            Target::Name(n) if as_param => self.declare_parameter(n),
            Target::Name(n) => self.store(n),
            Target::NsRef(n, _) => self.load(n),
            Target::Tuple(items) => items.iter().for_each(|i| self.target(i, as_param)),
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Data(_) | Stmt::Break(_) | Stmt::Continue(_) | Stmt::Fail(..) => {}
            Stmt::Output(exprs, _) => exprs.iter().for_each(|e| self.expr(e)),
            Stmt::For { iter, .. } => self.expr(iter),
            Stmt::If { branches, else_ } => self.if_stmt(branches, else_),
            Stmt::Set(t, e, _) => {
                self.expr(e);
                self.target(t, false);
            }
            Stmt::SetBlock(t, _, _, _) => self.target(t, false),
            Stmt::Macro { name, .. } => self.store(name),
            Stmt::CallBlock { call, .. } => self.expr(call),
            Stmt::FilterBlock(f, _, _) => self.expr(f),
            Stmt::With(assignments, _, _) => assignments.iter().for_each(|(_, v)| self.expr(v)),
            // `{% generation %}` is a call block of an extension method: no name at this level.
            Stmt::Block(..) | Stmt::Generation(..) => {}
        }
    }

    /// jinja2's `visit_If`: the test here, each branch in a copy of the table, then merged.
    /// `elif`s are jinja2's `elif_` list: one copy in which each `elif` is an `if` of its own.
    fn if_stmt(&mut self, branches: &[(Expr, Vec<Stmt>, usize)], else_: &[Stmt]) {
        let Some(((test, body, _), elifs)) = branches.split_first() else {
            return;
        };
        self.expr(test);
        let original = self.symbols.clone();
        let visit = |frame: &mut Self, f: &dyn Fn(&mut Self)| -> Symbols {
            frame.symbols = original.clone();
            f(frame);
            std::mem::replace(&mut frame.symbols, original.clone())
        };
        let body_symbols = visit(self, &|f| body.iter().for_each(|s| f.stmt(s)));
        let elif_symbols = visit(self, &|f| {
            for (test, body, line) in elifs {
                f.if_stmt(&[(test.clone(), body.clone(), *line)], &[]);
            }
        });
        let else_symbols = visit(self, &|f| else_.iter().for_each(|s| f.stmt(s)));
        self.symbols = original;
        self.branch_update(vec![body_symbols, elif_symbols, else_symbols]);
    }
}

/// Whether `stmts` read `name` anywhere (jinja2's `find_undeclared` for one name: every
/// nested statement but `{% block %}`s).
fn reads(stmts: &[Stmt], name: &str) -> bool {
    fn expr(e: &Expr, name: &str) -> bool {
        let mut names = Vec::new();
        e.names(&mut names);
        names.contains(&name)
    }
    fn args(a: &[(String, Option<Expr>)], name: &str) -> bool {
        a.iter()
            .any(|(_, d)| d.as_ref().is_some_and(|d| expr(d, name)))
    }
    stmts.iter().any(|s| match s {
        Stmt::Data(_) | Stmt::Break(_) | Stmt::Continue(_) | Stmt::Fail(..) | Stmt::Block(..) => {
            false
        }
        Stmt::Output(exprs, _) => exprs.iter().any(|e| expr(e, name)),
        Stmt::For {
            iter,
            filter,
            body,
            else_,
            ..
        } => {
            expr(iter, name)
                || filter.as_ref().is_some_and(|f| expr(f, name))
                || reads(body, name)
                || reads(else_, name)
        }
        Stmt::If { branches, else_ } => {
            branches
                .iter()
                .any(|(t, b, _)| expr(t, name) || reads(b, name))
                || reads(else_, name)
        }
        Stmt::Set(t, e, _) => expr(e, name) || matches!(t, Target::NsRef(n, _) if n == name),
        Stmt::SetBlock(t, f, body, _) => {
            matches!(t, Target::NsRef(n, _) if n == name)
                || f.as_ref().is_some_and(|f| expr(f, name))
                || reads(body, name)
        }
        Stmt::Macro { params, body, .. } => args(params, name) || reads(body, name),
        Stmt::CallBlock {
            params, call, body, ..
        } => args(params, name) || expr(call, name) || reads(body, name),
        Stmt::FilterBlock(f, body, _) => expr(f, name) || reads(body, name),
        Stmt::With(assignments, body, _) => {
            assignments.iter().any(|(_, v)| expr(v, name)) || reads(body, name)
        }
        Stmt::Generation(body, _) => reads(body, name),
    })
}

/// The walk of jinja2's code generator: enter each frame, note what it resolves, then the
/// frames inside it.
struct Walker {
    undeclared: BTreeSet<String>,
    blocks: Vec<Vec<Stmt>>,
}

impl Walker {
    fn enter(&mut self, symbols: &Symbols) {
        for load in symbols.loads.values() {
            if let Load::Resolve(name) = load {
                if !GLOBALS.contains(&name.as_str()) {
                    self.undeclared.insert(name.clone());
                }
            }
        }
    }

    /// Visit the inner frames of the statements of a frame whose table is `symbols`.
    fn inner(&mut self, stmts: &[Stmt], parents: &[&Symbols]) {
        for s in stmts {
            self.inner_stmt(s, parents);
        }
    }

    fn macro_frame(
        &mut self,
        params: &[(String, Option<Expr>)],
        body: &[Stmt],
        parents: &[&Symbols],
    ) {
        let mut frame = Frame::new(parents);
        for (name, _) in params {
            frame.declare_parameter(name);
        }
        for (_, default) in params {
            if let Some(d) = default {
                frame.expr(d);
            }
        }
        body.iter().for_each(|s| frame.stmt(s));
        for special in ["caller", "kwargs", "varargs"] {
            if params.iter().all(|(n, _)| n != special) && reads(body, special) {
                frame.declare_parameter(special);
            }
        }
        let symbols = frame.symbols;
        self.enter(&symbols);
        let chain: Vec<&Symbols> = parents.iter().copied().chain([&symbols]).collect();
        self.inner(body, &chain);
    }

    fn inner_stmt(&mut self, s: &Stmt, parents: &[&Symbols]) {
        match s {
            Stmt::For {
                target,
                filter,
                body,
                else_,
                recursive,
                ..
            } => {
                let mut frame = Frame::new(parents);
                if *recursive || reads(body, "loop") {
                    frame.declare_parameter("loop");
                }
                frame.target(target, true);
                body.iter().for_each(|s| frame.stmt(s));
                let symbols = frame.symbols;
                if !else_.is_empty() {
                    let mut frame = Frame::new(parents);
                    else_.iter().for_each(|s| frame.stmt(s));
                    let else_symbols = frame.symbols;
                    self.enter(&else_symbols);
                    let chain: Vec<&Symbols> =
                        parents.iter().copied().chain([&else_symbols]).collect();
                    self.inner(else_, &chain);
                }
                if let Some(test) = filter {
                    let mut frame = Frame::new(parents);
                    frame.target(target, true);
                    frame.expr(test);
                    self.enter(&frame.symbols);
                }
                self.enter(&symbols);
                let chain: Vec<&Symbols> = parents.iter().copied().chain([&symbols]).collect();
                self.inner(body, &chain);
            }
            Stmt::If { branches, else_ } => {
                for (_, body, _) in branches {
                    self.inner(body, parents);
                }
                self.inner(else_, parents);
            }
            Stmt::Macro { params, body, .. } => self.macro_frame(params, body, parents),
            Stmt::CallBlock { params, body, .. } => self.macro_frame(params, body, parents),
            Stmt::Generation(body, _) => self.macro_frame(&[], body, parents),
            Stmt::FilterBlock(f, body, _) => {
                let mut frame = Frame::new(parents);
                body.iter().for_each(|s| frame.stmt(s));
                frame.expr(f);
                self.enter_with_children(frame.symbols, body, parents);
            }
            Stmt::With(assignments, body, _) => {
                let mut frame = Frame::new(parents);
                for (t, _) in assignments {
                    frame.target(t, false);
                }
                body.iter().for_each(|s| frame.stmt(s));
                self.enter_with_children(frame.symbols, body, parents);
            }
            Stmt::SetBlock(_, _, body, _) => {
                let mut frame = Frame::new(parents);
                body.iter().for_each(|s| frame.stmt(s));
                self.enter_with_children(frame.symbols, body, parents);
            }
            Stmt::Block(_, body, _) => {
                self.blocks.push(body.clone());
                // A block's own blocks are compiled as blocks too.
                self.collect_blocks(body);
            }
            Stmt::Data(_)
            | Stmt::Output(..)
            | Stmt::Set(..)
            | Stmt::Break(_)
            | Stmt::Continue(_)
            | Stmt::Fail(..) => {}
        }
    }

    fn collect_blocks(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Block(_, body, _) => {
                    self.blocks.push(body.clone());
                    self.collect_blocks(body);
                }
                Stmt::For { body, else_, .. } => {
                    self.collect_blocks(body);
                    self.collect_blocks(else_);
                }
                Stmt::If { branches, else_ } => {
                    branches.iter().for_each(|b| self.collect_blocks(&b.1));
                    self.collect_blocks(else_);
                }
                Stmt::Macro { body, .. }
                | Stmt::CallBlock { body, .. }
                | Stmt::SetBlock(_, _, body, _)
                | Stmt::FilterBlock(_, body, _)
                | Stmt::With(_, body, _)
                | Stmt::Generation(body, _) => self.collect_blocks(body),
                _ => {}
            }
        }
    }

    fn enter_with_children(&mut self, symbols: Symbols, body: &[Stmt], parents: &[&Symbols]) {
        self.enter(&symbols);
        let chain: Vec<&Symbols> = parents.iter().copied().chain([&symbols]).collect();
        self.inner(body, &chain);
    }
}

/// The names `stmts` (a whole template) read from the context, as jinja2's
/// `meta.find_undeclared_variables` gives them, without the environment's [`GLOBALS`].
pub fn undeclared(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut walker = Walker {
        undeclared: BTreeSet::new(),
        blocks: Vec::new(),
    };
    let root = {
        let mut frame = Frame::new(&[]);
        if reads(stmts, "self") {
            frame.declare_parameter("self");
        }
        stmts.iter().for_each(|s| frame.stmt(s));
        frame.symbols
    };
    walker.enter(&root);
    walker.inner(stmts, &[&root]);
    // Blocks are compiled last, each in a frame of its own with no parent.
    let mut done = 0;
    while done < walker.blocks.len() {
        let body = walker.blocks[done].clone();
        done += 1;
        let mut frame = Frame::new(&[]);
        for special in ["self", "super"] {
            if reads(&body, special) {
                frame.declare_parameter(special);
            }
        }
        body.iter().for_each(|s| frame.stmt(s));
        let symbols = frame.symbols;
        walker.enter(&symbols);
        let mut inner = Walker {
            undeclared: BTreeSet::new(),
            blocks: Vec::new(),
        };
        inner.inner(&body, &[&symbols]);
        walker.undeclared.extend(inner.undeclared);
    }
    walker.undeclared
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(src: &str) -> Vec<String> {
        let tokens = super::super::lexer::tokenize(src).unwrap();
        let stmts = super::super::parser::parse(tokens).unwrap();
        undeclared(&stmts).into_iter().collect()
    }

    #[test]
    fn follows_jinja2s_frames() {
        // Values from jinja2 3.1.6's meta.find_undeclared_variables.
        assert_eq!(vars("{{ a }}{% set b = 1 %}{{ b }}"), ["a"]);
        assert_eq!(vars("{% if x %}{% set y = 1 %}{% endif %}"), ["x", "y"]);
        assert_eq!(
            vars("{% for m in messages %}{{ m.role }}{{ loop.index }}{% endfor %}"),
            ["messages"]
        );
        assert_eq!(
            vars("{% for m in messages %}{{ z }}{% endfor %}{% set z = 1 %}"),
            ["messages"]
        );
        assert_eq!(
            vars("{% macro f(a, b=c) %}{{ a }}{{ d }}{{ caller() }}{% endmacro %}"),
            ["c", "d"]
        );
        assert_eq!(
            vars("{{ range(3) }}{{ raise_exception('x') }}{{ self }}"),
            Vec::<String>::new()
        );
        assert_eq!(
            vars("{% set ns = namespace(a=1) %}{% set ns.a = q %}"),
            ["q"]
        );
    }
}
