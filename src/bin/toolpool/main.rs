//! The `toolpool` command (docs/cli.md), on the library's public API.

use std::process::ExitCode;

mod bench;
mod cli;
mod logging;

// A supervisor allocates and frees many small objects on one thread for values
// another thread drops (every result's JSON tree); glibc's malloc spends a
// quarter of a large result's supervisor time on that, mimalloc a fraction.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::parse();
    logging::init(cli.log_options());
    // `host` serves one program's calls, a line at a time: on one thread
    // a call's hops (the host's line, the worker's reply, the answer) wake
    // no other thread.
    let mut builder = if matches!(cli.command, cli::Command::Host) {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("toolpool: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(cli::run(cli))
}
