//! The house rules a reviewer would otherwise check by hand, as rust-analyzer's
//! `xtask/src/tidy.rs` keeps its own: no module circle in any crate (nor in the Python
//! client), no `src` file over 700 lines, no function over 120 lines without a comment
//! saying why, no dead link in the docs, no `oncegate` command in them that the CLI
//! would refuse, and an ARCHITECTURE.md code map that names what is there.
//!
//! Each rule is its own test, and a failure lists every offender with its file:line and
//! what to do, so one run says everything that is wrong. The Rust sources are read with a
//! small lexer (comments, strings, chars and raw strings skipped), not a parser: enough
//! to follow `use` trees, `crate::`/`super::` paths and braces, and nothing to build.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// The longest a `src` file may be.
const MAX_FILE_LINES: usize = 700;
/// The longest a function may be without a `// Long on purpose:` comment above it.
const MAX_FN_LINES: usize = 120;
const LONG_ON_PURPOSE: &str = "// Long on purpose:";

// ---------------------------------------------------------------------------------------
// The checks

#[test]
fn tidy_no_module_circle_in_any_crate() {
    let mut offenders = Vec::new();
    for krate in crate_dirs() {
        for root_file in ["lib.rs", "main.rs"] {
            let root = krate.join("src").join(root_file);
            if root.exists() {
                let graph = ModuleTree::load(&root).file_graph();
                offenders.extend(circles(&graph));
            }
        }
    }
    for package in python_packages() {
        offenders.extend(circles(&python_graph(&package)));
    }
    report(
        "module circles (a file depends on another when it names an item defined there)",
        "break each circle: move what both sides share into a module below both \
         (a shared type lives below both of its users)",
        offenders,
    );
}

#[test]
fn tidy_no_src_file_over_700_lines() {
    let offenders = src_files()
        .into_iter()
        .filter_map(|path| {
            let lines = read(&path).lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{}: {lines} lines", rel(&path)))
        })
        .collect();
    report(
        &format!("src files over {MAX_FILE_LINES} lines"),
        "split the file along its concerns (a folder of modules, each under the limit)",
        offenders,
    );
}

#[test]
fn tidy_no_long_function_without_a_reason() {
    let mut offenders = Vec::new();
    for path in src_files() {
        let text = read(&path);
        for f in long_functions(&text, MAX_FN_LINES) {
            offenders.push(format!(
                "{}:{}: fn {} is {} lines",
                rel(&path),
                f.line,
                f.name,
                f.lines
            ));
        }
    }
    report(
        &format!("functions over {MAX_FN_LINES} lines"),
        &format!(
            "split each into named steps, or put a comment starting `{LONG_ON_PURPOSE}` and \
             the reason on the line above it (above its doc comment and attributes)"
        ),
        offenders,
    );
}

#[test]
fn tidy_doc_links_point_at_files() {
    let mut offenders = Vec::new();
    for doc in doc_files() {
        offenders.extend(dead_links(&doc, &read(&doc)));
    }
    report(
        "doc links to files that do not exist",
        "fix the link (relative to the page it is in) or add the file; a file outside the \
         repository is not there in a clone: move what it says into the repository",
        offenders,
    );
}

#[test]
fn tidy_doc_commands_parse() {
    let mut offenders = Vec::new();
    for doc in doc_files() {
        for cmd in shell_commands(&read(&doc)) {
            if let Err(why) = check_command(&cmd.words) {
                offenders.push(format!("{}:{}: `{}`: {why}", rel(&doc), cmd.line, cmd.text));
            }
        }
    }
    report(
        "`oncegate` commands in the docs' sh/bash/shell blocks that the CLI refuses",
        "write each command as the CLI accepts it today (`oncegate help <subcommand>`)",
        offenders,
    );
}

#[test]
fn tidy_architecture_code_map_matches_the_tree() {
    let path = repo().join("ARCHITECTURE.md");
    let text = read(&path);
    let mut offenders = stale_paths(&text);
    offenders.extend(unnamed_modules(&text));
    report(
        "ARCHITECTURE.md's code map against the tree",
        "name every top-level module in its crate's part of the code map, and remove or \
         fix every path that no longer exists",
        offenders,
    );
}

/// Panics with every offender, if there is one.
fn report(what: &str, todo: &str, offenders: Vec<String>) {
    if offenders.is_empty() {
        return;
    }
    let mut text = format!("tidy: {} {what}. To do: {todo}.\n", offenders.len());
    for o in &offenders {
        text.push_str("  ");
        text.push_str(o);
        text.push('\n');
    }
    panic!("{text}");
}

// ---------------------------------------------------------------------------------------
// Where things are

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

