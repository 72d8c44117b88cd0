//! The `oncegate` binary.

/// jemalloc for every allocation of the process, SQLite's and rustls's included (its
/// unprefixed `malloc`): a quarter of the gateway's CPU went to glibc's allocator under
/// load (BENCHMARKS.md, "Performance by design").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    oncegate_cli::run()
}
