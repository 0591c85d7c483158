//! Renders that skip the message-loop iterations a session has already rendered.
//!
//! A chat template renders a conversation as a preamble, one top-level `{% for %}` over the
//! messages, and a tail (the generation prompt). When the loop body's output for a message is
//! proven to depend only on that message, its index and the messages before it (never on
//! how many follow), a longer conversation renders its earlier iterations to the same text,
//! and a session can render only the new ones and splice in the text it kept
//! ([`super::ChatTemplate::render_data_resume`]).
//!
//! The proof ([`analyse`]) is a conservative reading of the parsed template:
//!
//! * the loop iterates a name that holds `messages` or suffix slices of it (`messages[1:]`),
//!   assigned only so before the loop; the render writes how many items it iterated, and a
//!   resumed render is used only when the number of messages before the loop's first item is
//!   the one the kept render had (so iteration `j` is the same message in both);
//! * the body reads the loop variable, `loop.index0`, `index`, `first`, `previtem`, `last`
//!   and `nextitem` (these two change for the last iteration: it is rendered again), the
//!   iterated list only as `list[loop.index0 ± n]` or `list[n]`, and other names only when
//!   they are template arguments or are set before the loop from stable values (arguments,
//!   literals, `messages[0]` before any reassignment) under stable tests;
//! * the body assigns no namespace attribute, defines no macro, calls none, and has no
//!   `break` or `continue` of its own (no state crosses iterations).
//!
//! The resumable variant ([`instrument`]) loops over `list[skip:]` and reads the whole list's
//! counters (`loop.index0 + skip`, `loop.first` as `loop.index0 + skip == 0`, `loop.previtem`
//! from the list), so a render costs the iterations it renders, not the ones it skips.
//!
//! A read `list[loop.index0 - 1]` or `list[n]` that falls outside the list (Python's `-1` reads
//! the last message) is recorded while rendering ([`REL_FLOOR`]): that iteration and all
//! after it are rendered again next time. Marks in the output (private-use characters the
//! template writes: before the loop, at each rendered iteration, and around the iterated
//! count after it) locate the iterations; a render whose marks are not exactly the
//! template's own (caller text held one) is not resumed.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use super::parser::{Args, BinOp, CmpOp, Const, Expr, Stmt, Target};
use super::scope::target_names;

/// Written before the message loop.
pub(super) const LOOP_MARK: char = '\u{F0003}';
/// Written at the start of every iteration rendered (not the skipped ones).
pub(super) const ITER_MARK: char = '\u{F0004}';
/// Written twice after the loop, around the number of items it iterated.
pub(super) const END_MARK: char = '\u{F0005}';
/// The context variable holding how many iterations to skip.
pub(super) const SKIP_NAME: &str = "__cj_skip";
/// The function that records relative reads outside the list ([`REL_FLOOR`]).
pub(super) const REL_NAME: &str = "__cj_rel";

thread_local! {
    /// The first iteration of the current render that read its list outside the list's
    /// bounds (`usize::MAX`: none). Renders run on the calling thread.
    pub(super) static REL_FLOOR: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// What the proof found: where the loop is and what its body reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Proof {
    /// Index of the loop among the top-level statements.
    pub at: usize,
    /// The body reads `loop.last` or `loop.nextitem`: the last kept iteration is rendered
    /// again.
    pub lookahead: bool,
}

/// The names a top-level walk has seen assigned before the loop.
#[derive(Default)]
struct Names {
    /// Names holding `messages` or a suffix slice of it.
    chain: BTreeSet<String>,
    /// Other names assigned before the loop: whether every assignment was stable.
    assigned: BTreeMap<String, bool>,
    /// Names with an attribute assignment anywhere (namespaces: state, never stable).
    namespaces: BTreeSet<String>,
    /// Macro names.
    macros: BTreeSet<String>,
    /// Whether `messages` still holds the caller's list (so `messages[0]` is the first
    /// message, the same in both renders).
    messages_original: bool,
}

