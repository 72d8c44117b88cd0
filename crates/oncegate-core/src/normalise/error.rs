//! Why a value could not be normalised: the one error every normaliser returns, below
//! the grammars that raise it.

/// Why a value could not be normalised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NormaliseError(pub String);

/// A normalisation error with `msg`, as a `Result` ready to return.
pub(super) fn err<T>(msg: impl Into<String>) -> Result<T, NormaliseError> {
    Err(NormaliseError(msg.into()))
}
