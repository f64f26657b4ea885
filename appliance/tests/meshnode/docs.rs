//! The README and `docs/` hold what they quote: every relative link reaches a file (and
//! its `#anchor` a heading there), and every `meshnode …` command line quoted — in a code
//! block or inline — names subcommands the CLI has and flags that subcommand takes, read
//! from the built binary's own `--help`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("appliance/ has a parent")
        .to_path_buf()
}

/// README.md and every page under docs/, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read a page");
            (p, text)
        })
        .collect()
}

/// The page's lines, each with whether it is inside a fenced code block.
fn lines(text: &str) -> Vec<(usize, &str, bool)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        out.push((n + 1, line, fenced));
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (a repeated heading's later ones get `-1`, `-2`, …).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line, fenced) in lines(text) {
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let s = slug(h.trim_start_matches('#').replace('`', "").as_str());
        let n = seen.entry(s.clone()).or_default();
        out.push(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of a line's Markdown links, `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        out.push(rest[..end].trim().to_owned());
        rest = &rest[end..];
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_docs_reaches_its_file_and_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for (n, line, fenced) in lines(&text) {
            if fenced {
                continue;
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().expect("a page's folder").join(file)
                };
                let at = format!("{}:{n}: {target}", page.display());
                if !path.exists() {
                    broken.push(format!("{at} (no such file)"));
                    continue;
                }
                if let Some(a) = anchor {
                    let target_text = std::fs::read_to_string(&path).unwrap_or_default();
                    if !anchors(&target_text).iter().any(|h| h == a) {
                        broken.push(format!("{at} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert_eq!(broken, Vec::<String>::new());
}

/// `meshnode …` command lines quoted on a line: in a code block the line itself (after a
/// `$ ` prompt; `cargo run … --` stands for `meshnode`), outside one each inline code span.
fn quoted_commands(line: &str, fenced: bool) -> Vec<String> {
    let candidates: Vec<String> = if fenced {
        let l = line.trim_start().trim_start_matches("$ ");
        let l = match l.split_once(" -- ") {
            Some((cargo, rest)) if cargo.starts_with("cargo run") => format!("meshnode {rest}"),
            _ => l.to_owned(),
        };
        vec![l]
    } else {
        line.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    candidates
        .into_iter()
        .filter(|c| c.starts_with("meshnode ") || c == "meshnode")
        .collect()
}

/// The words of a command line up to a comment, a pipe, a redirection or a second command.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in command.split_whitespace() {
        if w.starts_with('#') || ["|", "&&", ";", ">", "2>", "&", "||"].contains(&w) {
            break;
        }
        // a synopsis's optional parts, `[--flag VALUE]`, are checked like the rest
        let w = w.trim_start_matches('[').trim_end_matches([';', ',', ']']);
        if !w.is_empty() {
            out.push(w.to_owned());
        }
    }
    out
}

/// `meshnode ARGS --help`, run once per subcommand path.
struct Help {
    bin: &'static str,
    cache: HashMap<Vec<String>, Option<String>>,
}

impl Help {
    /// The help text of `path`, or `None` when the CLI has no such subcommand.
    fn of(&mut self, path: &[String]) -> Option<String> {
        if let Some(h) = self.cache.get(path) {
            return h.clone();
        }
        let o = Command::new(self.bin)
            .args(path)
            .arg("--help")
            .output()
            .expect("run meshnode --help");
        let help = o
            .status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned());
        self.cache.insert(path.to_vec(), help.clone());
        help
    }
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // a name is indented by two spaces; its description's further lines by more
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Whether a help text lists the flag `flag` (`--name` or `-x`) as an option: on an option
/// line (`  -x, --name <V>  …`), before its description, not named in another's text.
fn lists_flag(help: &str, flag: &str) -> bool {
    help.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with('-')
            && l.split("  ")
                .next()
                .unwrap_or_default()
                .split([',', ' ', '='])
                .any(|w| w == flag || w.strip_suffix("...") == Some(flag))
    })
}

/// What is wrong with the command line `words` (`meshnode` first), if anything. The
/// subcommand path is each word the level above lists as a subcommand; a flag belongs to
/// the level it follows (a group's options may come before its subcommand, with their
/// value); `…` (or an upper-case placeholder) after a group stands for each of its
/// subcommands, and a flag after it must then be one that each of them takes; `a|b|c`
/// names some of them, and a flag after it must be one that one of them takes.
fn check(help: &mut Help, words: &[String]) -> Option<String> {
    let mut path: Vec<String> = Vec::new();
    let mut flags: Vec<(Vec<String>, String)> = Vec::new();
    let mut every = false;
    let mut any_of: Vec<String> = Vec::new();
    let mut rest = words[1..].iter().peekable();
    while let Some(w) = rest.next() {
        let text = help.of(&path)?;
        let listed = subcommands(&text);
        let alternatives: Vec<&str> = w.split('|').collect();
        if listed.contains(w) && !every {
            path.push(w.clone());
        } else if alternatives.len() > 1
            && alternatives.iter().all(|a| listed.iter().any(|l| l == a))
            && !every
        {
            // `a|b|c`: a synopsis naming several subcommands; its flags must be one's
            any_of = alternatives.iter().map(|a| (*a).to_owned()).collect();
            every = true;
        } else if w.starts_with('-') && w.len() > 1 {
            flags.push((path.clone(), w.clone()));
            // a group's option takes the next word as its value unless it is a subcommand
            if rest
                .peek()
                .is_some_and(|v| !v.starts_with('-') && !listed.contains(*v))
                && !listed.is_empty()
            {
                rest.next();
            }
        } else if !listed.is_empty()
            && (["…", "..."].contains(&w.as_str())
                || w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        {
            every = true;
        } else if !listed.is_empty() && !every {
            return Some(format!("`{w}` is no subcommand of {path:?}"));
        } else {
            // a positional argument (a file, a placeholder): nothing to check
        }
    }
    help.of(&path)
        .is_none()
        .then(|| format!("no help for {path:?}"))
        .or_else(|| {
            // `--a|--b`: either flag, each checked
            let flags = flags.iter().flat_map(|(at, w)| {
                w.split('|')
                    .filter(|f| f.starts_with('-'))
                    .map(move |f| (at, f.to_owned()))
            });
            flags.collect::<Vec<_>>().into_iter().find_map(|(at, w)| {
                let flag = w.split('=').next().unwrap_or(&w);
                let flag = flag.trim_end_matches([')', ']', '…']);
                if flag == "--" || flag.chars().nth(1).is_some_and(|c| c.is_ascii_digit()) {
                    return None;
                }
                let children = |help: &mut Help, names: Vec<String>| -> Vec<String> {
                    names
                        .into_iter()
                        .filter(|c| c != "help")
                        .map(|c| {
                            let mut p = at.clone();
                            p.push(c);
                            help.of(&p).unwrap_or_default()
                        })
                        .collect()
                };
                let takes = if !(every && at == &path) {
                    lists_flag(&help.of(at).unwrap_or_default(), flag)
                } else if any_of.is_empty() {
                    let group = help.of(at).unwrap_or_default();
                    children(help, subcommands(&group))
                        .iter()
                        .all(|h| lists_flag(h, flag))
                } else {
                    children(help, any_of.clone())
                        .iter()
                        .any(|h| lists_flag(h, flag))
                };
                (!takes).then(|| format!("`{flag}` is no flag of {at:?}"))
            })
        })
}

#[test]
fn every_meshnode_command_quoted_in_the_readme_and_docs_parses_with_the_cli() {
    let mut help = Help {
        bin: env!("CARGO_BIN_EXE_meshnode"),
        cache: HashMap::new(),
    };
    let mut wrong: Vec<String> = Vec::new();
    let mut per_page: BTreeMap<String, usize> = BTreeMap::new();
    for (page, text) in pages() {
        let name = page
            .strip_prefix(root())
            .expect("under the root")
            .display()
            .to_string();
        for (n, line, fenced) in lines(&text) {
            for command in quoted_commands(line, fenced) {
                *per_page.entry(name.clone()).or_default() += 1;
                let at = format!("{name}:{n}: {command}");
                wrong.extend(check(&mut help, &words(&command)).map(|why| format!("{at} ({why})")));
            }
        }
    }
    let total: usize = per_page.values().sum();
    assert!(total > 40, "only {total} commands found: {per_page:?}");
    assert_eq!(wrong, Vec::<String>::new());
}
