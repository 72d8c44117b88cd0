//! What reading a config file reports: its errors, each located by file, line, column
//! and field with how to fix it, and the warnings that do not stop the gateway.

use std::fmt;
use std::path::PathBuf;

/// A config problem that is not an error but that a careful reader wants to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning {
    /// `file:line`.
    pub location: String,
    /// The field.
    pub field: String,
    /// What is odd.
    pub message: String,
}

/// One config error, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub column: usize,
    /// The field path, e.g. `capabilities[2].key.business_ref`.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: `{}`: {}",
            self.file.display(),
            self.line,
            self.column,
            self.field,
            self.message
        )?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// Every error found in one config file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
