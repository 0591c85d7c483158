//! jinja2's frames and symbol tables, as far as the emitter needs them.
//!
//! jinja2 compiles each loop body, macro, call block and `set`/`filter`/`with` block to a frame
//! of its own and resolves names per frame (`jinja2/idtracking.py`). These helpers answer the
//! questions the emitter asks about a frame's statements: which names it refers to at its own
//! level, which it assigns before reading them, which macros exist, and where `break` and
//! `continue` are.

use super::parser::{Expr, Stmt, Target};

/// The names of all macros defined in `stmts`.
pub fn collect_macros(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        match s {
            Stmt::Macro { name, body, .. } => {
                out.push(name.clone());
                collect_macros(body, out);
            }
            Stmt::For { body, else_, .. } => {
                collect_macros(body, out);
                collect_macros(else_, out);
            }
            Stmt::If { branches, else_ } => {
                branches.iter().for_each(|b| collect_macros(&b.1, out));
                collect_macros(else_, out);
            }
            Stmt::SetBlock(_, _, body, _)
            | Stmt::CallBlock { body, .. }
            | Stmt::FilterBlock(_, body, _)
            | Stmt::With(_, body, _)
            | Stmt::Block(_, body, _)
            | Stmt::Generation(body, _) => collect_macros(body, out),
            _ => {}
        }
    }
}

/// Every name read anywhere in `stmts`, inner frames included (jinja2's `find_undeclared`,
/// which decides whether a macro takes `varargs`, `kwargs` and `caller`).
pub fn all_reads<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a str>) {
    for s in stmts {
        match s {
            Stmt::Output(exprs, _) => exprs.iter().for_each(|e| e.names(out)),
            Stmt::Set(_, e, _) => e.names(out),
            Stmt::SetBlock(_, f, body, _) => {
                if let Some(f) = f {
                    f.names(out);
                }
                all_reads(body, out);
            }
            Stmt::If { branches, else_ } => {
                for (test, body, _) in branches {
                    test.names(out);
                    all_reads(body, out);
                }
                all_reads(else_, out);
            }
            Stmt::For {
                iter,
                filter,
                body,
                else_,
                ..
            } => {
                iter.names(out);
                if let Some(f) = filter {
                    f.names(out);
                }
                all_reads(body, out);
                all_reads(else_, out);
            }
            Stmt::Macro { params, body, .. } => {
                params.iter().flat_map(|p| &p.1).for_each(|d| d.names(out));
                all_reads(body, out);
            }
            Stmt::CallBlock {
                params, call, body, ..
            } => {
                params.iter().flat_map(|p| &p.1).for_each(|d| d.names(out));
                call.names(out);
                all_reads(body, out);
            }
            Stmt::FilterBlock(f, body, _) => {
                f.names(out);
                all_reads(body, out);
            }
            Stmt::With(assignments, body, _) => {
                assignments.iter().for_each(|(_, v)| v.names(out));
                all_reads(body, out);
            }
            Stmt::Generation(body, _) => all_reads(body, out),
            // jinja2's visitor skips blocks.
            Stmt::Block(..)
            | Stmt::Data(_)
            | Stmt::Break(_)
            | Stmt::Continue(_)
            | Stmt::Fail(..) => {}
        }
    }
}

/// The template's macros whose body reads `varargs` or `kwargs` (so that they take extra
/// positional or keyword arguments).
pub fn collect_varargs_macros(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        match s {
            Stmt::Macro { name, body, .. } => {
                let mut reads = Vec::new();
                all_reads(body, &mut reads);
                if reads.iter().any(|n| matches!(*n, "varargs" | "kwargs")) {
                    out.push(name.clone());
                }
                collect_varargs_macros(body, out);
            }
            Stmt::For { body, else_, .. } => {
                collect_varargs_macros(body, out);
                collect_varargs_macros(else_, out);
            }
            Stmt::If { branches, else_ } => {
                branches
                    .iter()
                    .for_each(|b| collect_varargs_macros(&b.1, out));
                collect_varargs_macros(else_, out);
            }
            Stmt::SetBlock(_, _, body, _)
            | Stmt::CallBlock { body, .. }
            | Stmt::FilterBlock(_, body, _)
            | Stmt::With(_, body, _)
            | Stmt::Block(_, body, _)
            | Stmt::Generation(body, _) => collect_varargs_macros(body, out),
            _ => {}
        }
    }
}

/// Every name the frame of `stmts` refers to at its own level (not inside inner frames).
pub fn level_refs(stmts: &[Stmt]) -> Vec<&str> {
    let mut out = Vec::new();
    stmts.iter().for_each(|s| frame_refs(s, &mut out));
    out
}

/// The names one statement refers to at its frame's level.
fn frame_refs<'a>(s: &'a Stmt, out: &mut Vec<&'a str>) {
    match s {
        Stmt::Output(exprs, _) => exprs.iter().for_each(|e| e.names(out)),
        Stmt::Set(t, e, _) => {
            e.names(out);
            target_names(t, out);
        }
        Stmt::SetBlock(t, _, _, _) => target_names(t, out),
        Stmt::If { branches, else_ } => {
            for (test, body, _) in branches {
                test.names(out);
                body.iter().for_each(|b| frame_refs(b, out));
            }
            else_.iter().for_each(|b| frame_refs(b, out));
        }
        Stmt::For { iter, else_, .. } => {
            iter.names(out);
            else_.iter().for_each(|b| frame_refs(b, out));
        }
        Stmt::Macro { name, .. } => out.push(name),
        Stmt::CallBlock { call, .. } => call.names(out),
        Stmt::FilterBlock(f, _, _) => f.names(out),
        Stmt::With(assignments, _, _) => assignments.iter().for_each(|(_, v)| v.names(out)),
        _ => {}
    }
}