impl Names {
    fn stable_name(&self, n: &str) -> bool {
        !self.chain.contains(n)
            && n != "messages"
            && !self.namespaces.contains(n)
            && !self.macros.contains(n)
            && self.assigned.get(n).copied().unwrap_or(true)
    }

    /// Whether `e`'s value is the same in the kept render and a longer one.
    fn stable(&self, e: &Expr) -> bool {
        match e {
            Expr::Name(n) => n != "loop" && self.stable_name(n),
            Expr::Getitem(obj, key)
                if matches!(&**obj, Expr::Name(n) if n == "messages")
                    && matches!(&**key, Expr::Const(Const::Int(0))) =>
            {
                self.messages_original
            }
            Expr::Call(f, _) if matches!(&**f, Expr::Name(n) if n == "joiner" || n == "cycler") => {
                false
            }
            _ => e.children().into_iter().all(|c| self.stable(c)),
        }
    }

    /// Whether `e` is `messages`, a chain name, or a suffix slice of one (`x[2:]`).
    fn chain_value(&self, e: &Expr) -> bool {
        let is_chain =
            |e: &Expr| matches!(e, Expr::Name(n) if n == "messages" || self.chain.contains(n));
        match e {
            Expr::Getitem(obj, key) => {
                is_chain(obj)
                    && matches!(&**key, Expr::Slice(Some(start), None, None)
                        if matches!(&**start, Expr::Const(Const::Int(k)) if *k >= 0))
            }
            other => is_chain(other),
        }
    }
}

/// Prove the template's message loop resumable (see the module documentation).
pub(super) fn analyse(stmts: &[Stmt]) -> Option<Proof> {
    if mentions_reserved(stmts) {
        return None;
    }
    let mut names = Names {
        messages_original: true,
        ..Names::default()
    };
    collect_namespaces(stmts, &mut names.namespaces);
    let mut found = None;
    for (i, s) in stmts.iter().enumerate() {
        if let Stmt::For {
            target: Target::Name(target),
            iter: Expr::Name(list),
            filter: None,
            recursive: false,
            body,
            else_,
            ..
        } = s
        {
            if (list == "messages" || names.chain.contains(list)) && else_.is_empty() {
                let mut lookahead = false;
                let scope = Scope {
                    outer: true,
                    target,
                    list,
                };
                body_ok(body, &names, &scope, &mut lookahead)?;
                found = Some(Proof { at: i, lookahead });
                break;
            }
        }
        preamble(std::slice::from_ref(s), true, &mut names)?;
    }
    found
}

/// Walk top-level statements before the loop, recording assignments (`control`: whether the
/// tests leading here are stable). `None`: `messages` gets a value that is not a suffix of
/// the caller's list.
fn preamble(stmts: &[Stmt], control: bool, names: &mut Names) -> Option<()> {
    for s in stmts {
        match s {
            Stmt::Set(Target::Name(n), value, _) => {
                if names.chain_value(value)
                    && (n == "messages"
                        || names.chain.contains(n)
                        || !names.assigned.contains_key(n))
                {
                    if n == "messages" {
                        names.messages_original = false;
                    }
                    names.chain.insert(n.clone());
                } else {
                    if n == "messages" {
                        return None;
                    }
                    names.chain.remove(n);
                    let stable = control && names.stable(value);
                    let was = names.assigned.get(n).copied().unwrap_or(true);
                    names.assigned.insert(n.clone(), was && stable);
                }
            }
            Stmt::Set(Target::Tuple(_), _, _) | Stmt::SetBlock(Target::Tuple(_), ..) => {
                let mut targets = Vec::new();
                if let Stmt::Set(t, ..) | Stmt::SetBlock(t, ..) = s {
                    target_names(t, &mut targets);
                }
                for n in targets {
                    if n == "messages" {
                        return None;
                    }
                    names.chain.remove(n);
                    names.assigned.insert(n.to_string(), false);
                }
            }
            Stmt::SetBlock(Target::Name(n), ..) => {
                if n == "messages" {
                    return None;
                }
                names.chain.remove(n);
                names.assigned.insert(n.clone(), false);
            }
            Stmt::If { branches, else_ } => {
                let mut c = control;
                for (test, body, _) in branches {
                    c = c && names.stable(test);
                    preamble(body, c, names)?;
                }
                preamble(else_, c, names)?;
            }
            Stmt::Macro { name, .. } => {
                names.macros.insert(name.clone());
            }
            // Scoped: what they assign stays inside (namespace attributes are collected apart).
            Stmt::For { .. }
            | Stmt::CallBlock { .. }
            | Stmt::FilterBlock(..)
            | Stmt::With(..)
            | Stmt::Block(..)
            | Stmt::Generation(..)
            | Stmt::Set(Target::NsRef(..), ..)
            | Stmt::SetBlock(Target::NsRef(..), ..)
            | Stmt::Data(_)
            | Stmt::Output(..)
            | Stmt::Break(_)
            | Stmt::Continue(_)
            | Stmt::Fail(..) => {}
        }
    }
    Some(())
}

