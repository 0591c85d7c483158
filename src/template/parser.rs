//! jinja2's parser (`jinja2/parser.py`): the same grammar, precedence and statement set,
//! with the extensions transformers loads (`{% generation %}`, `{% break %}`, `{% continue %}`).

use super::lexer::{SyntaxError, Tok, Token};

/// A literal.
#[derive(Debug, Clone, PartialEq)]
pub enum Const {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
}

/// A comparison operator of a [`Expr::Compare`] chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    LtEq,
    Gt,
    GtEq,
    In,
    NotIn,
}

/// A binary arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
}

/// Arguments of a call, filter or test.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Args {
    pub args: Vec<Expr>,
    pub kwargs: Vec<(String, Expr)>,
    /// `*expr`: more positional arguments, from an iterable.
    pub dyn_args: Option<Box<Expr>>,
    /// `**expr`: more keyword arguments, from a mapping.
    pub dyn_kwargs: Option<Box<Expr>>,
}

impl Args {
    /// Whether the call has `*args` or `**kwargs`.
    pub fn dynamic(&self) -> bool {
        self.dyn_args.is_some() || self.dyn_kwargs.is_some()
    }

    /// Every argument expression, in source order of kinds (positional, keyword, `*`, `**`).
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.args
            .iter()
            .chain(self.kwargs.iter().map(|(_, x)| x))
            .chain(self.dyn_args.as_deref())
            .chain(self.dyn_kwargs.as_deref())
    }

    /// [`Args::exprs`], mutable.
    pub fn exprs_mut(&mut self) -> impl Iterator<Item = &mut Expr> {
        self.args
            .iter_mut()
            .chain(self.kwargs.iter_mut().map(|(_, x)| x))
            .chain(self.dyn_args.as_deref_mut())
            .chain(self.dyn_kwargs.as_deref_mut())
    }
}

/// An expression node.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::enum_variant_names)] // jinja2's node names
pub enum Expr {
    Name(String),
    Const(Const),
    Tuple(Vec<Expr>),
    List(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    CondExpr(Box<Expr>, Box<Expr>, Option<Box<Expr>>),
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Compare(Box<Expr>, Vec<(CmpOp, Expr)>),
    BinOp(BinOp, Box<Expr>, Box<Expr>),
    Concat(Vec<Expr>),
    Neg(Box<Expr>),
    Pos(Box<Expr>),
    Getattr(Box<Expr>, String),
    Getitem(Box<Expr>, Box<Expr>),
    Slice(Option<Box<Expr>>, Option<Box<Expr>>, Option<Box<Expr>>),
    Call(Box<Expr>, Args),
    /// `expr|name(args)`; `expr` is `None` at the head of a `{% filter %}` / `{% set %}` chain.
    Filter(Option<Box<Expr>>, String, Args),
    Test(Box<Expr>, String, Args),
}

/// An assignment target.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Name(String),
    Tuple(Vec<Target>),
    /// `ns.attr` in `{% set %}`.
    NsRef(String, String),
}

/// A statement node; `line` fields are 1-based source lines.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    Data(String),
    Output(Vec<Expr>, usize),
    For {
        target: Target,
        iter: Expr,
        filter: Option<Expr>,
        recursive: bool,
        body: Vec<Stmt>,
        else_: Vec<Stmt>,
        line: usize,
    },
    If {
        branches: Vec<(Expr, Vec<Stmt>, usize)>,
        else_: Vec<Stmt>,
    },
    Set(Target, Expr, usize),
    SetBlock(Target, Option<Expr>, Vec<Stmt>, usize),
    Macro {
        name: String,
        params: Vec<(String, Option<Expr>)>,
        body: Vec<Stmt>,
        line: usize,
    },
    CallBlock {
        params: Vec<(String, Option<Expr>)>,
        call: Expr,
        body: Vec<Stmt>,
        line: usize,
    },
    FilterBlock(Expr, Vec<Stmt>, usize),
    With(Vec<(Target, Expr)>, Vec<Stmt>, usize),
    Block(String, Vec<Stmt>, usize),
    Generation(Vec<Stmt>, usize),
    Break(usize),
    Continue(usize),
    /// A statement jinja2 only fails on when it runs here (`extends`, `include`, `import`).
    Fail(String, usize),
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    eof_line: usize,
    /// Nesting of expressions and blocks (Python's recursion limit stops jinja2 too).
    depth: usize,
}

/// The deepest nesting of expressions or blocks accepted.
const MAX_NESTING: usize = 48;
/// The deepest expression tree accepted (long operator chains nest too).
const MAX_TREE_DEPTH: usize = 250;

