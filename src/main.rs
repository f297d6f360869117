//! The `prime-agent` binary: parse arguments, set up logging, run ACP over stdio.

use std::io::Write;
use std::process::ExitCode;

use prime_agent::{parse_args, Command, HELP};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Parsing is pure, so it can run first and `--verbose` can pick the log level.
    let parsed = parse_args(&args);
    let verbose = matches!(&parsed, Ok(Command::Run(cfg)) if cfg.verbose);
    let default_level = if verbose { "info" } else { "warn" };
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level));
    prime_agent::cap_wire_logging(&mut logger);
    logger.target(env_logger::Target::Stderr).init();
    let result = match parsed {
        Ok(Command::Sub(sub)) => match prime_agent::run_subcommand(&sub) {
            Ok(code) => return ExitCode::from(code),
            Err(e) => Err(e),
        },
        Ok(Command::Run(cfg)) if cfg.headless() => match prime_agent::run_headless(&cfg) {
            Ok(code) => return ExitCode::from(code),
            Err(e) => Err(e),
        },
        Ok(Command::Help) => write_stdout(HELP),
        Ok(Command::Version) => write_stdout(&format!("prime-agent {}\n", prime_agent::VERSION)),
        Ok(Command::Run(cfg)) => prime_agent::run_stdio(&cfg).map(|_| ()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "Error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--help` and `--version` are the only output that is not protocol, and happen before any.
fn write_stdout(text: &str) -> Result<(), String> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| e.to_string())
}