/// Every name given an attribute (`{% set ns.x = ... %}`) anywhere.
fn collect_namespaces(stmts: &[Stmt], out: &mut BTreeSet<String>) {
    for s in stmts {
        match s {
            Stmt::Set(Target::NsRef(n, _), ..) | Stmt::SetBlock(Target::NsRef(n, _), ..) => {
                out.insert(n.clone());
            }
            _ => {}
        }
        for body in bodies(s) {
            collect_namespaces(body, out);
        }
    }
}

/// The statement lists inside `s`.
fn bodies(s: &Stmt) -> Vec<&[Stmt]> {
    match s {
        Stmt::For { body, else_, .. } => vec![body, else_],
        Stmt::If { branches, else_ } => branches
            .iter()
            .map(|(_, b, _)| &b[..])
            .chain(std::iter::once(&else_[..]))
            .collect(),
        Stmt::SetBlock(_, _, body, _)
        | Stmt::Macro { body, .. }
        | Stmt::CallBlock { body, .. }
        | Stmt::FilterBlock(_, body, _)
        | Stmt::With(_, body, _)
        | Stmt::Block(_, body, _)
        | Stmt::Generation(body, _) => vec![body],
        _ => Vec::new(),
    }
}

/// Whether the template names one of chatids' own helpers (`__cj_...`).
fn mentions_reserved(stmts: &[Stmt]) -> bool {
    fn expr(e: &Expr) -> bool {
        matches!(e, Expr::Name(n) | Expr::Getattr(_, n) if n.starts_with("__cj_"))
            || e.children().into_iter().any(expr)
    }
    stmts.iter().any(|s| {
        let exprs: Vec<&Expr> = match s {
            Stmt::Output(es, _) => es.iter().collect(),
            Stmt::For { iter, filter, .. } => std::iter::once(iter).chain(filter).collect(),
            Stmt::If { branches, .. } => branches.iter().map(|(t, _, _)| t).collect(),
            Stmt::Set(_, e, _) | Stmt::FilterBlock(e, _, _) => vec![e],
            Stmt::SetBlock(_, f, _, _) => f.iter().collect(),
            Stmt::CallBlock { call, .. } => vec![call],
            Stmt::With(a, _, _) => a.iter().map(|(_, e)| e).collect(),
            _ => Vec::new(),
        };
        exprs.into_iter().any(expr) || bodies(s).into_iter().any(mentions_reserved)
    })
}

/// Where a body statement sits: in the message loop's own scope (`outer`: `loop` is the
/// message loop) or in a loop nested in it.
#[derive(Clone, Copy)]
struct Scope<'a> {
    outer: bool,
    target: &'a str,
    list: &'a str,
}

