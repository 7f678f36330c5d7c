use std::process::ExitCode;

// A supervisor allocates and frees many small objects on one thread for values
// another thread drops (every result's JSON tree); glibc's malloc spends a
// quarter of a large result's supervisor time on that, mimalloc a fraction.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = toolpool::cli::parse();
    toolpool::logging::init(cli.log_options());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("toolpool: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(toolpool::cli::run(cli))
}
