//! The `oncegate` binary.

/// jemalloc for Rust's allocations: a quarter of the gateway's CPU went to glibc's
/// allocator under load (BENCHMARKS.md, "Performance by design"). C's `malloc` (SQLite)
/// stays glibc's: an unprefixed jemalloc deadlocks at start under an LD_PRELOADed
/// libfaketime, which the clock tests use.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    oncegate_cli::run()
}