fn body_ok(stmts: &[Stmt], names: &Names, scope: &Scope<'_>, lookahead: &mut bool) -> Option<()> {
    for s in stmts {
        match s {
            Stmt::Data(_) | Stmt::Fail(..) => {}
            Stmt::Output(es, _) => {
                for e in es {
                    expr_ok(e, names, scope, lookahead)?;
                }
            }
            Stmt::For {
                target,
                iter,
                filter,
                recursive,
                body,
                else_,
                ..
            } => {
                if *recursive {
                    return None;
                }
                expr_ok(iter, names, scope, lookahead)?;
                let mut bound = Vec::new();
                target_names(target, &mut bound);
                if bound.iter().any(|&n| n == scope.list || n == scope.target) {
                    return None;
                }
                let inner = Scope {
                    outer: false,
                    ..*scope
                };
                if let Some(f) = filter {
                    // Which loop's `loop` a filter reads is left unproven.
                    let mut read = Vec::new();
                    f.names(&mut read);
                    if read.contains(&"loop") {
                        return None;
                    }
                    expr_ok(f, names, &inner, lookahead)?;
                }
                body_ok(body, names, &inner, lookahead)?;
                body_ok(else_, names, scope, lookahead)?;
            }
            Stmt::If { branches, else_ } => {
                for (test, body, _) in branches {
                    expr_ok(test, names, scope, lookahead)?;
                    body_ok(body, names, scope, lookahead)?;
                }
                body_ok(else_, names, scope, lookahead)?;
            }
            Stmt::Set(target, value, _) => {
                let mut bound = Vec::new();
                target_names(target, &mut bound);
                if matches!(target, Target::NsRef(..))
                    || bound.iter().any(|&n| n == scope.list || n == "loop")
                {
                    return None;
                }
                expr_ok(value, names, scope, lookahead)?;
            }
            Stmt::SetBlock(target, filter, body, _) => {
                let mut bound = Vec::new();
                target_names(target, &mut bound);
                if matches!(target, Target::NsRef(..))
                    || bound.iter().any(|&n| n == scope.list || n == "loop")
                {
                    return None;
                }
                if let Some(f) = filter {
                    expr_ok(f, names, scope, lookahead)?;
                }
                body_ok(body, names, scope, lookahead)?;
            }
            Stmt::FilterBlock(f, body, _) => {
                expr_ok(f, names, scope, lookahead)?;
                body_ok(body, names, scope, lookahead)?;
            }
            Stmt::With(assignments, body, _) => {
                for (t, e) in assignments {
                    let mut bound = Vec::new();
                    target_names(t, &mut bound);
                    if bound.iter().any(|&n| n == scope.list || n == "loop") {
                        return None;
                    }
                    expr_ok(e, names, scope, lookahead)?;
                }
                body_ok(body, names, scope, lookahead)?;
            }
            Stmt::Generation(body, _) => body_ok(body, names, scope, lookahead)?,
            Stmt::Break(_) | Stmt::Continue(_) if !scope.outer => {}
            Stmt::Break(_)
            | Stmt::Continue(_)
            | Stmt::Macro { .. }
            | Stmt::CallBlock { .. }
            | Stmt::Block(..) => return None,
        }
    }
    Some(())
}

/// `loop.index0` / `loop.index`, alone or plus or minus an integer literal, or an integer
/// literal (a read outside the list is recorded, [`REL_FLOOR`]).
fn relative_index(e: &Expr) -> bool {
    let counter = |e: &Expr| {
        matches!(e, Expr::Getattr(l, a) if matches!(&**l, Expr::Name(n) if n == "loop")
            && (a == "index0" || a == "index"))
    };
    let int = |e: &Expr| matches!(e, Expr::Const(Const::Int(_)));
    match e {
        Expr::BinOp(BinOp::Add, a, b) => (counter(a) && int(b)) || (int(a) && counter(b)),
        Expr::BinOp(BinOp::Sub, a, b) => counter(a) && int(b),
        other => counter(other) || int(other),
    }
}

