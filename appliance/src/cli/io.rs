//! How a command ends ([`Outcome`]) and the files it reads from the operator ([`read_ca`],
//! [`read_input`]): what every command group shares.

/// How a command ended, when it did not fail.
pub(crate) enum Outcome {
    Ok,
    /// A negative verdict (exit 1), already reported.
    Negative,
    /// Malformed input (exit 2), already reported in the command's own format.
    Malformed,
    /// Not finished yet (exit 3), already reported.
    Pending,
    /// Something checked is failing or does not answer (exit 2), already reported.
    Failing,
}

/// The PEM file named by a `--ca FILE` flag, read whole; `None` without the flag.
pub(crate) fn read_ca(path: Option<&std::path::Path>) -> anyhow::Result<Option<Vec<u8>>> {
    use anyhow::Context as _;
    path.map(|p| std::fs::read(p).with_context(|| format!("--ca {}", p.display())))
        .transpose()
}

/// Reads a file (`-`: standard input) of at most `max` bytes; `what` names it in errors.
pub(crate) fn read_input(path: &std::path::Path, max: u64, what: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let source: Box<dyn std::io::Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?)
    };
    let mut text = String::new();
    source
        .take(max + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        text.len() as u64 <= max,
        "{}: over {max} bytes, more than {what} this command reads",
        path.display()
    );
    Ok(text)
}
