//! The decks, read from the code: every file under `src/` imports only from its own deck or one
//! below (vocab → config → decide → io → run → cli), and no group of files imports itself in a
//! loop; no function outside tests is over 120 lines and no config file over 600.
//! docs/ARCHITECTURE.md ("Decks") says why; the checkers' own tests plant violations.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The decks from the ground up; `lib.rs`, `main.rs` and `cli.rs` stand above them all.
const DECKS: [&str; 5] = ["vocab", "config", "decide", "io", "run"];

/// Imports from a lower deck to a higher one that are allowed, each with its reason (at most two).
const EXCEPTIONS: [(&str, &str); 0] = [];

/// A deck's height: its place in [`DECKS`], or above them all for the crate root and the CLI.
fn height(deck: &str) -> Option<usize> {
    match deck {
        "lib" | "main" | "cli" => Some(DECKS.len()),
        d => DECKS.iter().position(|x| *x == d),
    }
}

/// One source file: its path under `src/` (`io/store/mod.rs`) and its text.
struct File {
    path: String,
    text: String,
}

/// The module path a file declares (`io/store/mod.rs` → `io::store`, `lib.rs` → ``).
fn module_of(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = path.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

/// `text` without comments, string and char literals (their contents are not imports).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'r' if b.get(i + 1).is_some_and(|c| *c == b'#' || *c == b'"')
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                i += 2 + hashes;
                while i < b.len() && !b[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || (b.get(i + 1) == Some(&b'\\')) => {
                // A char literal ('x', '\n', '\u{..}'); a lifetime has no closing quote nearby.
                let end = b[i + 1..].iter().take(12).position(|c| *c == b'\'').map(|p| i + 2 + p);
                match end {
                    Some(e) => {
                        i = e;
                        out.push_str("' '");
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// Every path a `use` tree names, flattened: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn flatten_use(tree: &str) -> Vec<String> {
    fn walk(s: &[char], i: &mut usize, prefix: &str, out: &mut Vec<String>) {
        let mut path = prefix.to_string();
        loop {
            while *i < s.len() && s[*i].is_whitespace() {
                *i += 1;
            }
            if *i >= s.len() {
                return;
            }
            if s[*i] == '{' {
                *i += 1;
                loop {
                    while *i < s.len() && (s[*i].is_whitespace() || s[*i] == ',') {
                        *i += 1;
                    }
                    if *i >= s.len() || s[*i] == '}' {
                        *i += 1;
                        return;
                    }
                    walk(s, i, &path, out);
                }
            }
            let start = *i;
            while *i < s.len() && (s[*i].is_alphanumeric() || s[*i] == '_' || s[*i] == '*') {
                *i += 1;
            }
            let seg: String = s[start..*i].iter().collect();
            if seg.is_empty() {
                *i += 1;
                return;
            }
            if !path.is_empty() {
                path.push_str("::");
            }
            path.push_str(&seg);
            if s[*i..].starts_with(&[':', ':']) {
                *i += 2;
                continue;
            }
            // `as alias` and anything else up to the next separator.
            while *i < s.len() && s[*i] != ',' && s[*i] != '}' {
                *i += 1;
            }
            out.push(path);
            return;
        }
    }
    let chars: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    walk(&chars, &mut i, "", &mut out);
    out
}

/// The crate-absolute module paths a file names (`crate::…`, `super::…`, `use` trees).
fn references(file: &File) -> Vec<Vec<String>> {
    let code = code_only(&file.text);
    let here = module_of(&file.path);
    let mut paths = Vec::new();
    // `use` trees first (they may group: `use crate::{a::B, c::D}`), then inline paths.
    let mut rest = code.as_str();
    let mut inline = String::new();
    while let Some(at) = rest.find("use ") {
        let boundary = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        inline.push_str(&rest[..at]);
        let after = &rest[at + 4..];
        let Some(end) = after.find(';') else { break };
        if boundary {
            paths.extend(flatten_use(&after[..end]));
            rest = &after[end + 1..];
        } else {
            inline.push_str("use ");
            rest = after;
        }
    }
    inline.push_str(rest);
    let bytes = inline.as_bytes();
    for kw in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(p) = inline[from..].find(kw) {
            let at = from + p;
            from = at + kw.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':') {
                continue;
            }
            let tail: String =
                inline[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            paths.push(tail.trim_end_matches(':').to_string());
        }
    }
    // Test modules inside a file see the file as `super`; the checker reads code outside them, so
    // `super` is the file's parent module (or the file itself for a `mod.rs`).
    let parent: Vec<String> = if file.path.ends_with("mod.rs") || file.path == "lib.rs" {
        here.clone()
    } else {
        here[..here.len().saturating_sub(1)].to_vec()
    };
    paths
        .into_iter()
        .filter_map(|p| {
            let segs: Vec<String> = p.split("::").map(str::to_string).collect();
            match segs.first().map(String::as_str) {
                Some("crate") => Some(segs[1..].to_vec()),
                Some("super") => {
                    let mut base = parent.clone();
                    let mut rest = &segs[1..];
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base.extend(rest.iter().cloned());
                    Some(base)
                }
                Some("self") => {
                    let mut base = here.clone();
                    base.extend(segs[1..].iter().cloned());
                    Some(base)
                }
                _ => None,
            }
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The code of `text` outside `#[cfg(test)]` items: tests may reach for any fixture they need.
fn without_tests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let open = after.find('{');
        let semi = after.find(';');
        match (open, semi) {
            (Some(o), Some(s)) if s < o => rest = &after[s + 1..],
            (Some(o), _) => {
                let mut depth = 0;
                let mut end = after.len();
                for (i, c) in after[o..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = "",
        }
    }
    out.push_str(rest);
    out
}

/// Which file a module path lands in: the longest prefix that is a file's module.
fn file_of<'a>(path: &[String], modules: &'a BTreeMap<Vec<String>, String>) -> Option<&'a String> {
    (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]))
}

/// A file's deck: the first folder under `src/`, or the file's own name at the top.
fn deck_of(path: &str) -> &str {
    let first = path.split('/').next().unwrap_or(path);
    first.trim_end_matches(".rs")
}

/// What the checker found.
#[derive(Debug, Default)]
struct Findings {
    /// `file imports path (deck → higher deck)`.
    upward: Vec<String>,
    /// Files that import each other in a loop.
    cycles: Vec<Vec<String>>,
}

/// Reads `files` (paths under `src/`) for upward imports and import cycles.
fn check(files: &[File]) -> Findings {
    let modules: BTreeMap<Vec<String>, String> = files.iter().map(|f| (module_of(&f.path), f.path.clone())).collect();
    let mut findings = Findings::default();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let code = without_tests(&f.text);
        let refs = references(&File { path: f.path.clone(), text: code });
        let from = height(deck_of(&f.path));
        for r in refs {
            let Some(target) = file_of(&r, &modules) else { continue };
            if *target == f.path {
                continue;
            }
            let to = height(deck_of(target));
            if let (Some(a), Some(b)) = (from, to) {
                let excused = EXCEPTIONS.iter().any(|(file, path)| *file == f.path && r.join("::").starts_with(path));
                if b > a && !excused {
                    findings.upward.push(format!(
                        "{} imports crate::{} ({} → {})",
                        f.path,
                        r.join("::"),
                        deck_of(&f.path),
                        deck_of(target)
                    ));
                }
            }
            // A folder's mod.rs declares its children: that is not an import.
            let child = module_of(target).starts_with(&module_of(&f.path)) && f.path.ends_with("mod.rs");
            if !child && f.path != "lib.rs" {
                edges.entry(f.path.clone()).or_default().insert(target.clone());
            }
        }
    }
    findings.upward.sort();
    findings.upward.dedup();
    findings.cycles = cycles(&edges);
    findings
}

/// Strongly connected groups of more than one file (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.edges.get(v) {
            for w in ws {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(lw));
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(iw));
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                group.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                t.out.push(group);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        next: 0,
        out: vec![],
    };
    let nodes: Vec<&str> = edges.keys().map(String::as_str).collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn source_files() -> Vec<File> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<File>) {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).expect("read src").map(|e| e.expect("entry").path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(root).expect("under src").to_string_lossy().replace('\\', "/");
                out.push(File { path: rel, text: std::fs::read_to_string(&p).expect("read source") });
            }
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

