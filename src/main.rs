use std::process::ExitCode;

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
