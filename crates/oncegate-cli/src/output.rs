//! What the subcommands print: stdout, written so that a closed pipe ends the output
//! quietly.

/// Writes to stdout, treating a closed pipe (`| head`) as done rather than a crash.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}
