//! The `custodian` command; everything lives in [`cli`].

mod allocator;
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
