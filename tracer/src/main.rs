//! `blkprof-trace`: the daemon's command line; parses the options, runs the daemon, maps its
//! outcome to the exit code.

#![expect(
    unused_crate_dependencies,
    reason = "the bin links the lib's dependencies; the lib target checks them"
)]

use clap::{CommandFactory as _, Parser as _};

fn main() -> std::process::ExitCode {
    if let Some(dir) = tracer_common::assets::requested() {
        return match tracer_common::assets::write(tracer::cli::Args::command(), &dir) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("blkprof-trace: cannot write to {}: {e}", dir.display());
                std::process::ExitCode::from(1)
            }
        };
    }
    let args = tracer::cli::Args::parse();
    let cfg = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("blkprof-trace: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    for note in &cfg.device_notes {
        eprintln!("blkprof-trace: {note}");
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("blkprof-trace: cannot start the runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match rt.block_on(tracer::daemon::run(cfg)) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("blkprof-trace: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
