//! `blkprof`: the command line over the analyzer library. Parses the arguments and validates
//! them into one command's configuration (`cli`), runs it (`run`), and maps the outcome to the
//! exit code: 0 done, 1 a check failed or the output could not be written, 2 bad input. A
//! reader closing standard output (`| head`) is not an error.

#![forbid(unsafe_code)]
#![expect(
    unused_crate_dependencies,
    reason = "the bin links the lib's dependencies; the lib target checks them"
)]

mod cli;
mod run;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};

use cli::Command;
use run::Fail;

fn main() -> ExitCode {
    if let Some(dir) = tracer_common::assets::requested() {
        return match tracer_common::assets::write(cli::Cli::command(), &dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("blkprof: cannot write to {}: {e}", dir.display());
                ExitCode::from(1)
            }
        };
    }
    match cli::Cli::parse().cmd.validate().and_then(dispatch) {
        Ok(code) => code,
        Err(Fail::Closed) => ExitCode::SUCCESS,
        Err(Fail::Input(msg)) => {
            eprintln!("blkprof: {msg}");
            ExitCode::from(2)
        }
        Err(Fail::Output(msg)) => {
            eprintln!("blkprof: {msg}");
            ExitCode::from(1)
        }
    }
}

/// Run the command; its exit code when it did its work.
fn dispatch(command: Command) -> Result<ExitCode, Fail> {
    match command {
        Command::Report(c) => run::report::run(&c)?,
        Command::Export(c) => run::export::run(&c)?,
        Command::Check(c) => {
            // A failed rule is the answer, not an error: the table on stdout said which.
            if !run::check::run(&c)? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Import(c) => run::import::run(&c)?,
        Command::Compare(c) => run::compare::run(&c)?,
        Command::Whatif(c) => run::whatif::run(&c)?,
    }
    Ok(ExitCode::SUCCESS)
}