impl Expr {
    pub(super) fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Name(_) | Expr::Const(_) => Vec::new(),
            Expr::Tuple(v) | Expr::List(v) | Expr::Concat(v) => v.iter().collect(),
            Expr::Dict(v) => v.iter().flat_map(|(k, x)| [k, x]).collect(),
            Expr::CondExpr(a, b, c) => [Some(a), Some(b), c.as_ref()]
                .into_iter()
                .flatten()
                .map(|x| &**x)
                .collect(),
            Expr::Or(a, b) | Expr::And(a, b) | Expr::BinOp(_, a, b) | Expr::Getitem(a, b) => {
                vec![a, b]
            }
            Expr::Not(a) | Expr::Neg(a) | Expr::Pos(a) | Expr::Getattr(a, _) => vec![a],
            Expr::Compare(a, ops) => std::iter::once(&**a)
                .chain(ops.iter().map(|(_, x)| x))
                .collect(),
            Expr::Slice(a, b, c) => [a, b, c].into_iter().flatten().map(|x| &**x).collect(),
            Expr::Call(f, args) | Expr::Test(f, _, args) => {
                std::iter::once(&**f).chain(args.exprs()).collect()
            }
            Expr::Filter(f, _, args) => f.iter().map(|x| &**x).chain(args.exprs()).collect(),
        }
    }

    /// [`Expr::children`], mutable (the resumable variant rewrites reads in place).
    pub(super) fn children_mut(&mut self) -> Vec<&mut Expr> {
        match self {
            Expr::Name(_) | Expr::Const(_) => Vec::new(),
            Expr::Tuple(v) | Expr::List(v) | Expr::Concat(v) => v.iter_mut().collect(),
            Expr::Dict(v) => v.iter_mut().flat_map(|(k, x)| [k, x]).collect(),
            Expr::CondExpr(a, b, c) => {
                let mut out: Vec<&mut Expr> = vec![&mut **a, &mut **b];
                if let Some(c) = c {
                    out.push(&mut **c);
                }
                out
            }
            Expr::Or(a, b) | Expr::And(a, b) | Expr::BinOp(_, a, b) | Expr::Getitem(a, b) => {
                vec![&mut **a, &mut **b]
            }
            Expr::Not(a) | Expr::Neg(a) | Expr::Pos(a) | Expr::Getattr(a, _) => vec![&mut **a],
            Expr::Compare(a, ops) => std::iter::once(&mut **a)
                .chain(ops.iter_mut().map(|(_, x)| x))
                .collect(),
            Expr::Slice(a, b, c) => [a, b, c].into_iter().flatten().map(|x| &mut **x).collect(),
            Expr::Call(f, args) | Expr::Test(f, _, args) => {
                std::iter::once(&mut **f).chain(args.exprs_mut()).collect()
            }
            Expr::Filter(f, _, args) => f
                .iter_mut()
                .map(|x| &mut **x)
                .chain(args.exprs_mut())
                .collect(),
        }
    }

    /// Collect the names the expression reads.
    pub fn names<'a>(&'a self, out: &mut Vec<&'a str>) {
        if let Expr::Name(n) = self {
            out.push(n);
        }
        self.children().into_iter().for_each(|c| c.names(out));
    }

    /// Whether the tree is deeper than `limit` (recursing at most `limit` levels).
    fn deeper_than(&self, limit: usize) -> bool {
        limit == 0
            || self
                .children()
                .into_iter()
                .any(|c| c.deeper_than(limit - 1))
    }
}

/// Parse a token stream into statements.
pub fn parse(toks: Vec<Token>) -> Result<Vec<Stmt>, SyntaxError> {
    let eof_line = toks.last().map_or(1, |t| t.line);
    let mut p = Parser {
        toks,
        pos: 0,
        eof_line,
        depth: 0,
    };
    let body = p.subparse(&[])?;
    if p.pos < p.toks.len() {
        return p.fail("unexpected tag");
    }
    Ok(body)
}

type PResult<T> = Result<T, SyntaxError>;

fn describe(t: Option<&Tok>) -> String {
    match t {
        None => "end of template".into(),
        Some(Tok::Data(_)) => "template data".into(),
        Some(Tok::VarBegin) => "begin of print statement".into(),
        Some(Tok::VarEnd) => "end of print statement".into(),
        Some(Tok::BlockBegin) => "begin of statement block".into(),
        Some(Tok::BlockEnd) => "end of statement block".into(),
        Some(Tok::Name(n)) => n.clone(),
        Some(Tok::Str(_)) => "string".into(),
        Some(Tok::Int(_)) => "integer".into(),
        Some(Tok::Float(_)) => "float".into(),
        Some(Tok::Op(o)) => (*o).into(),
    }
}