/// The names a target binds (a namespace's own name for `ns.attr`).
pub(super) fn target_names<'a>(t: &'a Target, out: &mut Vec<&'a str>) {
    match t {
        Target::Name(n) => out.push(n),
        Target::NsRef(n, _) => out.push(n),
        Target::Tuple(items) => items.iter().for_each(|i| target_names(i, out)),
    }
}

/// Names whose first reference in the frame of `stmts` is an unconditional `{% set %}`
/// (jinja2's `VAR_LOAD_UNDEFINED` when no enclosing frame refers to them).
pub fn stored_first(stmts: &[Stmt]) -> Vec<String> {
    let mut seen: Vec<&str> = Vec::new();
    let mut first: Vec<String> = Vec::new();
    for s in stmts {
        match s {
            Stmt::Set(t, e, _) => {
                e.names(&mut seen);
                let mut stored = Vec::new();
                if let Target::NsRef(n, _) = t {
                    seen.push(n);
                } else {
                    target_names(t, &mut stored);
                }
                for n in stored {
                    if !seen.contains(&n) {
                        first.push(n.to_string());
                    }
                    seen.push(n);
                }
            }
            Stmt::SetBlock(t, _, _, _) => {
                let mut stored = Vec::new();
                target_names(t, &mut stored);
                for n in stored {
                    if !seen.contains(&n) {
                        first.push(n.to_string());
                    }
                    seen.push(n);
                }
            }
            other => frame_refs(other, &mut seen),
        }
    }
    first
}

/// Names assigned by `{% set %}` in `stmts` (not inside macros), and names read inside the
/// macros and call blocks defined there.
pub fn loop_names<'a>(
    stmts: &'a [Stmt],
    sets: &mut Vec<&'a str>,
    macro_reads: &mut Vec<&'a str>,
    in_macro: bool,
) {
    fn target<'a>(t: &'a Target, out: &mut Vec<&'a str>) {
        match t {
            Target::Name(n) => out.push(n),
            Target::Tuple(items) => items.iter().for_each(|i| target(i, out)),
            Target::NsRef(..) => {}
        }
    }
    for s in stmts {
        let reads = |e: &'a Expr, out: &mut Vec<&'a str>| {
            if in_macro {
                e.names(out)
            }
        };
        match s {
            Stmt::Output(exprs, _) => exprs.iter().for_each(|e| reads(e, macro_reads)),
            Stmt::Set(t, e, _) => {
                if !in_macro {
                    target(t, sets);
                }
                reads(e, macro_reads);
            }
            Stmt::SetBlock(t, _, body, _) => {
                if !in_macro {
                    target(t, sets);
                }
                loop_names(body, sets, macro_reads, in_macro);
            }
            Stmt::For {
                iter,
                filter,
                body,
                else_,
                ..
            } => {
                reads(iter, macro_reads);
                if let Some(f) = filter {
                    reads(f, macro_reads);
                }
                loop_names(body, sets, macro_reads, in_macro);
                loop_names(else_, sets, macro_reads, in_macro);
            }
            Stmt::If { branches, else_ } => {
                for (test, body, _) in branches {
                    reads(test, macro_reads);
                    loop_names(body, sets, macro_reads, in_macro);
                }
                loop_names(else_, sets, macro_reads, in_macro);
            }
            Stmt::Macro { body, .. } | Stmt::CallBlock { body, .. } => {
                loop_names(body, sets, macro_reads, true)
            }
            Stmt::FilterBlock(_, body, _)
            | Stmt::With(_, body, _)
            | Stmt::Block(_, body, _)
            | Stmt::Generation(body, _) => loop_names(body, sets, macro_reads, in_macro),
            _ => {}
        }
    }
}

/// The names a loop (or `with`) target binds, plus `loop`.
pub fn loop_declared(t: &Target) -> Vec<String> {
    let mut out = vec!["loop".to_string()];
    fn walk(t: &Target, out: &mut Vec<String>) {
        match t {
            Target::Name(n) => out.push(n.clone()),
            Target::NsRef(n, _) => out.push(n.clone()),
            Target::Tuple(items) => items.iter().for_each(|i| walk(i, out)),
        }
    }
    walk(t, &mut out);
    out
}

/// Whether `stmts` contain a `break` or `continue` of the loop they are in.
pub fn has_loop_control(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Break(_) | Stmt::Continue(_) => true,
        Stmt::If { branches, else_ } => {
            branches.iter().any(|b| has_loop_control(&b.1)) || has_loop_control(else_)
        }
        // A nested loop's own controls stay in it; its `else` belongs to this loop.
        Stmt::For { else_, .. } => has_loop_control(else_),
        Stmt::SetBlock(_, _, body, _) | Stmt::FilterBlock(_, body, _) | Stmt::With(_, body, _) => {
            has_loop_control(body)
        }
        _ => false,
    })
}