fn expr_ok(e: &Expr, names: &Names, scope: &Scope<'_>, lookahead: &mut bool) -> Option<()> {
    let ok = match e {
        Expr::Name(n) if n == "loop" => !scope.outer,
        Expr::Name(n) if n == scope.target => true,
        Expr::Name(n) => names.stable_name(n),
        Expr::Getattr(l, attr) if scope.outer && matches!(&**l, Expr::Name(n) if n == "loop") => {
            match attr.as_str() {
                "index0" | "index" | "first" | "previtem" => true,
                "last" | "nextitem" => {
                    *lookahead = true;
                    true
                }
                _ => false,
            }
        }
        Expr::Getitem(obj, key)
            if scope.outer && matches!(&**obj, Expr::Name(n) if n == scope.list) =>
        {
            return relative_index(key).then_some(());
        }
        Expr::Call(f, _) if matches!(&**f, Expr::Name(n) if names.macros.contains(n)) => false,
        _ => {
            for c in e.children() {
                expr_ok(c, names, scope, lookahead)?;
            }
            true
        }
    };
    ok.then_some(())
}

/// The statements of the resumable template: `stmts` (the generation mark already in) with
/// the marks around the loop at `proof.at`, the loop over its list from item [`SKIP_NAME`] on
/// (its counters shifted to the whole list's), and its relative reads recorded.
pub(super) fn instrument(stmts: &[Stmt], proof: &Proof) -> Option<Vec<Stmt>> {
    let mut out = stmts.to_vec();
    let Some(Stmt::For {
        iter, body, line, ..
    }) = out.get_mut(proof.at)
    else {
        return None;
    };
    let Expr::Name(list) = iter else {
        return None;
    };
    let (list, line) = (list.clone(), *line);
    let loop_attr = |a: &str| Expr::Getattr(Box::new(Expr::Name("loop".into())), a.into());
    // The loop iterates `list[__cj_skip:]`; its body sees the whole list's counters.
    *iter = Expr::Getitem(
        Box::new(Expr::Name(list.clone())),
        Box::new(Expr::Slice(
            Some(Box::new(Expr::Name(SKIP_NAME.into()))),
            None,
            None,
        )),
    );
    for_each_outer_expr(body, &mut |e| rewrite_body_expr(e, &list, &loop_attr));
    body.insert(0, Stmt::Data(ITER_MARK.to_string()));
    let after = [
        Stmt::Data(END_MARK.to_string()),
        Stmt::Output(
            vec![Expr::Filter(
                Some(Box::new(Expr::Name(list))),
                "length".into(),
                Args::default(),
            )],
            line,
        ),
        Stmt::Data(END_MARK.to_string()),
    ];
    out.splice(proof.at + 1..proof.at + 1, after);
    out.insert(proof.at, Stmt::Data(LOOP_MARK.to_string()));
    Some(out)
}

/// Call `f` on every expression of `stmts` evaluated in the message loop's own scope (not
/// inside a nested loop's body or filter, where `loop` is that loop's).
fn for_each_outer_expr(stmts: &mut [Stmt], f: &mut dyn FnMut(&mut Expr)) {
    for s in stmts {
        match s {
            Stmt::Output(es, _) => es.iter_mut().for_each(&mut *f),
            Stmt::For { iter, else_, .. } => {
                f(iter);
                for_each_outer_expr(else_, f);
            }
            Stmt::If { branches, else_ } => {
                for (t, b, _) in branches {
                    f(t);
                    for_each_outer_expr(b, f);
                }
                for_each_outer_expr(else_, f);
            }
            Stmt::Set(_, e, _) => f(e),
            Stmt::SetBlock(_, filter, body, _) => {
                if let Some(e) = filter {
                    f(e);
                }
                for_each_outer_expr(body, f);
            }
            Stmt::FilterBlock(e, body, _) => {
                f(e);
                for_each_outer_expr(body, f);
            }
            Stmt::With(a, body, _) => {
                a.iter_mut().for_each(|(_, e)| f(e));
                for_each_outer_expr(body, f);
            }
            Stmt::Generation(body, _) => for_each_outer_expr(body, f),
            _ => {}
        }
    }
}

