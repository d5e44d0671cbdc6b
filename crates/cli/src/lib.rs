//! # fetcher (CLI)
//!
//! | command | module |
//! |---|---|
//! | `fetcher serve [--demo]` | [`serve`]: the API and the extraction worker in one process, on the embedded adapters |
//! | `fetcher result open <path\|job-id>` | [`result`]: verify and decrypt a sealed result (v1 or v2) to stdout; [`parts`]: a Parquet job's files into `--output-dir` |
//! | `fetcher keys generate` | [`keys`]: print a new master key |
//! | `fetcher connections\|jobs\|syncs …` | [`client`]: the HTTP API as commands (list, create, test, schema; list, get, create, watch, cancel; get, reset) |

pub mod client;
pub mod demo;
pub mod host_guard;
pub mod http_server;
pub mod key_check;
pub mod keys;
pub mod parts;
pub mod result;
pub mod scheduler;
pub mod serve;
pub mod webhook;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "fetcher",
    version,
    about = "Fetcher: extract, seal and deliver data from your databases"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the API and the extraction worker on embedded adapters (SQLite, a local result
    /// directory, an in-process queue, an event log).
    Serve(Box<serve::ServeArgs>),
    /// Sealed results.
    #[command(subcommand)]
    Result(result::ResultCommand),
    /// Master keys.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Connections, over the API (`--api-url`, `--token`, `--product`).
    Connections {
        #[command(subcommand)]
        command: client::ConnectionsCommand,
        #[command(flatten)]
        client: client::ClientArgs,
    },
    /// Jobs, over the API: list, get, create, watch, cancel.
    Jobs {
        #[command(subcommand)]
        command: client::JobsCommand,
        #[command(flatten)]
        client: client::ClientArgs,
    },
    /// Syncs, over the API: get, reset.
    Syncs {
        #[command(subcommand)]
        command: client::SyncsCommand,
        #[command(flatten)]
        client: client::ClientArgs,
    },
}

/// Parses arguments and runs the command; errors print one line and exit 1.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = rt.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::serve(*args).await,
            Command::Result(cmd) => result::run(cmd).await,
            Command::Keys(cmd) => keys::run(cmd),
            Command::Connections { command, client } => client::connections(command, &client).await,
            Command::Jobs { command, client } => client::jobs(command, &client).await,
            Command::Syncs { command, client } => client::syncs(command, &client).await,
        }
    });
    match out {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`fetcher result open … | head`): what it
        // read was right, and there is nothing to say.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fetcher: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `e` is a write to a pipe whose reader closed it.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_closed_pipe_is_told_apart() {
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing the result");
        assert!(super::closed_pipe(&pipe));
        let other = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(!super::closed_pipe(&other));
    }
}