impl Parser {
    fn cur(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }
    fn look(&self) -> Option<&Tok> {
        self.toks.get(self.pos + 1).map(|t| &t.tok)
    }
    fn line(&self) -> usize {
        self.toks.get(self.pos).map_or(self.eof_line, |t| t.line)
    }
    /// Refuse to grow `e` further when it is already too deep.
    fn check_depth(&self, e: &Expr) -> PResult<()> {
        if e.deeper_than(MAX_TREE_DEPTH) {
            return self.fail("expression nested too deeply");
        }
        Ok(())
    }

    fn fail<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(SyntaxError {
            message: message.into(),
            line: self.line(),
        })
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|t| t.tok.clone());
        self.pos += 1;
        t
    }
    fn is_op(&self, op: &str) -> bool {
        matches!(self.cur(), Some(Tok::Op(o)) if *o == op)
    }
    fn is_name(&self, name: &str) -> bool {
        matches!(self.cur(), Some(Tok::Name(n)) if n == name)
    }
    fn skip_op(&mut self, op: &str) -> bool {
        let hit = self.is_op(op);
        if hit {
            self.pos += 1;
        }
        hit
    }
    fn skip_name(&mut self, name: &str) -> bool {
        let hit = self.is_name(name);
        if hit {
            self.pos += 1;
        }
        hit
    }
    fn expect_op(&mut self, op: &str) -> PResult<()> {
        if self.skip_op(op) {
            Ok(())
        } else {
            self.fail(format!(
                "expected token '{op}', got '{}'",
                describe(self.cur())
            ))
        }
    }
    fn expect_name(&mut self) -> PResult<String> {
        match self.cur() {
            Some(Tok::Name(n)) => {
                let n = n.clone();
                self.pos += 1;
                Ok(n)
            }
            other => self.fail(format!("expected token 'name', got '{}'", describe(other))),
        }
    }
    fn expect_block_end(&mut self) -> PResult<()> {
        if matches!(self.cur(), Some(Tok::BlockEnd)) {
            self.pos += 1;
            Ok(())
        } else {
            self.fail(format!(
                "expected token 'end of statement block', got '{}'",
                describe(self.cur())
            ))
        }
    }

    // ---- statements ----

    /// Statements until a `{% name %}` tag with a name in `end` (left as the current token).
    fn subparse(&mut self, end: &[&str]) -> PResult<Vec<Stmt>> {
        self.depth += 1;
        let rv = self.subparse_inner(end);
        self.depth -= 1;
        rv
    }

    fn subparse_inner(&mut self, end: &[&str]) -> PResult<Vec<Stmt>> {
        if self.depth > MAX_NESTING {
            return self.fail("blocks nested too deeply");
        }
        let mut body = Vec::new();
        while let Some(tok) = self.cur().cloned() {
            match tok {
                Tok::Data(d) => {
                    body.push(Stmt::Data(d));
                    self.pos += 1;
                }
                Tok::VarBegin => {
                    let line = self.line();
                    self.pos += 1;
                    let e = self.parse_tuple(false, true, &[], false)?;
                    if !matches!(self.cur(), Some(Tok::VarEnd)) {
                        return self.fail(format!(
                            "expected token 'end of print statement', got '{}'",
                            describe(self.cur())
                        ));
                    }
                    self.pos += 1;
                    body.push(Stmt::Output(vec![e], line));
                }
                Tok::BlockBegin => {
                    self.pos += 1;
                    if let Some(Tok::Name(n)) = self.cur() {
                        if end.contains(&n.as_str()) {
                            return Ok(body);
                        }
                    }
                    let stmt = self.parse_statement()?;
                    body.push(stmt);
                    self.expect_block_end()?;
                }
                _ => return self.fail("internal parsing error"),
            }
        }
        if !end.is_empty() {
            return self.fail(format!(
                "Unexpected end of template. Jinja was looking for the following tags: {}.",
                end.iter()
                    .map(|e| format!("'{e}'"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
        Ok(body)
    }

    /// `parse_statements`: the body up to an end tag; returns the end tag's name.
    fn statements(&mut self, end: &[&str], drop_needle: bool) -> PResult<(Vec<Stmt>, String)> {
        self.skip_op(":");
        self.expect_block_end()?;
        let body = self.subparse(end)?;
        let needle = match self.cur() {
            Some(Tok::Name(n)) => n.clone(),
            _ => return self.fail("unexpected end of template"),
        };
        if drop_needle {
            self.pos += 1;
        }
        Ok((body, needle))
    }

    fn parse_statement(&mut self) -> PResult<Stmt> {
        let line = self.line();
        let name = match self.cur() {
            Some(Tok::Name(n)) => n.clone(),
            _ => return self.fail("tag name expected"),
        };
        match name.as_str() {
            "for" => self.parse_for(),
            "if" => self.parse_if(),
            "set" => self.parse_set(),
            "macro" => self.parse_macro(),
            "call" => self.parse_call_block(),
            "filter" => {
                self.pos += 1;
                let f = self.parse_filter(None, true)?.expect("start_inline");
                let (body, _) = self.statements(&["endfilter"], true)?;
                Ok(Stmt::FilterBlock(f, body, line))
            }
            "with" => self.parse_with(),
            "block" => {
                self.pos += 1;
                let n = self.expect_name()?;
                let scoped = self.skip_name("scoped");
                let required = self.skip_name("required");
                if scoped || required {
                    return self.fail("scoped and required blocks are not supported");
                }
                let (body, _) = self.statements(&["endblock"], true)?;
                self.skip_name(&n);
                Ok(Stmt::Block(n, body, line))
            }
            "print" => {
                self.pos += 1;
                let mut nodes = Vec::new();
                while !matches!(self.cur(), Some(Tok::BlockEnd)) {
                    if !nodes.is_empty() {
                        self.expect_op(",")?;
                    }
                    nodes.push(self.parse_expression(true)?);
                }
                Ok(Stmt::Output(nodes, line))
            }
            "generation" => {
                self.pos += 1;
                let (body, _) = self.statements(&["endgeneration"], true)?;
                Ok(Stmt::Generation(body, line))
            }
            "break" => {
                self.pos += 1;
                Ok(Stmt::Break(line))
            }
            "continue" => {
                self.pos += 1;
                Ok(Stmt::Continue(line))
            }
            "extends" | "include" | "import" | "from" => {
                self.pos += 1;
                self.parse_expression(true)?;
                // Whatever follows (`as x`, `ignore missing`, names): skip to the end of the tag.
                while !matches!(self.cur(), Some(Tok::BlockEnd) | None) {
                    self.pos += 1;
                }
                Ok(Stmt::Fail(
                    format!("'{name}' needs a template loader, which chat templates do not have"),
                    line,
                ))
            }
            "autoescape" => self.fail("autoescape blocks are not supported"),
            _ => self.fail(format!("Encountered unknown tag '{name}'.")),
        }
    }

    fn parse_for(&mut self) -> PResult<Stmt> {
        let line = self.line();
        self.pos += 1;
        let target = self.parse_assign_target(true, false, &["in"], false)?;
        if !self.skip_name("in") {
            return self.fail(format!(
                "expected token 'in', got '{}'",
                describe(self.cur())
            ));
        }
        let iter = self.parse_tuple(false, false, &["recursive"], false)?;
        let filter = if self.skip_name("if") {
            Some(self.parse_expression(true)?)
        } else {
            None
        };
        let recursive = self.skip_name("recursive");
        let (body, needle) = self.statements(&["endfor", "else"], true)?;
        let else_ = if needle == "endfor" {
            Vec::new()
        } else {
            self.statements(&["endfor"], true)?.0
        };
        Ok(Stmt::For {
            target,
            iter,
            filter,
            recursive,
            body,
            else_,
            line,
        })
    }

    fn parse_if(&mut self) -> PResult<Stmt> {
        let mut branches = Vec::new();
        let mut else_ = Vec::new();
        self.pos += 1;
        loop {
            let line = self.line();
            let test = self.parse_tuple(false, false, &[], false)?;
            let (body, needle) = self.statements(&["elif", "else", "endif"], true)?;
            branches.push((test, body, line));
            match needle.as_str() {
                "elif" => continue,
                "else" => {
                    else_ = self.statements(&["endif"], true)?.0;
                    break;
                }
                _ => break,
            }
        }
        Ok(Stmt::If { branches, else_ })
    }

    fn parse_set(&mut self) -> PResult<Stmt> {
        let line = self.line();
        self.pos += 1;
        let target = self.parse_assign_target(true, false, &[], true)?;
        if self.skip_op("=") {
            let value = self.parse_tuple(false, true, &[], false)?;
            return Ok(Stmt::Set(target, value, line));
        }
        let filter = self.parse_filter(None, false)?;
        let (body, _) = self.statements(&["endset"], true)?;
        Ok(Stmt::SetBlock(target, filter, body, line))
    }

    fn parse_signature(&mut self) -> PResult<Vec<(String, Option<Expr>)>> {
        let mut params: Vec<(String, Option<Expr>)> = Vec::new();
        self.expect_op("(")?;
        while !self.is_op(")") {
            if !params.is_empty() {
                self.expect_op(",")?;
            }
            let name = self.expect_name()?;
            let default = if self.skip_op("=") {
                Some(self.parse_expression(true)?)
            } else if params.iter().any(|p| p.1.is_some()) {
                return self.fail("non-default argument follows default argument");
            } else {
                None
            };
            params.push((name, default));
        }
        self.expect_op(")")?;
        Ok(params)
    }

    fn parse_macro(&mut self) -> PResult<Stmt> {
        let line = self.line();
        self.pos += 1;
        let name = self.expect_name()?;
        let params = self.parse_signature()?;
        let (body, _) = self.statements(&["endmacro"], true)?;
        Ok(Stmt::Macro {
            name,
            params,
            body,
            line,
        })
    }

    fn parse_call_block(&mut self) -> PResult<Stmt> {
        let line = self.line();
        self.pos += 1;
        let params = if self.is_op("(") {
            self.parse_signature()?
        } else {
            Vec::new()
        };
        let call = self.parse_expression(true)?;
        if !matches!(call, Expr::Call(..)) {
            return self.fail("expected call");
        }
        let (body, _) = self.statements(&["endcall"], true)?;
        Ok(Stmt::CallBlock {
            params,
            call,
            body,
            line,
        })
    }

    fn parse_with(&mut self) -> PResult<Stmt> {
        let line = self.line();
        self.pos += 1;
        let mut assignments = Vec::new();
        while !matches!(self.cur(), Some(Tok::BlockEnd)) {
            if !assignments.is_empty() {
                self.expect_op(",")?;
            }
            let target = self.parse_assign_target(true, false, &[], false)?;
            self.expect_op("=")?;
            assignments.push((target, self.parse_expression(true)?));
        }
        let (body, _) = self.statements(&["endwith"], true)?;
        Ok(Stmt::With(assignments, body, line))
    }

    fn parse_assign_target(
        &mut self,
        with_tuple: bool,
        name_only: bool,
        extra_end: &[&str],
        with_namespace: bool,
    ) -> PResult<Target> {
        if name_only {
            return Ok(Target::Name(self.expect_name()?));
        }
        let expr = if with_tuple {
            self.parse_tuple(true, true, extra_end, false)
        } else {
            self.parse_primary()
        };
        // `with_namespace`: a bare `name.attr` is a namespace reference.
        let expr = expr?;
        fn to_target(e: Expr, with_namespace: bool) -> Option<Target> {
            match e {
                Expr::Name(n)
                    if !matches!(
                        n.as_str(),
                        "true" | "false" | "none" | "True" | "False" | "None"
                    ) =>
                {
                    Some(Target::Name(n))
                }
                Expr::Getattr(inner, attr) if with_namespace => match *inner {
                    Expr::Name(n) => Some(Target::NsRef(n, attr)),
                    _ => None,
                },
                Expr::Tuple(items) => items
                    .into_iter()
                    .map(|i| to_target(i, with_namespace))
                    .collect::<Option<Vec<_>>>()
                    .map(Target::Tuple),
                _ => None,
            }
        }
        match to_target(expr, with_namespace) {
            Some(t) => Ok(t),
            None => self.fail("can't assign to this expression"),
        }
    }

    // ---- expressions ----

    fn parse_expression(&mut self, with_condexpr: bool) -> PResult<Expr> {
        if with_condexpr {
            self.parse_condexpr()
        } else {
            self.parse_or()
        }
    }

    fn parse_condexpr(&mut self) -> PResult<Expr> {
        let mut expr1 = self.parse_or()?;
        while self.skip_name("if") {
            self.check_depth(&expr1)?;
            let expr2 = self.parse_or()?;
            let expr3 = if self.skip_name("else") {
                Some(Box::new(self.parse_condexpr()?))
            } else {
                None
            };
            expr1 = Expr::CondExpr(Box::new(expr2), Box::new(expr1), expr3);
        }
        Ok(expr1)
    }

    fn parse_or(&mut self) -> PResult<Expr> {
        let mut left = self.parse_and()?;
        while self.skip_name("or") {
            self.check_depth(&left)?;
            let right = self.parse_and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_and(&mut self) -> PResult<Expr> {
        let mut left = self.parse_not()?;
        while self.skip_name("and") {
            self.check_depth(&left)?;
            let right = self.parse_not()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_not(&mut self) -> PResult<Expr> {
        if self.skip_name("not") {
            self.depth += 1;
            let inner = if self.depth > MAX_NESTING {
                self.fail("expression nested too deeply")
            } else {
                self.parse_not()
            };
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner?)));
        }
        self.parse_compare()
    }

    fn parse_compare(&mut self) -> PResult<Expr> {
        let expr = self.parse_math1()?;
        let mut ops = Vec::new();
        loop {
            let op = match self.cur() {
                Some(Tok::Op("==")) => CmpOp::Eq,
                Some(Tok::Op("!=")) => CmpOp::Ne,
                Some(Tok::Op("<")) => CmpOp::Lt,
                Some(Tok::Op("<=")) => CmpOp::LtEq,
                Some(Tok::Op(">")) => CmpOp::Gt,
                Some(Tok::Op(">=")) => CmpOp::GtEq,
                Some(Tok::Name(n)) if n == "in" => CmpOp::In,
                Some(Tok::Name(n))
                    if n == "not" && matches!(self.look(), Some(Tok::Name(m)) if m == "in") =>
                {
                    self.pos += 1;
                    CmpOp::NotIn
                }
                _ => break,
            };
            self.pos += 1;
            self.check_depth(&expr)?;
            ops.push((op, self.parse_math1()?));
        }
        if ops.is_empty() {
            Ok(expr)
        } else {
            Ok(Expr::Compare(Box::new(expr), ops))
        }
    }

    fn parse_math1(&mut self) -> PResult<Expr> {
        let mut left = self.parse_concat()?;
        loop {
            let op = match self.cur() {
                Some(Tok::Op("+")) => BinOp::Add,
                Some(Tok::Op("-")) => BinOp::Sub,
                _ => break,
            };
            self.pos += 1;
            self.check_depth(&left)?;
            let right = self.parse_concat()?;
            left = Expr::BinOp(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_concat(&mut self) -> PResult<Expr> {
        let mut args = vec![self.parse_math2()?];
        while self.skip_op("~") {
            if args.len() > MAX_TREE_DEPTH {
                return self.fail("expression nested too deeply");
            }
            args.push(self.parse_math2()?);
        }
        if args.len() == 1 {
            Ok(args.pop().expect("one"))
        } else {
            Ok(Expr::Concat(args))
        }
    }

    fn parse_math2(&mut self) -> PResult<Expr> {
        let mut left = self.parse_pow()?;
        loop {
            let op = match self.cur() {
                Some(Tok::Op("*")) => BinOp::Mul,
                Some(Tok::Op("/")) => BinOp::Div,
                Some(Tok::Op("//")) => BinOp::FloorDiv,
                Some(Tok::Op("%")) => BinOp::Mod,
                _ => break,
            };
            self.pos += 1;
            self.check_depth(&left)?;
            let right = self.parse_pow()?;
            left = Expr::BinOp(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_pow(&mut self) -> PResult<Expr> {
        let mut left = self.parse_unary(true)?;
        while self.skip_op("**") {
            self.check_depth(&left)?;
            let right = self.parse_unary(true)?;
            left = Expr::BinOp(BinOp::Pow, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn parse_unary(&mut self, with_filter: bool) -> PResult<Expr> {
        self.depth += 1;
        let rv = self.parse_unary_inner(with_filter);
        self.depth -= 1;
        rv
    }

    fn parse_unary_inner(&mut self, with_filter: bool) -> PResult<Expr> {
        if self.depth > MAX_NESTING {
            return self.fail("expression nested too deeply");
        }
        let node = if self.skip_op("-") {
            Expr::Neg(Box::new(self.parse_unary(false)?))
        } else if self.skip_op("+") {
            Expr::Pos(Box::new(self.parse_unary(false)?))
        } else {
            self.parse_primary()?
        };
        let node = self.parse_postfix(node)?;
        if with_filter {
            self.parse_filter_expr(node)
        } else {
            Ok(node)
        }
    }

    fn parse_primary(&mut self) -> PResult<Expr> {
        match self.cur().cloned() {
            Some(Tok::Name(n)) => {
                self.pos += 1;
                Ok(match n.as_str() {
                    "true" | "True" => Expr::Const(Const::Bool(true)),
                    "false" | "False" => Expr::Const(Const::Bool(false)),
                    "none" | "None" => Expr::Const(Const::None),
                    _ => Expr::Name(n),
                })
            }
            Some(Tok::Str(s)) => {
                self.pos += 1;
                let mut buf = s;
                while let Some(Tok::Str(more)) = self.cur() {
                    buf.push_str(more);
                    self.pos += 1;
                }
                Ok(Expr::Const(Const::Str(buf)))
            }
            Some(Tok::Int(i)) => {
                self.pos += 1;
                Ok(Expr::Const(Const::Int(i)))
            }
            Some(Tok::Float(f)) => {
                self.pos += 1;
                Ok(Expr::Const(Const::Float(f)))
            }
            Some(Tok::Op("(")) => {
                self.pos += 1;
                let e = self.parse_tuple(false, true, &[], true)?;
                self.expect_op(")")?;
                Ok(e)
            }
            Some(Tok::Op("[")) => {
                self.pos += 1;
                let mut items = Vec::new();
                while !self.is_op("]") {
                    if !items.is_empty() {
                        self.expect_op(",")?;
                    }
                    if self.is_op("]") {
                        break;
                    }
                    items.push(self.parse_expression(true)?);
                }
                self.expect_op("]")?;
                Ok(Expr::List(items))
            }
            Some(Tok::Op("{")) => {
                self.pos += 1;
                let mut items = Vec::new();
                while !self.is_op("}") {
                    if !items.is_empty() {
                        self.expect_op(",")?;
                    }
                    if self.is_op("}") {
                        break;
                    }
                    let k = self.parse_expression(true)?;
                    self.expect_op(":")?;
                    let v = self.parse_expression(true)?;
                    items.push((k, v));
                }
                self.expect_op("}")?;
                Ok(Expr::Dict(items))
            }
            other => self.fail(format!("unexpected '{}'", describe(other.as_ref()))),
        }
    }

    fn is_tuple_end(&self, extra_end: &[&str]) -> bool {
        match self.cur() {
            Some(Tok::VarEnd | Tok::BlockEnd) | Some(Tok::Op(")")) | None => true,
            Some(Tok::Name(n)) => extra_end.contains(&n.as_str()),
            _ => false,
        }
    }

    fn parse_tuple(
        &mut self,
        simplified: bool,
        with_condexpr: bool,
        extra_end: &[&str],
        explicit_parentheses: bool,
    ) -> PResult<Expr> {
        let mut args = Vec::new();
        let mut is_tuple = false;
        loop {
            if !args.is_empty() {
                self.expect_op(",")?;
            }
            if self.is_tuple_end(extra_end) {
                break;
            }
            args.push(if simplified {
                // parse_primary(with_namespace): a name, a literal or `name.attr`
                let p = self.parse_primary()?;
                if let (Expr::Name(_), true) = (&p, self.is_op(".")) {
                    self.pos += 1;
                    let attr = self.expect_name()?;
                    Expr::Getattr(Box::new(p), attr)
                } else {
                    p
                }
            } else {
                self.parse_expression(with_condexpr)?
            });
            if self.is_op(",") {
                is_tuple = true;
            } else {
                break;
            }
        }
        if !is_tuple {
            if let Some(a) = args.pop() {
                return Ok(a);
            }
            if !explicit_parentheses {
                return self.fail(format!(
                    "Expected an expression, got '{}'",
                    describe(self.cur())
                ));
            }
        }
        Ok(Expr::Tuple(args))
    }

    fn parse_postfix(&mut self, mut node: Expr) -> PResult<Expr> {
        loop {
            self.check_depth(&node)?;
            if self.is_op(".") || self.is_op("[") {
                node = self.parse_subscript(node)?;
            } else if self.is_op("(") {
                node = Expr::Call(Box::new(node), self.parse_call_args()?);
            } else {
                return Ok(node);
            }
        }
    }

    fn parse_filter_expr(&mut self, mut node: Expr) -> PResult<Expr> {
        loop {
            self.check_depth(&node)?;
            if self.is_op("|") {
                node = self.parse_filter(Some(node), false)?.expect("filter");
            } else if self.is_name("is") {
                node = self.parse_test(node)?;
            } else if self.is_op("(") {
                node = Expr::Call(Box::new(node), self.parse_call_args()?);
            } else {
                return Ok(node);
            }
        }
    }

    fn parse_subscript(&mut self, node: Expr) -> PResult<Expr> {
        if self.skip_op(".") {
            return match self.next() {
                Some(Tok::Name(n)) => Ok(Expr::Getattr(Box::new(node), n)),
                Some(Tok::Int(i)) => Ok(Expr::Getitem(
                    Box::new(node),
                    Box::new(Expr::Const(Const::Int(i))),
                )),
                _ => self.fail("expected name or number"),
            };
        }
        self.expect_op("[")?;
        let mut args = Vec::new();
        while !self.is_op("]") {
            if !args.is_empty() {
                self.expect_op(",")?;
            }
            args.push(self.parse_subscribed()?);
        }
        self.expect_op("]")?;
        let arg = if args.len() == 1 {
            args.pop().expect("one")
        } else {
            Expr::Tuple(args)
        };
        Ok(Expr::Getitem(Box::new(node), Box::new(arg)))
    }

    fn parse_subscribed(&mut self) -> PResult<Expr> {
        let mut parts: Vec<Option<Box<Expr>>> = Vec::new();
        if self.skip_op(":") {
            parts.push(None);
        } else {
            let node = self.parse_expression(true)?;
            if !self.skip_op(":") {
                return Ok(node);
            }
            parts.push(Some(Box::new(node)));
        }
        if self.is_op(":") || self.is_op("]") || self.is_op(",") {
            parts.push(None);
        } else {
            parts.push(Some(Box::new(self.parse_expression(true)?)));
        }
        if self.skip_op(":") {
            if self.is_op("]") || self.is_op(",") {
                parts.push(None);
            } else {
                parts.push(Some(Box::new(self.parse_expression(true)?)));
            }
        } else {
            parts.push(None);
        }
        let step = parts.pop().expect("3");
        let stop = parts.pop().expect("2");
        let start = parts.pop().expect("1");
        Ok(Expr::Slice(start, stop, step))
    }

    fn parse_call_args(&mut self) -> PResult<Args> {
        self.expect_op("(")?;
        let mut out = Args::default();
        let mut require_comma = false;
        while !self.is_op(")") {
            if require_comma {
                self.expect_op(",")?;
                if self.is_op(")") {
                    break;
                }
            }
            if self.skip_op("*") {
                if out.dynamic() {
                    return self.fail("invalid syntax for function call expression");
                }
                out.dyn_args = Some(Box::new(self.parse_expression(true)?));
            } else if self.skip_op("**") {
                if out.dyn_kwargs.is_some() {
                    return self.fail("invalid syntax for function call expression");
                }
                out.dyn_kwargs = Some(Box::new(self.parse_expression(true)?));
            } else if let (Some(Tok::Name(key)), Some(Tok::Op("="))) =
                (self.cur().cloned(), self.look())
            {
                if out.dyn_kwargs.is_some() {
                    return self.fail("invalid syntax for function call expression");
                }
                self.pos += 2;
                let value = self.parse_expression(true)?;
                out.kwargs.push((key, value));
            } else {
                if out.dynamic() || !out.kwargs.is_empty() {
                    return self.fail("invalid syntax for function call expression");
                }
                out.args.push(self.parse_expression(true)?);
            }
            require_comma = true;
        }
        self.expect_op(")")?;
        Ok(out)
    }

    /// `parse_filter`: a `|name(args)` chain on `node` (`start_inline`: no leading `|`).
    fn parse_filter(
        &mut self,
        mut node: Option<Expr>,
        mut start_inline: bool,
    ) -> PResult<Option<Expr>> {
        while self.is_op("|") || start_inline {
            if let Some(n) = &node {
                self.check_depth(n)?;
            }
            if !start_inline {
                self.pos += 1;
            }
            let mut name = self.expect_name()?;
            while self.skip_op(".") {
                name.push('.');
                name.push_str(&self.expect_name()?);
            }
            let args = if self.is_op("(") {
                self.parse_call_args()?
            } else {
                Args::default()
            };
            node = Some(Expr::Filter(node.map(Box::new), name, args));
            start_inline = false;
        }
        Ok(node)
    }

    fn parse_test(&mut self, node: Expr) -> PResult<Expr> {
        self.pos += 1; // `is`
        let negated = self.skip_name("not");
        let mut name = self.expect_name()?;
        while self.skip_op(".") {
            name.push('.');
            name.push_str(&self.expect_name()?);
        }
        let args = if self.is_op("(") {
            self.parse_call_args()?
        } else if matches!(
            self.cur(),
            Some(Tok::Name(_) | Tok::Str(_) | Tok::Int(_) | Tok::Float(_))
                | Some(Tok::Op("(" | "[" | "{"))
        ) && !(self.is_name("else") || self.is_name("or") || self.is_name("and"))
        {
            if self.is_name("is") {
                return self.fail("You cannot chain multiple tests with is");
            }
            let arg = self.parse_primary()?;
            let arg = self.parse_postfix(arg)?;
            Args {
                args: vec![arg],
                ..Default::default()
            }
        } else {
            Args::default()
        };
        let test = Expr::Test(Box::new(node), name, args);
        Ok(if negated {
            Expr::Not(Box::new(test))
        } else {
            test
        })
    }
}