/// Rewrite an expression of the loop's body for the loop over `list[skip:]`: the counters
/// `index0`, `index` and `length` become the whole list's (plus `skip`), `first` and
/// `previtem` are computed from the shifted index (`last` and `nextitem` are the same on the
/// slice), and a relative read `list[i]` goes through [`REL_NAME`] with the shifted counters.
fn rewrite_body_expr(e: &mut Expr, list: &str, loop_attr: &dyn Fn(&str) -> Expr) {
    let plus_skip = |a: &str| {
        Expr::BinOp(
            BinOp::Add,
            Box::new(loop_attr(a)),
            Box::new(Expr::Name(SKIP_NAME.into())),
        )
    };
    match e {
        Expr::Getitem(obj, key) if matches!(&**obj, Expr::Name(n) if n == list) => {
            // The proof allows only a counter plus or minus a literal as the index.
            rewrite_body_expr(key, list, loop_attr);
            let index = std::mem::replace(&mut **key, Expr::Const(Const::None));
            **key = Expr::Call(
                Box::new(Expr::Name(REL_NAME.into())),
                Args {
                    args: vec![index, plus_skip("index0"), plus_skip("length")],
                    ..Args::default()
                },
            );
        }
        Expr::Getattr(l, attr) if matches!(&**l, Expr::Name(n) if n == "loop") => {
            match attr.as_str() {
                "index0" | "index" | "length" => *e = plus_skip(attr),
                "first" => {
                    *e = Expr::Compare(
                        Box::new(plus_skip("index0")),
                        vec![(CmpOp::Eq, Expr::Const(Const::Int(0)))],
                    )
                }
                // `list[index0 + skip - 1] if index0 + skip > 0` (else undefined, as jinja2's).
                "previtem" => {
                    *e = Expr::CondExpr(
                        Box::new(Expr::Compare(
                            Box::new(plus_skip("index0")),
                            vec![(CmpOp::Gt, Expr::Const(Const::Int(0)))],
                        )),
                        Box::new(Expr::Getitem(
                            Box::new(Expr::Name(list.into())),
                            Box::new(Expr::BinOp(
                                BinOp::Sub,
                                Box::new(plus_skip("index0")),
                                Box::new(Expr::Const(Const::Int(1))),
                            )),
                        )),
                        None,
                    )
                }
                _ => {}
            }
        }
        _ => e
            .children_mut()
            .into_iter()
            .for_each(|c| rewrite_body_expr(c, list, loop_attr)),
    }
}

/// What a session keeps of a render to resume the next one: the text without the generation
/// prompt up to the loop's end, where each iteration starts in it, and what the next render
/// may skip.
#[derive(Debug, Clone)]
pub struct LoopState {
    text: String,
    /// Where each iteration starts in `text`; `starts[0]` is where the loop starts.
    starts: Vec<usize>,
    /// Messages before the loop's first item (`messages` minus the items iterated).
    offset: usize,
    /// How many iterations the next render may take from `text`.
    pub(super) reusable: usize,
}

/// A resumable render, marks removed.
#[derive(Debug)]
pub struct Resumed {
    /// The whole text.
    pub text: String,
    /// Where the generation prompt starts in it.
    pub at: usize,
    /// How many leading bytes of `text` are the kept render's text, taken from it as they
    /// were (its text before the loop and the skipped iterations; 0 where it was not kept,
    /// or the text before the loop was rendered anew and differs). At most `at`.
    pub known: usize,
    /// What the next render resumes from.
    pub state: LoopState,
}

/// The marks of a rendered text, found and removed.
struct Marked {
    text: String,
    generation: usize,
    loop_start: usize,
    /// Where each rendered iteration starts.
    iterations: Vec<usize>,
    loop_end: usize,
    count: usize,
}

