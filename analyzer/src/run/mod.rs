//! The commands as the binary runs them: each module takes its command's validated
//! configuration (built by `cli`), calls the library, writes the results to standard output or
//! files and its notes to standard error, and says why it stopped with a [`Fail`].

pub(crate) mod check;
pub(crate) mod compare;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod inputs;
pub(crate) mod report;
pub(crate) mod whatif;

/// Why a command stopped: each is printed once, in `main`, which also gives the exit code.
pub(crate) enum Fail {
    /// Exit 2: bad input (a file missing or not what it should be, options that do not fit).
    Input(String),
    /// Exit 1: the input was good but the output could not be written.
    Output(String),
    /// Standard output was closed by its reader (`| head`): stop quietly, exit 0.
    Closed,
}

impl Fail {
    /// Bad input, as the error says it.
    pub(crate) fn input(e: impl std::fmt::Display) -> Fail {
        Fail::Input(e.to_string())
    }

    /// A failed write to standard output; `what` prefixes the message unless empty.
    pub(crate) fn stdout(e: &std::io::Error, what: &str) -> Fail {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Fail::Closed
        } else if what.is_empty() {
            Fail::Output(e.to_string())
        } else {
            Fail::Output(format!("{what}: {e}"))
        }
    }
}

/// Pretty JSON and a newline. The error keeps its io kind, so that a reader closing the pipe
/// (`--json | head`) is seen as that and not reported as a failure.
pub(crate) fn write_json(
    out: &mut impl std::io::Write,
    v: &impl serde::Serialize,
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(|e| match e.io_error_kind() {
        Some(k) => std::io::Error::new(k, e),
        None => std::io::Error::other(e),
    })?;
    writeln!(out)
}