fn planted(files: &[(&str, &str)]) -> Vec<File> {
    files.iter().map(|(p, t)| File { path: p.to_string(), text: t.to_string() }).collect()
}

#[test]
fn every_file_stands_in_a_deck() {
    let stray: Vec<String> =
        source_files().into_iter().map(|f| f.path).filter(|p| height(deck_of(p)).is_none()).collect();
    assert!(
        stray.is_empty(),
        "files outside every deck (put each in vocab/, config/, decide/, io/ or run/): {stray:?}"
    );
}

#[test]
fn src_imports_run_down_the_decks() {
    let found = check(&source_files());
    assert!(EXCEPTIONS.len() <= 2, "at most two upward imports may be excused");
    assert!(found.upward.is_empty(), "imports from a lower deck to a higher one:\n{}", found.upward.join("\n"));
}

#[test]
fn src_has_no_import_cycle() {
    let found = check(&source_files());
    assert!(found.cycles.is_empty(), "files that import each other in a loop: {:?}", found.cycles);
}

#[test]
fn the_checker_catches_a_planted_upward_import_in_every_spelling() {
    let found = check(&planted(&[
        ("lib.rs", "pub mod vocab; pub mod io; pub mod config;"),
        ("vocab/mod.rs", "pub mod a; pub mod b; pub mod c;"),
        ("vocab/a.rs", "use crate::io::store::Store;\n"),
        ("vocab/b.rs", "use crate::{config::Config, vocab::a};\n"),
        ("vocab/c.rs", "fn f() { let _ = crate::io::store::open(\"x\"); }\n// crate::io::in_a_comment\n"),
        ("io/mod.rs", "pub mod store;"),
        ("io/store.rs", "use super::super::vocab::a;\n"),
        ("config/mod.rs", "use crate::vocab::a;\nconst S: &str = \"crate::io::store\";\n"),
    ]));
    assert_eq!(
        found.upward,
        [
            "vocab/a.rs imports crate::io::store::Store (vocab → io)",
            "vocab/b.rs imports crate::config::Config (vocab → config)",
            "vocab/c.rs imports crate::io::store::open (vocab → io)",
        ],
        "every spelling of an upward import is caught, comments and strings are not imports"
    );
}

