//! What packages ship beside the binaries, written from the command lines themselves so that
//! they cannot drift from `--help`: man pages (one per command and subcommand) and shell
//! completions. Each binary writes its own on `--generate-assets DIR` (hidden), which
//! `cargo xtask dist` runs.

use std::io;
use std::path::Path;

/// The hidden option the binaries look for before parsing their command line.
pub const GENERATE_ASSETS: &str = "--generate-assets";

/// The directory after [`GENERATE_ASSETS`] when it is the first argument.
pub fn requested() -> Option<std::path::PathBuf> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != GENERATE_ASSETS {
        return None;
    }
    args.next().map(Into::into)
}

/// `DIR/man/NAME.1`, `NAME-SUB.1` for each subcommand, and `DIR/completions/` for bash, zsh
/// and fish.
pub fn write(mut cmd: clap::Command, dir: &Path) -> io::Result<()> {
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    // `blkprof help SUB` is `blkprof-SUB(1)` already: no pages for the help subcommand.
    clap_mangen::generate_to(cmd.clone().disable_help_subcommand(true), &man)?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    let name = cmd.get_name().to_string();
    for (shell, file) in [
        (clap_complete::Shell::Bash, name.clone()),
        (clap_complete::Shell::Zsh, format!("_{name}")),
        (clap_complete::Shell::Fish, format!("{name}.fish")),
    ] {
        let mut out = io::BufWriter::new(std::fs::File::create(completions.join(file))?);
        clap_complete::generate(shell, &mut cmd, &name, &mut out);
        io::Write::flush(&mut out)?;
    }
    Ok(())
}
