//! The `custodian` command; everything lives in [`cli`].

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
