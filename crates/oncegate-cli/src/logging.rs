//! The log's writer: each event passes through the registry's [`Redactor`] before it
//! reaches stderr, so no credential reaches the log whoever formatted the text (a
//! library's error naming a URL with its query or userinfo, a value the gateway filled
//! in from its environment).

use std::io::{self, Write};
use std::sync::Arc;

use oncegate_core::redact::Redactor;
use tracing_subscriber::fmt::MakeWriter;

/// Writes redacted events to stderr.
#[derive(Clone)]
pub struct RedactedStderr(Arc<Redactor>);

impl RedactedStderr {
    /// A writer masking what `redactor` knows, and every URL's credentials.
    pub fn new(redactor: Redactor) -> Self {
        Self(Arc::new(redactor))
    }
}

impl<'a> MakeWriter<'a> for RedactedStderr {
    type Writer = Event<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Event {
            redactor: &self.0,
            text: Vec::new(),
        }
    }
}

/// One event's text, held until it is whole (so a URL is never split between two
/// writes) and written redacted when the formatter is done with it.
pub struct Event<'a> {
    redactor: &'a Redactor,
    text: Vec<u8>,
}

impl Write for Event<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        let text = self.redactor.text(&String::from_utf8_lossy(&self.text));
        // Nowhere to report a log that cannot be written.
        let _ = io::stderr().lock().write_all(text.as_bytes());
    }
}
