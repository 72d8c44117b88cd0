//! The `oncegate` binary.

fn main() -> std::process::ExitCode {
    oncegate_cli::run()
}