/// Remove the marks from `raw`, rendered with `skip` iterations skipped; `None` unless they
/// are exactly the template's own: one generation mark, one loop mark, the iterated count
/// between two end marks, an iteration mark for each iteration from `skip` on, in order.
fn unmark(raw: &str, generation_mark: char, skip: usize) -> Option<Marked> {
    let mut text = String::with_capacity(raw.len());
    let (mut generation, mut loop_start) = (Vec::new(), Vec::new());
    let (mut iterations, mut ends) = (Vec::new(), Vec::new());
    let mut last = 0;
    let bytes = raw.as_bytes();
    let mut from = 0;
    // Every mark is U+F0002..=U+F0005: F3 B0 80 82..=85.
    while let Some(i) = memchr::memchr(0xF3, &bytes[from..]) {
        let at = from + i;
        from = at + 1;
        let Some(c) = raw.get(at..).and_then(|s| s.chars().next()) else {
            continue;
        };
        let list = match c {
            c if c == generation_mark => &mut generation,
            LOOP_MARK => &mut loop_start,
            ITER_MARK => &mut iterations,
            END_MARK => &mut ends,
            _ => continue,
        };
        text.push_str(&raw[last..at]);
        list.push(text.len());
        last = at + c.len_utf8();
        from = last;
    }
    text.push_str(&raw[last..]);
    let ([generation], [loop_start], [end1, end2]) = (&generation[..], &loop_start[..], &ends[..])
    else {
        return None;
    };
    let (loop_start, end1, end2, generation) = (*loop_start, *end1, *end2, *generation);
    let count: usize = text.get(end1..end2)?.parse().ok()?;
    // Skipped iterations write nothing: the first rendered one starts the loop.
    if iterations.len() != count.checked_sub(skip)?
        || iterations.first().is_some_and(|&s| s != loop_start)
        || (iterations.is_empty() && loop_start != end1)
        || iterations.last().is_some_and(|&s| s > end1)
        || end1 > generation
        || loop_start > end1
    {
        return None;
    }
    // The count is the template's, not part of the output.
    text.replace_range(end1..end2, "");
    Some(Marked {
        text,
        generation: generation - (end2 - end1),
        loop_start,
        iterations,
        loop_end: end1,
        count,
    })
}

/// How many iterations a render may skip against `kept` (0: render all).
/// (`reusable` already leaves out the last iteration when the body reads ahead.)
pub(super) fn skip_of(kept: Option<&LoopState>) -> usize {
    kept.map_or(0, |k| k.reusable)
}

/// Room a kept text leaves after its end, so that the next render, which extends it, writes
/// into it without moving it (see [`assemble`]).
fn spare(len: usize) -> usize {
    len / 4 + (16 << 10)
}

