//! `cubepod-bench`: the controller against the fake API server on loopback, with a load
//! generator; prints the table of the performance targets (see `tests/src/bench/`).
//!
//! `cargo build --release -p cubepod-host && \
//!  cargo run --release -p cubepod-tests --bin cubepod-bench -- [--quick] [--write-docs]`

use std::process::ExitCode;

use cubepod_tests::bench::{self, Options, report};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The languages scenario's child: one admission in a process of its own.
    if args.first().map(String::as_str) == Some(bench::languages::ADMIT_ONCE) {
        return match bench::languages::admit_once(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("cubepod-bench: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    let options = match Options::parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{}", bench::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("cubepod-bench: {error:#}");
            return ExitCode::from(2);
        }
    };
    let results = match bench::run(&options) {
        Ok(results) => results,
        Err(error) => {
            eprintln!("cubepod-bench: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let rows = report::rows(&results);
    println!();
    print!("{}", report::text_table(&rows));
    println!();
    print!("{}", report::breakdown(&results));
    if options.write_docs {
        let root = cubepod_tests::workspace();
        if let Err(error) = report::write_docs(root, &results, &rows) {
            eprintln!("cubepod-bench: {error:#}");
            return ExitCode::FAILURE;
        }
        println!(
            "wrote {} and {}",
            root.join("docs/performance.md").display(),
            root.join("docs/performance.svg").display()
        );
    }
    ExitCode::SUCCESS
}
