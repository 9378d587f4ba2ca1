//! The CLI's stdout and its error report.
//!
//! Everything a command prints goes through [`out!`] / [`outln!`]: a reader that went away
//! (`zmesh status | head -1`) makes them return [`StdoutClosed`], the command unwinds (child
//! processes are killed by their guards, a node shuts down), and `main` exits with status 0
//! and says nothing, where `println!` would panic. They write through `crate::stdout`, which
//! the commands of the tool crates (`zmesh bench`, `conform`, `sim`) print with.

use std::fmt;

/// Stdout's reader closed it; the command stops and the process ends quietly.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `args` to stdout and flushes it: [`StdoutClosed`] if the reader is gone, another
/// error if the write failed otherwise.
pub(crate) fn write_out(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    match crate::stdout::write_out(args) {
        Ok(()) => Ok(()),
        Err(e) if crate::stdout::is_closed(&e) => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// `print!` that returns `anyhow::Result<()>` (see [`write_out`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

/// `println!` that returns `anyhow::Result<()>` (see [`write_out`]).
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Whether `e` is, or was caused by, a closed stdout.
pub(crate) fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// The lines of the error report on stderr: `error: ...`, then one `  caused by: ...` per
/// cause whose text the lines above do not already carry (an error that prints its source
/// in its own message does not print it twice).
pub(crate) fn error_lines(e: &anyhow::Error) -> Vec<String> {
    let mut said: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || said.iter().any(|s| s.contains(text)) {
            continue;
        }
        said.push(text.to_owned());
    }
    said.iter()
        .enumerate()
        .map(|(i, s)| {
            let head = if i == 0 { "error: " } else { "  caused by: " };
            // A multi-line cause (a TOML parse error with its caret) stays under its head.
            format!("{head}{}", s.replace('\n', "\n    "))
        })
        .collect()
}

pub(crate) use {out, outln};

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::error_lines;

    /// An error that prints its source's text in its own message, as many do.
    #[derive(Debug)]
    struct Repeats(std::io::Error);

    impl std::fmt::Display for Repeats {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "opening x.toml: {}", self.0)
        }
    }

    impl std::error::Error for Repeats {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_its_parents_text_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Repeats(io)).context("loading the configuration");
        assert_eq!(
            error_lines(&e),
            [
                "error: loading the configuration",
                "  caused by: opening x.toml: no such file",
            ]
        );
    }

    #[test]
    fn distinct_causes_get_one_line_each() {
        let e = Err::<(), _>(std::io::Error::other("refused"))
            .context("dialling")
            .context("starting the node")
            .unwrap_err();
        assert_eq!(
            error_lines(&e),
            [
                "error: starting the node",
                "  caused by: dialling",
                "  caused by: refused",
            ]
        );
    }
}