#[test]
fn the_checker_catches_a_planted_cycle_and_ignores_test_modules() {
    let found = check(&planted(&[
        ("lib.rs", "pub mod decide;"),
        ("decide/mod.rs", "pub mod a; pub mod b; pub mod c;"),
        ("decide/a.rs", "use super::b::X;\n"),
        ("decide/b.rs", "pub struct X; fn f() -> crate::decide::a::Y { todo() }\n"),
        (
            "decide/c.rs",
            "use super::a::Y;\n#[cfg(test)]\nmod tests { use crate::io::store::Store; use super::super::b::X; }\n",
        ),
    ]));
    assert_eq!(found.cycles, [vec!["decide/a.rs".to_string(), "decide/b.rs".to_string()]]);
    assert!(found.upward.is_empty(), "test modules may reach any fixture: {:?}", found.upward);
}

/// Every function outside test code, as (file, name, lines from `fn` to its closing brace).
fn function_lengths(file: &File) -> Vec<(String, String, usize)> {
    let code = code_only(&without_tests(&file.text));
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("fn ") {
        let at = from + p;
        from = at + 3;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // The body opens at the first `{` outside the signature's parentheses; a `;` first means
        // a declaration without a body (a trait method).
        let (mut depth, mut open) = (0i32, None);
        for (i, c) in code[at..].char_indices() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    open = Some(at + i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut level = 0;
        for (i, c) in code[open..].char_indices() {
            match c {
                '{' => level += 1,
                '}' => {
                    level -= 1;
                    if level == 0 {
                        let lines = code[at..open + i].matches('\n').count() + 1;
                        out.push((file.path.clone(), name.clone(), lines));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn no_function_outside_tests_is_over_120_lines_and_no_config_file_over_600() {
    let files = source_files();
    let long: Vec<String> = files
        .iter()
        .flat_map(function_lengths)
        .filter(|(_, _, n)| *n > 120)
        .map(|(f, name, n)| format!("{f}: fn {name} is {n} lines"))
        .collect();
    assert!(long.is_empty(), "split these into named steps:\n{}", long.join("\n"));
    let big: Vec<String> = files
        .iter()
        .filter(|f| f.path.starts_with("config/"))
        .map(|f| (f.path.clone(), f.text.lines().count()))
        .filter(|(_, n)| *n > 600)
        .map(|(p, n)| format!("{p}: {n} lines"))
        .collect();
    assert!(big.is_empty(), "config files over 600 lines: {big:?}");
}

#[test]
fn the_length_check_measures_a_planted_long_function_and_skips_tests() {
    let body = "    let x = 1;\n".repeat(130);
    let text = format!(
        "fn long() {{\n{body}}}\nfn short() {{ if true {{ }} }}\n#[cfg(test)]\nmod tests {{ fn t() {{\n{body}}} }}\n"
    );
    let found = function_lengths(&File { path: "run/x.rs".into(), text });
    let lengths: Vec<(&str, usize)> = found.iter().map(|(_, n, l)| (n.as_str(), *l)).collect();
    assert_eq!(lengths, [("long", 132), ("short", 1)]);
}