fn rel(path: &Path) -> String {
    let root = repo();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(read) => read.map(|e| e.expect("a directory entry").path()).collect(),
        Err(_) => Vec::new(),
    };
    entries.sort();
    entries
}

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for path in sorted_entries(dir) {
        if path.is_dir() {
            files_under(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

fn crate_dirs() -> Vec<PathBuf> {
    sorted_entries(&repo().join("crates"))
        .into_iter()
        .filter(|p| p.join("Cargo.toml").exists())
        .collect()
}

fn src_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for krate in crate_dirs() {
        files_under(&krate.join("src"), "rs", &mut out);
    }
    out
}

/// `clients/*/src/<package>/`: every Python package of the clients.
fn python_packages() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for client in sorted_entries(&repo().join("clients")) {
        for package in sorted_entries(&client.join("src")) {
            if package.join("__init__.py").exists() {
                out.push(package);
            }
        }
    }
    out
}

/// README.md, ARCHITECTURE.md, BENCHMARKS.md, docs/**/*.md, clients/*/README.md.
fn doc_files() -> Vec<PathBuf> {
    let root = repo();
    let mut out: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"]
        .iter()
        .map(|name| root.join(name))
        .filter(|p| p.exists())
        .collect();
    files_under(&root.join("docs"), "md", &mut out);
    for client in sorted_entries(&root.join("clients")) {
        if client.join("README.md").exists() {
            out.push(client.join("README.md"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// A Rust lexer: just enough tokens to follow paths and braces

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A string literal's text (escapes left as written).
    Str(String),
    /// Any other literal: numbers, chars, byte strings' kin.
    Lit,
    Lifetime,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is_ident(&self, name: &str) -> bool {
        matches!(&self.tok, Tok::Ident(s) if s == name)
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(s) => Some(s),
            _ => None,
        }
    }
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: usize,
    out: Vec<Token>,
}

fn lex(src: &str) -> Vec<Token> {
    let mut lx = Lexer {
        chars: src.chars().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    };
    while lx.i < lx.chars.len() {
        lx.step();
    }
    lx.out
}

impl Lexer {
    fn at(&self, k: usize) -> char {
        self.chars.get(self.i + k).copied().unwrap_or('\0')
    }

    fn bump(&mut self) {
        if self.at(0) == '\n' {
            self.line += 1;
        }
        self.i += 1;
    }

    fn push(&mut self, tok: Tok, line: usize) {
        self.out.push(Token { tok, line });
    }

    fn step(&mut self) {
        let c = self.at(0);
        let line = self.line;
        match c {
            _ if c.is_whitespace() => self.bump(),
            '/' if self.at(1) == '/' => {
                while self.i < self.chars.len() && self.at(0) != '\n' {
                    self.bump();
                }
            }
            '/' if self.at(1) == '*' => self.block_comment(),
            '"' => {
                let s = self.quoted();
                self.push(Tok::Str(s), line);
            }
            '\'' => self.quote_or_lifetime(),
            _ if c.is_ascii_digit() => {
                while self.at(0).is_alphanumeric()
                    || self.at(0) == '_'
                    || (self.at(0) == '.' && self.at(1).is_ascii_digit())
                {
                    self.bump();
                }
                self.push(Tok::Lit, line);
            }
            _ if c.is_alphabetic() || c == '_' => self.word(),
            ':' if self.at(1) == ':' => {
                self.bump();
                self.bump();
                self.push(Tok::PathSep, line);
            }
            _ => {
                self.bump();
                self.push(Tok::Punct(c), line);
            }
        }
    }

    fn block_comment(&mut self) {
        let mut depth = 0;
        while self.i < self.chars.len() {
            if self.at(0) == '/' && self.at(1) == '*' {
                depth += 1;
                self.bump();
            } else if self.at(0) == '*' && self.at(1) == '/' {
                depth -= 1;
                self.bump();
                if depth == 0 {
                    self.bump();
                    return;
                }
            }
            self.bump();
        }
    }

    /// A `"..."` string at the cursor; its text.
    fn quoted(&mut self) -> String {
        let mut s = String::new();
        self.bump();
        while self.i < self.chars.len() && self.at(0) != '"' {
            if self.at(0) == '\\' {
                s.push('\\');
                self.bump();
            }
            s.push(self.at(0));
            self.bump();
        }
        self.bump();
        s
    }

    /// `r"..."`, `r#"..."#` after the prefix, at the first `#` or `"`.
    fn raw_string(&mut self) -> String {
        let mut hashes = 0;
        while self.at(0) == '#' {
            hashes += 1;
            self.bump();
        }
        self.bump(); // "
        let mut s = String::new();
        while self.i < self.chars.len() {
            if self.at(0) == '"' && (1..=hashes).all(|k| self.at(k) == '#') {
                for _ in 0..=hashes {
                    self.bump();
                }
                break;
            }
            s.push(self.at(0));
            self.bump();
        }
        s
    }

    fn quote_or_lifetime(&mut self) {
        let line = self.line;
        let is_char = self.at(1) == '\\' || self.at(2) == '\'';
        self.bump();
        if is_char {
            while self.i < self.chars.len() && self.at(0) != '\'' {
                if self.at(0) == '\\' {
                    self.bump();
                }
                self.bump();
            }
            self.bump();
            self.push(Tok::Lit, line);
        } else {
            while self.at(0).is_alphanumeric() || self.at(0) == '_' {
                self.bump();
            }
            self.push(Tok::Lifetime, line);
        }
    }

    fn word(&mut self) {
        let line = self.line;
        let start = self.i;
        while self.at(0).is_alphanumeric() || self.at(0) == '_' {
            self.bump();
        }
        let word: String = self.chars[start..self.i].iter().collect();
        let raw_start = self.at(0) == '"' || (self.at(0) == '#' && matches!(self.at(1), '"' | '#'));
        match word.as_str() {
            "r" | "br" | "cr" if raw_start => {
                let s = self.raw_string();
                self.push(Tok::Str(s), line);
            }
            "r" if self.at(0) == '#' => {
                // A raw identifier: `r#type` is the identifier `type`.
                self.bump();
                let start = self.i;
                while self.at(0).is_alphanumeric() || self.at(0) == '_' {
                    self.bump();
                }
                let word: String = self.chars[start..self.i].iter().collect();
                self.push(Tok::Ident(word), line);
            }
            "b" | "c" if self.at(0) == '"' => {
                let s = self.quoted();
                self.push(Tok::Str(s), line);
            }
            "b" if self.at(0) == '\'' => {
                self.bump();
                while self.i < self.chars.len() && self.at(0) != '\'' {
                    if self.at(0) == '\\' {
                        self.bump();
                    }
                    self.bump();
                }
                self.bump();
                self.push(Tok::Lit, line);
            }
            _ => self.push(Tok::Ident(word), line),
        }
    }
}

/// The index of the token closing the group `toks[open]` opens (`{`, `(` or `[`).
fn close_of(toks: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('{' | '(' | '[') => depth += 1,
            Tok::Punct('}' | ')' | ']') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

/// From `from`, the index of the `;` ending an item at this depth, or of the `}` closing
/// its body when `block_ends` and a body comes first (skipping `(..)` and `[..]`).
fn item_end(toks: &[Token], from: usize, block_ends: bool) -> usize {
    let mut k = from;
    while k < toks.len() {
        match toks[k].tok {
            Tok::Punct(';') => return k,
            Tok::Punct('{') if block_ends => return close_of(toks, k),
            Tok::Punct('{' | '(' | '[') => k = close_of(toks, k),
            _ => {}
        }
        k += 1;
    }
    toks.len().saturating_sub(1)
}

// ---------------------------------------------------------------------------------------
// Long functions

#[derive(Debug)]
struct LongFn {
    name: String,
    line: usize,
    lines: usize,
}

/// Every function (free, method, nested) longer than `max` lines, counted from the line
/// of `fn` to its closing brace, without a `// Long on purpose:` comment above it.
fn long_functions(text: &str, max: usize) -> Vec<LongFn> {
    let toks = lex(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (k, t) in toks.iter().enumerate() {
        let Some(name) = toks.get(k + 1).and_then(Token::ident) else {
            continue;
        };
        if !t.is_ident("fn") {
            continue;
        }
        let Some(open) = fn_body(&toks, k + 2) else {
            continue;
        };
        let close = close_of(&toks, open);
        let length = toks[close].line - t.line + 1;
        if length > max && !has_reason(&lines, item_start_line(&toks, k)) {
            out.push(LongFn {
                name: name.to_owned(),
                line: t.line,
                lines: length,
            });
        }
    }
    out
}

/// The `{` opening a function's body, or None for a declaration without one.
fn fn_body(toks: &[Token], from: usize) -> Option<usize> {
    let mut k = from;
    while k < toks.len() {
        match toks[k].tok {
            Tok::Punct(';') => return None,
            Tok::Punct('{') => return Some(k),
            Tok::Punct('(' | '[') => k = close_of(toks, k),
            _ => {}
        }
        k += 1;
    }
    None
}

/// The line an item starts on: its qualifiers (`pub(crate) async`...) and attributes
/// before the `fn` token at `k`.
fn item_start_line(toks: &[Token], mut k: usize) -> usize {
    let qualifiers = ["pub", "async", "const", "unsafe", "extern", "default"];
    while let Some(prev) = k.checked_sub(1) {
        let t = &toks[prev];
        let qualifier =
            t.ident().is_some_and(|w| qualifiers.contains(&w)) || matches!(t.tok, Tok::Str(_)); // extern "C"
        if qualifier {
            k = prev;
        } else if t.is_punct(')') || t.is_punct(']') {
            // `pub(crate)` or an attribute `#[...]`.
            let open = open_of(toks, prev);
            let attr = t.is_punct(']') && open > 0 && toks[open - 1].is_punct('#');
            let vis = t.is_punct(')') && open > 0 && toks[open - 1].is_ident("pub");
            if attr || vis {
                k = open - 1;
            } else {
                break;
            }
        } else {
            break;
        }
    }
    toks[k].line
}

/// The index of the token opening the group `toks[close]` closes.
fn open_of(toks: &[Token], close: usize) -> usize {
    let mut depth = 0usize;
    for k in (0..=close).rev() {
        match toks[k].tok {
            Tok::Punct('}' | ')' | ']') => depth += 1,
            Tok::Punct('{' | '(' | '[') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    0
}

/// Whether the comments and attributes right above `start` (1-based) hold the marker.
fn has_reason(lines: &[&str], start: usize) -> bool {
    let mut k = start.saturating_sub(1);
    while k > 0 {
        let line = lines[k - 1].trim_start();
        if line.starts_with(LONG_ON_PURPOSE) {
            return true;
        }
        if !(line.starts_with("//") || line.starts_with("#[") || line.starts_with("#![")) {
            return false;
        }
        k -= 1;
    }
    false
}

// ---------------------------------------------------------------------------------------
// A crate's module tree, and which file names an item defined in which

/// A `use` leaf or a path in code, as written in a module.
#[derive(Debug, Clone)]
struct PathRef {
    module: usize,
    segs: Vec<String>,
    line: usize,
}

#[derive(Debug, Default)]
struct Module {
    file: usize,
    parent: Option<usize>,
    /// Where `mod x;` looks for `x.rs` or `x/mod.rs`.
    dir: PathBuf,
    children: BTreeMap<String, usize>,
    items: BTreeSet<String>,
    /// `use` bindings: the name in this module, and the path it stands for.
    uses: BTreeMap<String, PathRef>,
    globs: Vec<PathRef>,
}

#[derive(Debug, Clone, PartialEq)]
enum Res {
    Module(usize),
    Item { file: usize, name: String },
}

#[derive(Debug, Default)]
struct ModuleTree {
    files: Vec<PathBuf>,
    modules: Vec<Module>,
    /// Private `use` leaves and globs, and paths in code: each may be an edge.
    uses: Vec<PathRef>,
    globs: Vec<PathRef>,
    code: Vec<PathRef>,
    /// `pub use` leaves: an edge only where the file's own code names them.
    reexports: Vec<(PathRef, String)>,
    /// Identifiers in each module's code (not in its `use` lines).
    idents: BTreeMap<usize, BTreeSet<String>>,
}

/// One edge of a file graph: the names that tie it, and the first line naming one.
#[derive(Debug, Clone, Default)]
struct Edge {
    names: BTreeSet<String>,
    line: usize,
}

/// file -> file it depends on -> why.
type Graph = BTreeMap<String, BTreeMap<String, Edge>>;

fn add_edge(graph: &mut Graph, from: &str, to: &str, name: &str, line: usize) {
    if from == to {
        return;
    }
    let edge = graph
        .entry(from.to_owned())
        .or_default()
        .entry(to.to_owned())
        .or_default();
    if edge.names.is_empty() || line < edge.line {
        edge.line = line;
    }
    edge.names.insert(name.to_owned());
}

impl ModuleTree {
    /// The module tree rooted at `root` (`lib.rs` or `main.rs`), read from disk.
    fn load(root: &Path) -> ModuleTree {
        let mut tree = ModuleTree::default();
        let dir = root.parent().expect("src").to_path_buf();
        tree.load_file(root, None, None, dir);
        tree
    }

    /// Adds the module stored in `path`, a child of `parent` named `name`.
    fn load_file(&mut self, path: &Path, parent: Option<usize>, name: Option<&str>, dir: PathBuf) {
        let file = self.files.len();
        self.files.push(path.to_path_buf());
        let module = self.new_module(file, parent, name, dir);
        let toks = lex(&read(path));
        self.parse_items(&toks, module);
    }

    fn new_module(
        &mut self,
        file: usize,
        parent: Option<usize>,
        name: Option<&str>,
        dir: PathBuf,
    ) -> usize {
        let id = self.modules.len();
        self.modules.push(Module {
            file,
            parent,
            dir,
            ..Module::default()
        });
        if let (Some(p), Some(n)) = (parent, name) {
            self.modules[p].children.insert(n.to_owned(), id);
        }
        id
    }

    /// Reads a module's items: `mod`, `use`, the names it defines, and its code's paths.
    fn parse_items(&mut self, toks: &[Token], module: usize) {
        let mut k = 0;
        let mut attrs = Attrs::default();
        while k < toks.len() {
            let t = &toks[k];
            if t.is_punct('#') {
                let open = if toks.get(k + 1).is_some_and(|t| t.is_punct('!')) {
                    k + 2
                } else {
                    k + 1
                };
                if toks.get(open).is_some_and(|t| t.is_punct('[')) {
                    let close = close_of(toks, open);
                    attrs.read(&toks[open + 1..close]);
                    self.code_paths(&toks[open..=close], module);
                    k = close + 1;
                    continue;
                }
            }
            let word = t.ident().unwrap_or("");
            let end = match word {
                "pub" if toks.get(k + 1).is_some_and(|t| t.is_punct('(')) => close_of(toks, k + 1),
                "pub" | "async" | "unsafe" | "extern" | "default" => k,
                "use" => {
                    let end = item_end(toks, k, false);
                    let public =
                        k > 0 && (toks[k - 1].is_ident("pub") || toks[k - 1].is_punct(')'));
                    self.use_item(&toks[k + 1..end], module, public);
                    end
                }
                "mod" => self.mod_item(toks, k, module, &attrs),
                "fn" | "struct" | "enum" | "union" | "trait" | "type" | "const" | "static"
                | "macro_rules" => {
                    let block = !matches!(word, "type" | "const" | "static");
                    let end = item_end(toks, k, block);
                    let is_trait_alias_or_item =
                        |w: &str| !matches!(w, "fn" | "mut" | "unsafe" | "async" | "extern" | "_");
                    if let Some(name) = toks[k + 1..end.min(k + 4)]
                        .iter()
                        .filter_map(Token::ident)
                        .find(|w| is_trait_alias_or_item(w))
                    {
                        self.modules[module].items.insert(name.to_owned());
                    }
                    self.code_paths(&toks[k..=end], module);
                    end
                }
                _ => {
                    // impl blocks, item macros, anything else: only their paths matter.
                    let end = item_end(toks, k, true);
                    self.code_paths(&toks[k..=end], module);
                    end
                }
            };
            if !matches!(word, "pub" | "async" | "unsafe" | "extern" | "default") {
                attrs = Attrs::default();
            }
            k = end + 1;
        }
    }

    /// `mod x;` or `mod x { .. }` at `k`; a `#[cfg(test)]` one is skipped whole.
    fn mod_item(&mut self, toks: &[Token], k: usize, module: usize, attrs: &Attrs) -> usize {
        let Some(name) = toks.get(k + 1).and_then(Token::ident) else {
            return k;
        };
        let end = item_end(toks, k, true);
        if attrs.cfg_test {
            return end;
        }
        let dir = self.modules[module].dir.join(name);
        if toks[end].is_punct(';') {
            let here = self.modules[module].dir.clone();
            let path = match &attrs.path {
                Some(p) => self.files[self.modules[module].file]
                    .parent()
                    .unwrap()
                    .join(p),
                None if here.join(format!("{name}.rs")).exists() => here.join(format!("{name}.rs")),
                None => here.join(name).join("mod.rs"),
            };
            if path.exists() {
                let dir = if path.ends_with("mod.rs") || attrs.path.is_some() {
                    path.parent().unwrap().to_path_buf()
                } else {
                    dir
                };
                self.load_file(&path, Some(module), Some(name), dir);
            }
        } else {
            let file = self.modules[module].file;
            let inner = self.new_module(file, Some(module), Some(name), dir);
            self.parse_items(&toks[k + 3..end], inner);
        }
        end
    }

    fn use_item(&mut self, toks: &[Token], module: usize, public: bool) {
        let mut leaves = Vec::new();
        let mut i = 0;
        use_tree(toks, &mut i, Vec::new(), &mut leaves);
        for leaf in leaves {
            let path = PathRef {
                module,
                segs: leaf.segs,
                line: leaf.line,
            };
            match leaf.alias {
                None => {
                    self.modules[module].globs.push(path.clone());
                    if !public {
                        self.globs.push(path);
                    }
                }
                Some(alias) => {
                    if alias != "_" {
                        self.modules[module]
                            .uses
                            .insert(alias.clone(), path.clone());
                    }
                    if public {
                        self.reexports.push((path, alias));
                    } else {
                        self.uses.push(path);
                    }
                }
            }
        }
    }

    /// Records the paths (`a::b::c`) in `toks` and the identifiers the module's code names.
    fn code_paths(&mut self, toks: &[Token], module: usize) {
        let mut k = 0;
        while k < toks.len() {
            let t = &toks[k];
            if t.is_ident("use") {
                // A `use` inside a function body: a binding like any other.
                let end = item_end(toks, k, false);
                self.use_item(&toks[k + 1..end], module, false);
                k = end + 1;
                continue;
            }
            if let Some(w) = t.ident() {
                self.idents.entry(module).or_default().insert(w.to_owned());
            }
            let after_path =
                k > 0 && matches!(toks[k - 1].tok, Tok::PathSep | Tok::Punct('$' | '.'));
            if t.ident().is_some()
                && !after_path
                && toks.get(k + 1).is_some_and(|t| t.tok == Tok::PathSep)
            {
                let mut segs = vec![t.ident().unwrap().to_owned()];
                let mut j = k + 1;
                while toks.get(j).is_some_and(|t| t.tok == Tok::PathSep) {
                    match toks.get(j + 1).and_then(Token::ident) {
                        Some(w) => segs.push(w.to_owned()),
                        None => break,
                    }
                    j += 2;
                }
                self.code.push(PathRef {
                    module,
                    segs,
                    line: t.line,
                });
                k = j;
                continue;
            }
            k += 1;
        }
    }

    fn root_of(&self) -> usize {
        0
    }

    /// What `segs`, written in module `from`, names.
    fn resolve(&self, from: usize, segs: &[String], depth: usize) -> Option<Res> {
        if depth > 24 || segs.is_empty() {
            return None;
        }
        let (mut cur, rest) = match segs[0].as_str() {
            "crate" => (self.root_of(), &segs[1..]),
            "self" => (from, &segs[1..]),
            _ => (from, segs),
        };
        for (k, seg) in rest.iter().enumerate() {
            match seg.as_str() {
                "super" => cur = self.modules[cur].parent?,
                "self" => {}
                _ => match self.lookup(cur, seg, depth, k == 0)? {
                    Res::Module(m) => cur = m,
                    item => return Some(item),
                },
            }
        }
        Some(Res::Module(cur))
    }

    /// `name` in module `m`: a child module, an item defined there, a `use` binding or
    /// a glob's name.
    fn lookup(&self, m: usize, name: &str, depth: usize, first: bool) -> Option<Res> {
        let module = &self.modules[m];
        if let Some(&child) = module.children.get(name) {
            return Some(Res::Module(child));
        }
        if module.items.contains(name) {
            return Some(Res::Item {
                file: module.file,
                name: name.to_owned(),
            });
        }
        if let Some(target) = module.uses.get(name) {
            // A binding to itself (`use foo;` of an extern crate) names nothing here.
            if target.segs.len() > 1 || target.segs[0] != name || !first {
                return self.resolve(target.module, &target.segs, depth + 1);
            }
        }
        for glob in &module.globs {
            if let Some(Res::Module(g)) = self.resolve(glob.module, &glob.segs, depth + 1)
                && g != m
                && let Some(res) = self.lookup(g, name, depth + 1, false)
            {
                return Some(res);
            }
        }
        None
    }

    /// The file-level dependency graph: which file names an item defined in which.
    fn file_graph(&self) -> Graph {
        let name_of = |file: usize| rel(&self.files[file]);
        let mut graph = Graph::new();
        for file in 0..self.files.len() {
            graph.entry(name_of(file)).or_default();
        }
        let mut refs: Vec<&PathRef> = self.uses.iter().chain(&self.code).collect();
        let used_reexports: Vec<&PathRef> = self
            .reexports
            .iter()
            .filter(|(p, alias)| {
                self.idents
                    .get(&p.module)
                    .is_some_and(|ids| ids.contains(alias))
            })
            .map(|(p, _)| p)
            .collect();
        refs.extend(used_reexports);
        for r in refs {
            let from = self.modules[r.module].file;
            if let Some(Res::Item { file, name }) = self.resolve(r.module, &r.segs, 0) {
                add_edge(&mut graph, &name_of(from), &name_of(file), &name, r.line);
            }
        }
        for g in &self.globs {
            let from = self.modules[g.module].file;
            let name = format!("{}::*", g.segs.join("::"));
            match self.resolve(g.module, &g.segs, 0) {
                Some(Res::Module(m)) => add_edge(
                    &mut graph,
                    &name_of(from),
                    &name_of(self.modules[m].file),
                    &name,
                    g.line,
                ),
                // `use crate::a::Enum::*`: the enum's file.
                Some(Res::Item { file, .. }) => {
                    add_edge(&mut graph, &name_of(from), &name_of(file), &name, g.line)
                }
                None => {}
            }
        }
        graph
    }
}

/// The attributes read before an item.
#[derive(Debug, Default)]
struct Attrs {
    cfg_test: bool,
    path: Option<String>,
}

impl Attrs {
    fn read(&mut self, inner: &[Token]) {
        let is = |k: usize, w: &str| inner.get(k).is_some_and(|t| t.is_ident(w));
        if is(0, "cfg") && inner.get(1).is_some_and(|t| t.is_punct('(')) && is(2, "test") {
            self.cfg_test = true;
        }
        if is(0, "path")
            && inner.get(1).is_some_and(|t| t.is_punct('='))
            && let Some(Tok::Str(p)) = inner.get(2).map(|t| &t.tok)
        {
            self.path = Some(p.clone());
        }
    }
}

/// One leaf of a `use` tree: the full path, and the name it binds (None: a glob).
#[derive(Debug, PartialEq)]
struct UseLeaf {
    segs: Vec<String>,
    alias: Option<String>,
    line: usize,
}

/// Reads the `use` tree at `*i` (after `use`, before `;`), prefixed by `prefix`.
fn use_tree(toks: &[Token], i: &mut usize, mut prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    if toks.get(*i).is_some_and(|t| t.tok == Tok::PathSep) {
        *i += 1;
    }
    while let Some(t) = toks.get(*i) {
        match &t.tok {
            Tok::Ident(w) if w == "as" => {
                let alias = toks
                    .get(*i + 1)
                    .and_then(Token::ident)
                    .unwrap_or("_")
                    .to_owned();
                *i += 2;
                out.push(UseLeaf {
                    segs: prefix,
                    alias: Some(alias),
                    line: t.line,
                });
                return;
            }
            Tok::Ident(w) => {
                prefix.push(w.clone());
                *i += 1;
                if toks.get(*i).is_some_and(|t| t.tok == Tok::PathSep) {
                    *i += 1;
                    continue;
                }
                let mut segs = prefix;
                if segs.last().is_some_and(|s| s == "self") {
                    segs.pop();
                }
                let mut alias = segs.last().cloned();
                if toks.get(*i).is_some_and(|t| t.is_ident("as")) {
                    alias = toks.get(*i + 1).and_then(Token::ident).map(str::to_owned);
                    *i += 2;
                }
                out.push(UseLeaf {
                    segs,
                    alias,
                    line: t.line,
                });
                return;
            }
            Tok::Punct('*') => {
                *i += 1;
                out.push(UseLeaf {
                    segs: prefix,
                    alias: None,
                    line: t.line,
                });
                return;
            }
            Tok::Punct('{') => {
                *i += 1;
                while toks.get(*i).is_some_and(|t| !t.is_punct('}')) {
                    use_tree(toks, i, prefix.clone(), out);
                    if toks.get(*i).is_some_and(|t| t.is_punct(',')) {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => {
                *i += 1;
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Circles

/// Every circle of `graph`: per strongly connected part, one shortest cycle through it
/// and every edge inside it, with the names that tie each.
fn circles(graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for part in strongly_connected(graph) {
        if part.len() < 2 {
            continue;
        }
        let inside: BTreeSet<&String> = part.iter().collect();
        let start = part.iter().min().expect("a file");
        let cycle = shortest_cycle(graph, start, &inside);
        let mut text = format!("a circle of {} files: {}", part.len(), cycle.join(" -> "));
        for from in &part {
            for (to, edge) in &graph[from] {
                if inside.contains(to) {
                    let names: Vec<&str> = edge.names.iter().map(String::as_str).collect();
                    text.push_str(&format!(
                        "\n    {from}:{} -> {to}: {}",
                        edge.line,
                        names.join(", ")
                    ));
                }
            }
        }
        out.push(text);
    }
    out
}

/// Tarjan's strongly connected components, each sorted.
fn strongly_connected(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        parts: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut part = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                part.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            part.sort();
            s.parts.push(part);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        parts: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.parts.sort();
    s.parts
}

/// The shortest cycle from `start` back to it inside `inside`, with each edge's names.
fn shortest_cycle(graph: &Graph, start: &String, inside: &BTreeSet<&String>) -> Vec<String> {
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut last = None;
    'search: while let Some(v) = queue.pop_front() {
        for to in graph[v].keys() {
            if !inside.contains(to) {
                continue;
            }
            if to == start {
                last = Some(v);
                break 'search;
            }
            if !prev.contains_key(to) {
                prev.insert(to, v);
                queue.push_back(to);
            }
        }
    }
    let mut files = vec![start];
    let mut v = last.expect("a cycle in a strongly connected part");
    while v != start {
        files.push(v);
        v = prev[v];
    }
    files.push(start);
    files.reverse();
    let short = |f: &String| {
        f.rsplit_once("/src/")
            .map_or(f.clone(), |(_, s)| s.to_owned())
    };
    let mut out = vec![short(files[0])];
    for pair in files.windows(2) {
        let names: Vec<&str> = graph[pair[0]][pair[1]]
            .names
            .iter()
            .map(String::as_str)
            .collect();
        out.push(format!("{} ({})", short(pair[1]), names.join(", ")));
    }
    out
}

// ---------------------------------------------------------------------------------------
// Python imports

/// The import graph of one Python package's modules (imports inside functions too).
fn python_graph(package: &Path) -> Graph {
    let mut graph = Graph::new();
    let name = package.file_name().unwrap().to_string_lossy().to_string();
    let mut files = Vec::new();
    files_under(package, "py", &mut files);
    for file in files {
        let from = rel(&file);
        graph.entry(from.clone()).or_default();
        for import in python_imports(&read(&file)) {
            for (module, what) in import.targets(&name) {
                let target = python_module_file(package, &module);
                if let Some(target) = target {
                    add_edge(&mut graph, &from, &rel(&target), &what, import.line);
                }
            }
        }
    }
    graph
}

/// `a.b` inside the package -> `a/b.py` or `a/b/__init__.py`; `""` -> `__init__.py`.
/// A name that is no module (`from .models import Outcome` gives `models.Outcome`) is
/// its parent module's.
fn python_module_file(package: &Path, module: &str) -> Option<PathBuf> {
    let mut path = package.to_path_buf();
    for part in module.split('.').filter(|p| !p.is_empty()) {
        path.push(part);
    }
    let file = path.with_extension("py");
    if !module.is_empty() && file.exists() {
        return Some(file);
    }
    let init = path.join("__init__.py");
    if init.exists() {
        return Some(init);
    }
    let parent = module.rsplit_once('.').map_or("", |(p, _)| p);
    (!module.is_empty())
        .then(|| python_module_file(package, parent))
        .flatten()
}

#[derive(Debug, PartialEq)]
struct PyImport {
    line: usize,
    /// `from X import a, b`: Some(X); `import a.b, c`: None.
    from: Option<String>,
    names: Vec<String>,
}

impl PyImport {
    /// (module inside `package`, the name imported) for each name this import binds.
    fn targets(&self, package: &str) -> Vec<(String, String)> {
        let inside = |module: &str| -> Option<String> {
            if module == package {
                Some(String::new())
            } else if let Some(rest) = module.strip_prefix(&format!("{package}.")) {
                Some(rest.to_owned())
            } else if module == "." {
                Some(String::new())
            } else if module.starts_with('.') && !module.starts_with("..") {
                Some(module[1..].to_owned())
            } else {
                None
            }
        };
        match &self.from {
            None => self
                .names
                .iter()
                .filter_map(|m| inside(m).map(|inner| (inner, m.clone())))
                .collect(),
            Some(from) => {
                let Some(module) = inside(from) else {
                    return Vec::new();
                };
                self.names
                    .iter()
                    .map(|n| {
                        // `from . import x`: x may be a module of the package.
                        let sub = if module.is_empty() {
                            n.clone()
                        } else {
                            format!("{module}.{n}")
                        };
                        (sub, n.clone())
                    })
                    .collect()
            }
        }
    }
}

/// The import statements of a Python file, outside strings and comments.
fn python_imports(text: &str) -> Vec<PyImport> {
    let mut out = Vec::new();
    for (line, stmt) in python_statements(text) {
        for part in stmt.split(';') {
            let words: Vec<&str> = part
                .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
                .filter(|w| !w.is_empty())
                .collect();
            let names = |ws: &[&str]| -> Vec<String> {
                let mut names = Vec::new();
                let mut k = 0;
                while k < ws.len() {
                    if ws[k] == "as" {
                        k += 2;
                        continue;
                    }
                    names.push(ws[k].to_owned());
                    k += 1;
                }
                names
            };
            match words.as_slice() {
                ["import", rest @ ..] => out.push(PyImport {
                    line,
                    from: None,
                    names: names(rest),
                }),
                ["from", module, "import", rest @ ..] => out.push(PyImport {
                    line,
                    from: Some((*module).to_owned()),
                    names: names(rest),
                }),
                _ => {}
            }
        }
    }
    out
}

/// Logical lines (brackets and `\` joined), strings and comments blanked, with the
/// line each starts on.
fn python_statements(text: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut cur, mut start, mut line, mut depth) = (String::new(), 1, 1, 0i32);
    let mut k = 0;
    while k < chars.len() {
        let c = chars[k];
        match c {
            '#' => {
                while k < chars.len() && chars[k] != '\n' {
                    k += 1;
                }
                continue;
            }
            '"' | '\'' => {
                let triple = chars.get(k + 1) == Some(&c) && chars.get(k + 2) == Some(&c);
                let q = if triple { 3 } else { 1 };
                k += q;
                while k < chars.len() {
                    if chars[k] == '\\' {
                        if chars.get(k + 1) == Some(&'\n') {
                            line += 1;
                        }
                        k += 2;
                        continue;
                    }
                    if chars[k] == '\n' {
                        line += 1;
                        if !triple {
                            break;
                        }
                    }
                    if chars[k] == c
                        && (!triple
                            || (chars.get(k + 1) == Some(&c) && chars.get(k + 2) == Some(&c)))
                    {
                        k += q;
                        break;
                    }
                    k += 1;
                }
                cur.push_str("\"\"");
                continue;
            }
            '\\' if chars.get(k + 1) == Some(&'\n') => {
                k += 2;
                line += 1;
                cur.push(' ');
                continue;
            }
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '\n' => {
                line += 1;
                if depth <= 0 {
                    out.push((start, std::mem::take(&mut cur)));
                    start = line;
                    depth = 0;
                    k += 1;
                    continue;
                }
                cur.push(' ');
                k += 1;
                continue;
            }
            _ => {}
        }
        if cur.trim().is_empty() && !c.is_whitespace() {
            start = line;
        }
        cur.push(c);
        k += 1;
    }
    out.push((start, cur));
    // A statement after a block's colon (`if TYPE_CHECKING: import x`) starts a line too.
    out.into_iter()
        .map(|(l, s)| {
            let s = s.trim().to_owned();
            match s.split_once(": ") {
                Some((head, tail))
                    if !head.contains("import") && tail.trim_start().starts_with("import") =>
                {
                    (l, tail.to_owned())
                }
                Some((head, tail))
                    if !head.contains("import") && tail.trim_start().starts_with("from ") =>
                {
                    (l, tail.to_owned())
                }
                _ => (l, s),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Markdown

/// The lines of a markdown page outside fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (k, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((k + 1, line)),
            _ => {}
        }
    }
    out
}

/// The fenced code blocks of a page: (info string, first line number, lines).
fn fenced_blocks(text: &str) -> Vec<(String, usize, Vec<&str>)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize, Vec<&str>)> = None;
    for (k, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (&mut open, marker) {
            (None, Some(m)) => {
                let info = trimmed
                    .trim_start_matches(m.chars().next().unwrap())
                    .trim()
                    .to_owned();
                open = Some((m.to_owned(), info, k + 2, Vec::new()));
            }
            (Some((m, ..)), Some(close))
                if m == close
                    && trimmed
                        .trim_start_matches(close.chars().next().unwrap())
                        .trim()
                        .is_empty() =>
            {
                let (_, info, first, lines) = open.take().unwrap();
                out.push((info, first, lines));
            }
            (Some((.., lines)), _) => lines.push(line),
            (None, None) => {}
        }
    }
    out
}

/// The spans between backticks on a line (inline code).
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// `line` with its inline code spans removed.
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The targets of `[text](target)` links and `[label]: target` definitions.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some((label, rest)) = trimmed.split_once("]:")
        && !label.contains('(')
        && let Some(target) = rest.split_whitespace().next()
    {
        out.push(target.to_owned());
    }
    let mut rest = line;
    while let Some(k) = rest.find("](") {
        let after = &rest[k + 2..];
        let mut depth = 0;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => return true,
                    ')' => depth -= 1,
                    _ => {}
                }
                false
            })
            .map_or(after.len(), |(e, _)| e);
        let target = after[..end].trim();
        let target = target.split_once(" \"").map_or(target, |(t, _)| t);
        out.push(
            target
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned(),
        );
        rest = &after[end..];
    }
    out
}

/// Whether `path` exists inside the repository (a clone has nothing beside it).
fn in_repo(path: &Path) -> bool {
    let mut normal = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                normal.pop();
            }
            std::path::Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal.starts_with(repo()) && normal.exists()
}

/// Every relative link of the page at `doc` (and backticked `*.md` path) that names a
/// file that does not exist.
fn dead_links(doc: &Path, text: &str) -> Vec<String> {
    let dir = doc.parent().unwrap();
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        for target in link_targets(&without_code(line)) {
            let external = target.contains("://") || target.starts_with("mailto:");
            let path = target
                .split(['#', '?'])
                .next()
                .unwrap_or("")
                .replace("%20", " ");
            if external || path.is_empty() {
                continue;
            }
            let resolved = match path.strip_prefix('/') {
                Some(from_root) => repo().join(from_root),
                None => dir.join(&path),
            };
            if !in_repo(&resolved) {
                out.push(format!(
                    "{}:{n}: link to `{target}`: no such file",
                    rel(doc)
                ));
            }
        }
        for span in code_spans(line) {
            let path = span.split('#').next().unwrap_or("");
            let looks_like_doc = path.ends_with(".md")
                && !path.contains(char::is_whitespace)
                && !path.contains(['*', '{', '<']);
            if looks_like_doc && !in_repo(&dir.join(path)) && !in_repo(&repo().join(path)) {
                out.push(format!(
                    "{}:{n}: names `{span}`: no such file in the repository",
                    rel(doc)
                ));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Commands in the docs

#[derive(Debug)]
struct ShellCommand {
    line: usize,
    text: String,
    /// The CLI's arguments (after `oncegate`), or the words of a `cargo run` line.
    words: Vec<String>,
}

/// Every `oncegate` command of the page's sh/bash/shell blocks.
fn shell_commands(text: &str) -> Vec<ShellCommand> {
    let mut out = Vec::new();
    for (info, first, lines) in fenced_blocks(text) {
        let lang = info.split([' ', ',', '{']).next().unwrap_or("");
        if !matches!(lang, "sh" | "bash" | "shell") {
            continue;
        }
        let mut k = 0;
        while k < lines.len() {
            let start = k;
            let mut logical = String::new();
            loop {
                let line = lines[k];
                k += 1;
                match line.trim_end().strip_suffix('\\') {
                    Some(head) if k < lines.len() => {
                        logical.push_str(head);
                        logical.push(' ');
                    }
                    _ => {
                        logical.push_str(line);
                        break;
                    }
                }
            }
            for words in shell_words(&logical) {
                if let Some(words) = oncegate_words(&words) {
                    out.push(ShellCommand {
                        line: first + start,
                        text: logical.trim().to_owned(),
                        words,
                    });
                }
            }
        }
    }
    out
}

/// The simple commands of one shell line: words split like a shell (quotes, `\`
/// escapes, `#` comments), `$VAR`s replaced by a placeholder, redirections dropped, and
/// split at `|`, `&&`, `||`, `;` and `&`.
fn shell_words(line: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = line.chars().collect();
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut redirect = false;
    let mut k = 0;
    let finish =
        |word: &mut Option<String>, redirect: &mut bool, commands: &mut Vec<Vec<String>>| {
            if let Some(w) = word.take() {
                if *redirect {
                    *redirect = false;
                } else {
                    commands.last_mut().unwrap().push(w);
                }
            }
        };
    while k < chars.len() {
        let c = chars[k];
        match c {
            ' ' | '\t' => finish(&mut word, &mut redirect, &mut commands),
            '#' if word.is_none() => break,
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                k += 1;
                while k < chars.len() && chars[k] != '\'' {
                    w.push(chars[k]);
                    k += 1;
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                k += 1;
                while k < chars.len() && chars[k] != '"' {
                    if chars[k] == '\\' && matches!(chars.get(k + 1), Some('"' | '\\' | '$' | '`'))
                    {
                        k += 1;
                        w.push(chars[k]);
                    } else if chars[k] == '$' {
                        k = skip_variable(&chars, k, w);
                        continue;
                    } else {
                        w.push(chars[k]);
                    }
                    k += 1;
                }
            }
            '\\' => {
                k += 1;
                if let Some(&next) = chars.get(k) {
                    word.get_or_insert_with(String::new).push(next);
                }
            }
            '$' => {
                k = skip_variable(&chars, k, word.get_or_insert_with(String::new));
                continue;
            }
            '>' | '<' => {
                // `2>&1`, `> file`, `< file`: the descriptor and the target are not words.
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
                {
                    word = None;
                }
                finish(&mut word, &mut redirect, &mut commands);
                while matches!(chars.get(k + 1), Some('>' | '<' | '&')) {
                    k += 1;
                }
                if chars.get(k + 1).is_some_and(|c| c.is_ascii_digit())
                    && chars.get(k).is_some_and(|&c| c == '&')
                {
                    k += 1;
                } else {
                    redirect = true;
                }
            }
            '|' | '&' | ';' => {
                finish(&mut word, &mut redirect, &mut commands);
                while matches!(chars.get(k + 1), Some('|' | '&')) {
                    k += 1;
                }
                commands.push(Vec::new());
            }
            _ => word.get_or_insert_with(String::new).push(c),
        }
        k += 1;
    }
    finish(&mut word, &mut redirect, &mut commands);
    commands.retain(|c| !c.is_empty());
    commands
}

/// Skips `$NAME`, `${NAME}` or `$(...)` at `chars[k]`, pushing a placeholder value.
fn skip_variable(chars: &[char], mut k: usize, word: &mut String) -> usize {
    k += 1;
    match chars.get(k) {
        Some('{') => {
            while k < chars.len() && chars[k] != '}' {
                k += 1;
            }
            k += 1;
        }
        Some('(') => {
            let mut depth = 0;
            while k < chars.len() {
                match chars[k] {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            k += 1;
                            break;
                        }
                    }
                    _ => {}
                }
                k += 1;
            }
        }
        Some(c) if c.is_alphanumeric() || *c == '_' => {
            while chars
                .get(k)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
            {
                k += 1;
            }
        }
        _ => {
            word.push('$');
            return k;
        }
    }
    // A port, a token, a URL's tail: "1" parses as each the CLI takes from a variable.
    word.push('1');
    k
}

/// The words after `oncegate` (or a `cargo run ... --` of it), env assignments dropped;
/// None when the command does not run oncegate. A `cargo run` keeps its own words.
fn oncegate_words(words: &[String]) -> Option<Vec<String>> {
    let is_assignment = |w: &String| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let words: Vec<String> = words
        .iter()
        .skip_while(|w| is_assignment(w))
        .cloned()
        .collect();
    let first = words.first()?;
    let binary = first == "oncegate" || (first.ends_with("/oncegate") && first.contains("target/"));
    if binary {
        let mut out = vec!["oncegate".to_owned()];
        out.extend(words[1..].iter().cloned());
        return Some(out);
    }
    let cargo_run = first == "cargo" && words.get(1).is_some_and(|w| w == "run");
    let package = words
        .windows(2)
        .find(|w| w[0] == "-p" || w[0] == "--package" || w[0] == "--bin")
        .map(|w| w[1].clone());
    let ours = package.is_none_or(|p| p == "oncegate-cli" || p == "oncegate");
    (cargo_run && ours).then_some(words)
}

/// Whether the CLI accepts `words` (as [`oncegate_words`] gives them).
fn check_command(words: &[String]) -> Result<(), String> {
    let args: Vec<String> = if words[0] == "cargo" {
        let dashes = words.iter().position(|w| w == "--");
        if !words[..dashes.unwrap_or(words.len())]
            .iter()
            .any(|w| w == "--release" || w == "-r")
        {
            return Err("a `cargo run` without `--release`: a debug build takes minutes and runs slowly; add `--release`".into());
        }
        let mut args = vec!["oncegate".to_owned()];
        args.extend(dashes.map_or(&[][..], |d| &words[d + 1..]).iter().cloned());
        args
    } else {
        words.to_vec()
    };
    match cli_command().try_get_matches_from(&args) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e
            .to_string()
            .lines()
            .next()
            .unwrap_or("refused")
            .replace("error: ", "")),
    }
}

/// The CLI's clap definition, with every argument that an environment variable can
/// give made optional: a page sets those once (`export ONCEGATE_TOKEN=..`) for the
/// commands after it.
fn cli_command() -> clap::Command {
    fn relax(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            if a.get_env().is_some() {
                a.required(false)
            } else {
                a
            }
        })
        .mut_subcommands(relax)
    }
    relax(oncegate_cli::Cli::command())
}

// ---------------------------------------------------------------------------------------
// ARCHITECTURE.md's code map

/// The code map's tree: each entry's path (as written, parents joined) and line.
fn code_map_entries(text: &str) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    let Some((_, first, lines)) = fenced_blocks(text)
        .into_iter()
        .find(|(_, _, lines)| lines.first().is_some_and(|l| l.trim_end() == "crates/"))
    else {
        return out;
    };
    // (indent, path) of the entries above the current one.
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (k, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let head = line.trim_start().split("  ").next().unwrap_or("").trim();
        let path_like = |s: &str| {
            s.ends_with('/')
                || s.rsplit_once('.').is_some_and(|(_, ext)| {
                    matches!(ext, "rs" | "md" | "toml" | "py" | "cedar" | "sql")
                })
        };
        if indent >= 16 || head.is_empty() || !head.split(", ").all(path_like) {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let parent = stack.last().map_or(String::new(), |(_, p)| p.clone());
        for name in head.split(", ") {
            out.push((first + k, format!("{parent}{name}"), indent));
        }
        if head.ends_with('/') && !head.contains(", ") {
            stack.push((indent, format!("{parent}{head}")));
        }
    }
    out
}

/// Whether a code-map or backticked path exists: under a crate, relative to the crate
/// or to its `src`.
fn map_path_exists(path: &str) -> bool {
    let root = repo();
    let path = path.trim_end_matches('/');
    if root.join(path).exists() {
        return true;
    }
    let mut parts = path.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("crates"), Some(krate), Some(rest)) => root
            .join("crates")
            .join(krate)
            .join("src")
            .join(rest)
            .exists(),
        _ => false,
    }
}

/// Paths under `crates/` or `clients/` that the code map or a backticked span names and
/// that do not exist.
fn stale_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (line, path, _) in code_map_entries(text) {
        if !map_path_exists(&path) {
            out.push(format!(
                "ARCHITECTURE.md:{line}: the code map names `{path}`: no such file or folder"
            ));
        }
    }
    let crates: BTreeSet<String> = crate_dirs()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    for (n, line) in text.lines().enumerate() {
        for span in code_spans(line) {
            let span = span.trim_end_matches(['.', ',', ':']);
            if span.contains(|c: char| c.is_whitespace() || matches!(c, '*' | '{' | '<' | '(')) {
                continue;
            }
            let path = match span.split_once('/') {
                Some(("crates" | "clients", _)) => span.to_owned(),
                Some((first, _)) if crates.contains(first) => format!("crates/{span}"),
                _ => continue,
            };
            if !map_path_exists(&path) {
                out.push(format!(
                    "ARCHITECTURE.md:{}: names `{span}`: no such file or folder",
                    n + 1
                ));
            }
        }
    }
    out
}

/// Top-level modules (`x.rs`, `x/`) of each crate's `src` that its part of the code map
/// does not name.
fn unnamed_modules(text: &str) -> Vec<String> {
    let entries = code_map_entries(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for krate in crate_dirs() {
        let name = krate.file_name().unwrap().to_string_lossy().to_string();
        let section = crate_section(&entries, &lines, &name);
        let whole = format!("{name}/src/");
        for (stem, forms) in top_level_modules(&krate.join("src")) {
            let named = [format!("{stem}.rs"), format!("{stem}/")]
                .iter()
                .any(|form| {
                    section.as_deref().is_some_and(|s| names_module(s, form))
                        || text.contains(&format!("{whole}{form}"))
                });
            if !named {
                let shown = format!("crates/{name}/src/{}", forms.join(" + "));
                let place = if section.is_some() {
                    "its crate's part"
                } else {
                    "the code map (the crate has no part in it)"
                };
                out.push(format!(
                    "{shown}: not named in {place} of ARCHITECTURE.md; say what it is for there"
                ));
            }
        }
    }
    out
}

/// The code map's text from the crate's entry to the next entry at its depth or above.
fn crate_section(
    entries: &[(usize, String, usize)],
    lines: &[&str],
    krate: &str,
) -> Option<String> {
    let at = entries
        .iter()
        .position(|(_, p, _)| p == &format!("crates/{krate}/"))?;
    let (start, _, indent) = &entries[at];
    let end = entries[at + 1..]
        .iter()
        .find(|(_, _, i)| i <= indent)
        .map_or(lines.len() + 1, |(l, _, _)| *l);
    Some(lines[start - 1..end - 1].join("\n"))
}

/// Whether `text` names `module` (`x.rs` or `x/`) as a top-level name, not as the tail of
/// a longer path.
fn names_module(text: &str, module: &str) -> bool {
    text.match_indices(module).any(|(k, _)| {
        let before = text[..k].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '/' | '.' | '-'))
            && (module.ends_with('/')
                || !text[k + module.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    })
}

/// The top-level modules under `src` (without lib.rs and main.rs), by name: the ways
/// each is written (`x.rs`, `x/` for a folder holding Rust files, or both).
fn top_level_modules(src: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in sorted_entries(src) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let mut rs = Vec::new();
            files_under(&path, "rs", &mut rs);
            if !rs.is_empty() {
                out.entry(name.clone())
                    .or_default()
                    .push(format!("{name}/"));
            }
        } else if let Some(stem) = name.strip_suffix(".rs")
            && stem != "lib"
            && stem != "main"
        {
            out.entry(stem.to_owned()).or_default().push(name.clone());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The checks' own tests, on small fixtures

#[cfg(test)]
mod fixtures {
    use super::*;

    /// A crate written into a temporary directory: (relative path, text) pairs.
    fn krate(files: &[(&str, &str)]) -> (tempfile::TempDir, Graph) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let graph = ModuleTree::load(&dir.path().join("src/lib.rs")).file_graph();
        // Paths outside the repository stay absolute; keep what follows `src/`.
        let short = |f: &str| {
            f.rsplit_once("/src/")
                .map_or(f.to_owned(), |(_, s)| s.to_owned())
        };
        let graph = graph
            .into_iter()
            .map(|(from, to)| {
                (
                    short(&from),
                    to.into_iter().map(|(t, e)| (short(&t), e)).collect(),
                )
            })
            .collect();
        (dir, graph)
    }

    fn edge_names(graph: &Graph, from: &str, to: &str) -> Vec<String> {
        graph
            .get(from)
            .and_then(|e| e.get(to))
            .map(|e| e.names.iter().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn tidy_fixture_a_circle_is_found_with_its_names() {
        let (_dir, graph) = krate(&[
            ("src/lib.rs", "mod a;\nmod b;\n"),
            (
                "src/a.rs",
                "use crate::b::Foo;\npub fn bar() -> Foo { Foo }\n",
            ),
            ("src/b.rs", "pub struct Foo;\nfn x() { super::a::bar(); }\n"),
        ]);
        assert_eq!(edge_names(&graph, "a.rs", "b.rs"), ["Foo"]);
        assert_eq!(edge_names(&graph, "b.rs", "a.rs"), ["bar"]);
        let found = circles(&graph);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("a.rs -> b.rs (Foo) -> a.rs (bar)"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn tidy_fixture_a_tree_passes() {
        let (_dir, graph) = krate(&[
            ("src/lib.rs", "mod low;\nmod high;\npub use high::top;\n"),
            (
                "src/low.rs",
                "/// Not `crate::high::top`.\npub struct Base;\n",
            ),
            (
                "src/high.rs",
                "use crate::low::Base;\n// crate::high::x is a comment\npub fn top() -> Base { let _s = \"super::x\"; Base }\n",
            ),
        ]);
        assert_eq!(edge_names(&graph, "high.rs", "low.rs"), ["Base"]);
        assert!(circles(&graph).is_empty(), "{graph:?}");
    }

    #[test]
    fn tidy_fixture_a_reexport_is_followed_and_not_an_edge_itself() {
        let (_dir, graph) = krate(&[
            ("src/lib.rs", "mod config;\nmod policy;\n"),
            (
                "src/config/mod.rs",
                "mod model;\npub use model::{Capability, Limits as L};\npub use self::model::*;\n",
            ),
            (
                "src/config/model.rs",
                "pub struct Capability;\npub struct Limits;\n",
            ),
            (
                "src/policy.rs",
                "use crate::config::{Capability, L};\npub fn compile(_c: Capability, _l: L) {}\n",
            ),
        ]);
        // policy depends on the file that defines the names, not on the mod.rs.
        assert_eq!(
            edge_names(&graph, "policy.rs", "config/model.rs"),
            ["Capability", "Limits"]
        );
        assert!(edge_names(&graph, "policy.rs", "config/mod.rs").is_empty());
        // The mod.rs's `mod` and `pub use` lines are not edges.
        assert!(edge_names(&graph, "config/mod.rs", "config/model.rs").is_empty());
        assert!(circles(&graph).is_empty());
    }

    #[test]
    fn tidy_fixture_a_reexport_the_file_uses_is_an_edge() {
        let (_dir, graph) = krate(&[
            ("src/lib.rs", "mod config;\n"),
            (
                "src/config/mod.rs",
                "mod policy;\npub use policy::Compiled;\npub struct Registry { p: Compiled }\n",
            ),
            (
                "src/config/policy.rs",
                "use super::Registry;\npub struct Compiled;\nfn f(_r: &Registry) {}\n",
            ),
        ]);
        assert_eq!(
            edge_names(&graph, "config/mod.rs", "config/policy.rs"),
            ["Compiled"]
        );
        assert_eq!(circles(&graph).len(), 1);
    }

    #[test]
    fn tidy_fixture_globs_inline_modules_and_tests() {
        let (_dir, graph) = krate(&[
            ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            (
                "src/a.rs",
                "use super::b::*;\nmod inner { pub fn f() { crate::c::g(); } }\n#[cfg(test)]\nmod tests { use crate::b::B; }\n",
            ),
            (
                "src/b.rs",
                "pub struct B;\n#[cfg(test)]\nmod tests { fn t() { crate::a::x(); } }\n",
            ),
            ("src/c.rs", "pub fn g() {}\n"),
        ]);
        assert_eq!(edge_names(&graph, "a.rs", "b.rs"), ["super::b::*"]);
        assert_eq!(edge_names(&graph, "a.rs", "c.rs"), ["g"]);
        assert!(edge_names(&graph, "b.rs", "a.rs").is_empty());
    }

    #[test]
    fn tidy_fixture_module_aliases_resolve_through_use() {
        let (_dir, graph) = krate(&[
            ("src/lib.rs", "mod routes;\nmod console;\n"),
            ("src/routes/mod.rs", "pub mod approvals;\n"),
            ("src/routes/approvals.rs", "pub async fn decide() {}\n"),
            (
                "src/console.rs",
                "use crate::routes::{self, approvals};\nfn f() { approvals::decide(); routes::approvals::decide(); }\n",
            ),
        ]);
        assert_eq!(
            edge_names(&graph, "console.rs", "routes/approvals.rs"),
            ["decide"]
        );
        assert!(edge_names(&graph, "console.rs", "routes/mod.rs").is_empty());
    }

    #[test]
    fn tidy_fixture_the_lexer_skips_what_is_not_code() {
        let src = "let a = r#\"crate::x \"quoted\" \"#; let c = '\"'; let l: &'static str = \"}\";\n/* /* nested */ crate::y */ b'{';";
        let idents: Vec<String> = lex(src)
            .iter()
            .filter_map(|t| t.ident().map(str::to_owned))
            .collect();
        assert_eq!(idents, ["let", "a", "let", "c", "let", "l", "str"]);
        assert!(!lex(src).iter().any(|t| t.is_punct('{') || t.is_punct('}')));
    }

    #[test]
    fn tidy_fixture_long_functions_and_their_reasons() {
        let body = |n: usize| "    let _x = 1;\n".repeat(n);
        let text = format!(
            "fn short() {{\n{}}}\n\n/// Doc.\n#[inline]\npub(crate) fn long() {{\n{}}}\n\n// Long on purpose: one table, read top to bottom.\n/// Doc.\n#[allow(dead_code)]\nasync fn reasoned() {{\n    let s = \"{{\";\n{}}}\ntrait T {{ fn decl(&self); }}\n",
            body(5),
            body(10),
            body(10)
        );
        let found = long_functions(&text, 8);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].name.as_str(), found[0].line, found[0].lines),
            ("long", 11, 12)
        );
    }

    #[test]
    fn tidy_fixture_python_imports_inside_functions_count() {
        let text = "\"\"\"Docs: import oncegate.client\n\"\"\"\nfrom __future__ import annotations\n\nfrom .models import (\n    Outcome,\n    Reason as R,\n)\nimport oncegate.errors\n\ndef f():\n    from . import errors  # a comment: import x\n";
        let imports = python_imports(text);
        assert_eq!(imports.len(), 4, "{imports:?}");
        assert_eq!(
            imports[1],
            PyImport {
                line: 5,
                from: Some(".models".into()),
                names: vec!["Outcome".into(), "Reason".into()]
            }
        );
        assert_eq!(
            imports[2].targets("oncegate"),
            [("errors".to_owned(), "oncegate.errors".to_owned())]
        );
        assert_eq!(imports[3].line, 12);
        assert_eq!(
            imports[3].targets("oncegate"),
            [("errors".to_owned(), "errors".to_owned())]
        );
    }

    #[test]
    fn tidy_fixture_links_and_backticked_docs() {
        let dir = repo();
        let text = "See [the map](ARCHITECTURE.md#code-map), [web](https://x.org) and [gone](docs/gone.md).\n```\n[in code](nowhere.md)\n```\n`../shared/DESIGN.md` and `docs/error-codes.md`\n[ref]: missing/page.md\n";
        let dead = dead_links(&dir.join("README.md"), text);
        assert_eq!(dead.len(), 3, "{dead:#?}");
        assert!(dead[0].contains("README.md:1: link to `docs/gone.md`"));
        assert!(dead[1].contains("README.md:5: names `../shared/DESIGN.md`"));
        assert!(dead[2].contains("README.md:6: link to `missing/page.md`"));
    }

    #[test]
    fn tidy_fixture_shell_lines_become_cli_arguments() {
        let text = "```sh\nONCEGATE_TOKEN=$T oncegate approvals list   # a comment\noncegate serve --config x.toml \\\n   --listen 127.0.0.1:$PORT &\ncurl -s http://x | grep oncegate_\ncargo run --release -p oncegate-cli -- demo\ntarget/release/oncegate --version\necho '$(oncegate x)'\n```\n";
        let cmds = shell_commands(text);
        let words: Vec<Vec<String>> = cmds.iter().map(|c| c.words.clone()).collect();
        assert_eq!(
            words,
            [
                vec!["oncegate", "approvals", "list"],
                vec![
                    "oncegate",
                    "serve",
                    "--config",
                    "x.toml",
                    "--listen",
                    "127.0.0.1:1"
                ],
                vec![
                    "cargo",
                    "run",
                    "--release",
                    "-p",
                    "oncegate-cli",
                    "--",
                    "demo"
                ],
                vec!["oncegate", "--version"],
            ]
        );
        assert_eq!(cmds[1].line, 3);
        for c in &cmds {
            assert_eq!(check_command(&c.words), Ok(()), "{c:?}");
        }
        let bad = |line: &str| {
            check_command(
                &shell_words(line)
                    .into_iter()
                    .find_map(|w| oncegate_words(&w))
                    .unwrap(),
            )
        };
        assert!(bad("oncegate serve --no-such-flag").is_err());
        assert!(bad("oncegate keys derive-all").is_err());
        assert!(
            bad("cargo run -p oncegate-cli -- demo")
                .unwrap_err()
                .contains("--release")
        );
        assert!(bad("oncegate sandbox --listen not-an-address").is_err());
    }

    #[test]
    fn tidy_fixture_code_map_entries_join_their_parents() {
        let text = "# A\n\n```\ncrates/\n  oncegate-core/     pure\n    config/          model\n                     raw.rs the shapes\n    key.rs           keys\n    a/b.rs, c/d.rs\n  oncegate-store/    store\n    lib.rs           traits\nexamples/            files\n```\n";
        let entries: Vec<(usize, String)> = code_map_entries(text)
            .into_iter()
            .map(|(l, p, _)| (l, p))
            .collect();
        assert_eq!(
            entries,
            [
                (4, "crates/".into()),
                (5, "crates/oncegate-core/".into()),
                (6, "crates/oncegate-core/config/".into()),
                (8, "crates/oncegate-core/key.rs".into()),
                (9, "crates/oncegate-core/a/b.rs".into()),
                (9, "crates/oncegate-core/c/d.rs".into()),
                (10, "crates/oncegate-store/".into()),
                (11, "crates/oncegate-store/lib.rs".into()),
                (12, "examples/".into()),
            ]
        );
        let lines: Vec<&str> = text.lines().collect();
        let core = crate_section(&code_map_entries(text), &lines, "oncegate-core").unwrap();
        assert!(names_module(&core, "key.rs") && names_module(&core, "config/"));
        assert!(
            names_module(&core, "a/")
                && !names_module(&core, "d.rs")
                && !names_module(&core, "lib.rs")
        );
    }
}