/// Assemble the resumed render: `raw` rendered with `skip` iterations skipped, spliced with
/// `kept`'s text of those iterations. `None` when the marks are not the template's own, or
/// the loop's items do not line up with the kept ones (then render again without skipping).
/// Where the text before the loop is the kept one's (it usually is: the same arguments and
/// first messages), the kept text is extended in place instead of copied.
pub(super) fn assemble(
    raw: &str,
    generation_mark: char,
    messages: usize,
    skip: usize,
    kept: Option<LoopState>,
    lookahead: bool,
    floor: usize,
) -> Option<Resumed> {
    let m = unmark(raw, generation_mark, skip)?;
    let offset = messages.checked_sub(m.count)?;
    let state_of = |text: &str, starts: Vec<usize>| {
        let reusable = m.count.saturating_sub(usize::from(lookahead)).min(floor);
        let mut kept = String::with_capacity(text.len() + spare(text.len()));
        kept.push_str(text);
        LoopState {
            text: kept,
            starts,
            offset,
            reusable,
        }
    };
    if skip == 0 {
        let text = &m.text[..m.loop_end];
        let state = state_of(text, m.iterations.clone());
        return Some(Resumed {
            at: m.generation,
            text: m.text,
            known: 0,
            state,
        });
    }
    let kept = kept?;
    if kept.offset != offset || kept.starts.len() < skip {
        return None;
    }
    let kept_from = kept.starts[0];
    let kept_to = kept.starts.get(skip).copied().unwrap_or(kept.text.len());
    let shift = kept_to - kept_from;
    let mut starts = Vec::with_capacity(m.count);
    starts.extend(
        kept.starts[..skip]
            .iter()
            .map(|&s| s - kept_from + m.loop_start),
    );
    starts.extend(m.iterations.iter().map(|&s| s + shift));
    // The text before the loop, then the kept iterations, then the rendered rest.
    let (text, known) = if kept.text[..kept_from] == m.text[..m.loop_start] {
        let mut text = kept.text;
        text.truncate(kept_to);
        text.push_str(&m.text[m.loop_start..]);
        (text, kept_to)
    } else {
        let spliced = &kept.text[kept_from..kept_to];
        let mut text = String::with_capacity(m.text.len() + spliced.len());
        text.push_str(&m.text[..m.loop_start]);
        text.push_str(spliced);
        text.push_str(&m.text[m.loop_start..]);
        (text, 0)
    };
    let state = state_of(&text[..m.loop_end + shift], starts);
    Some(Resumed {
        at: m.generation + shift,
        text,
        known,
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proof(src: &str) -> Option<Proof> {
        let tokens = super::super::lexer::tokenize(src).unwrap();
        let stmts = super::super::parser::parse(tokens).unwrap();
        analyse(&stmts)
    }

    #[test]
    fn proves_message_local_loops_and_refuses_state() {
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        assert_eq!(
            proof(chatml),
            Some(Proof {
                at: 0,
                lookahead: false
            })
        );
        let qwen = "{% for m in messages %}{% if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}A{% endif %}{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}B{% endif %}{% endfor %}";
        assert_eq!(
            proof(qwen),
            Some(Proof {
                at: 0,
                lookahead: true
            })
        );
        let system = "{% if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% set loop_messages = messages[1:] %}{% else %}{% set sys = '' %}{% set loop_messages = messages %}{% endif %}{% for m in loop_messages %}{{ sys if loop.first }}{{ m.content }}{% endfor %}";
        assert_eq!(
            proof(system),
            Some(Proof {
                at: 1,
                lookahead: false
            })
        );
        for refused in [
            // How many messages follow.
            "{% for m in messages %}{{ loop.length }}{% endfor %}",
            // Counters the resumed variant does not shift, and a nested filter reading `loop`.
            "{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}",
            "{% for m in messages %}{% for c in m.content if loop.index0 %}{{ c }}{% endfor %}{% endfor %}",
            "{% for m in messages %}{{ loop.revindex }}{% endfor %}",
            "{% for m in messages %}{{ messages | length }}{% endfor %}",
            "{% for m in messages %}{{ messages[-1].content }}{% endfor %}",
            // State across iterations.
            "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ ns.n }}{% endfor %}",
            "{% for m in messages %}{% if m.role == 'x' %}{% break %}{% endif %}{{ m.content }}{% endfor %}",
            // A name set from something that grows.
            "{% set n = messages | length %}{% for m in messages %}{{ n }}{% endfor %}",
            "{% if messages | length > 2 %}{% set x = 1 %}{% else %}{% set x = 2 %}{% endif %}{% for m in messages %}{{ x }}{% endfor %}",
            "{% set last = messages[-1] %}{% for m in messages %}{{ last.content }}{% endfor %}",
            // messages reassigned otherwise than a suffix.
            "{% set messages = messages[:-1] %}{% for m in messages %}{{ m.content }}{% endfor %}",
            // A macro (its body is not read).
            "{% macro f(x) %}{{ x }}{% endmacro %}{% for m in messages %}{{ f(m) }}{% endfor %}",
            // A stateful helper.
            "{% set j = joiner() %}{% for m in messages %}{{ j() }}{% endfor %}",
        ] {
            assert_eq!(proof(refused), None, "{refused}");
        }
    }
}
