//! `cubepod-controller`: parses the command line and hands over to the library.

use std::process::ExitCode;

use clap::Parser;
use cubepod_host::config::{Cli, Command, PolicyCommand};
use cubepod_host::scenario::conformance;
use tracing_subscriber::filter::{FilterExt, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

fn init_logging(format: &str) {
    // wasmtime and cranelift are chatty at info; their warnings still show.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,wasmtime=warn,cranelift=warn"));
    let verbose = filter
        .max_level_hint()
        .is_none_or(|level| level >= LevelFilter::DEBUG);
    let ansi = cubepod_host::colour::for_stream(&std::io::stdout());
    let layer = if format == "json" {
        tracing_subscriber::fmt::layer().json().boxed()
    } else {
        tracing_subscriber::fmt::layer().with_ansi(ansi).boxed()
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter.and(conformance::quiet_at_info(verbose))))
        .init();
}

fn main() -> ExitCode {
    // Parsed first: the controller's flags say how many threads its runtime has.
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Run(args) = &cli.command {
        builder.worker_threads(usize::from(args.worker_threads));
    }
    match builder.enable_all().build() {
        // Spawned, not run in `block_on`: the main thread is then no extra worker that the
        // controller's tasks would be handed between.
        Ok(runtime) => runtime.block_on(async {
            match tokio::spawn(run(cli)).await {
                Ok(code) => code,
                Err(error) => {
                    eprintln!("cubepod-controller: ended abnormally: {error}");
                    ExitCode::FAILURE
                }
            }
        }),
        Err(error) => {
            eprintln!("cubepod-controller: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Run(args) => {
            init_logging(&args.log_format);
            serve(|shutdown| cubepod_host::app::run(args, shutdown)).await
        }
        Command::Policy(args) => policy(args.command).await,
        Command::Router(args) => {
            init_logging(&args.log_format);
            serve(|shutdown| cubepod_host::app::run_router(args, shutdown)).await
        }
    }
}

/// A long-running command (the controller, the router): stopped by SIGTERM or SIGINT, its
/// error logged and printed, and its exit code.
async fn serve<F, E>(command: impl FnOnce(tokio::sync::watch::Receiver<bool>) -> F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received: stopping");
        let _ = stop.send(true);
    });
    match command(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            eprintln!("cubepod-controller: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The `policy` subcommands: 0 on success, 1 when a scenario failed or
/// the module does not fit (or its signature does not verify), 2 when the command could not
/// run. Their policy calls block on the cluster, so they run on a blocking thread.
async fn policy(command: PolicyCommand) -> ExitCode {
    // Errors only, on stderr: stdout is the report, which already says what a scenario's
    // objects made the controller warn of (a refused spec, a refused write); RUST_LOG shows more.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(cubepod_host::colour::for_stream(&std::io::stderr()))
        .init();
    let handle = tokio::runtime::Handle::current();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut out = std::io::stdout().lock();
        cubepod_host::policy_cli::run(&command, &handle, &mut out)
    })
    .await;
    match outcome {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::from(1),
        Ok(Err(error)) => {
            eprintln!("cubepod-controller: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("cubepod-controller: the policy command ended abnormally: {error}");
            ExitCode::from(2)
        }
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            // Without signal handlers, Ctrl-C still ends the process the default way.
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
