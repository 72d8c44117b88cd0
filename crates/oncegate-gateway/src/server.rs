//! `oncegate serve`: the gateway's public face, as the CLI, the demo and the tests use
//! it. Nothing is defined here; each name lives in the module of its concern (see the
//! module map in the crate docs) and is re-exported so callers need one path.

pub use crate::error::ApiError;
pub use crate::inflight::{InFlight, InFlightGuard};
pub use crate::openapi::ApiDoc;
pub use crate::router::{app, null_app};
pub use crate::routes::admin::KillBody;
pub use crate::routes::calls::{CallBody, DeriveBody};
pub use crate::serve::{HEADER_READ_TIMEOUT, serve, serve_router};
pub use crate::state::{AppState, MAX_BODY_BYTES, Principal};
pub use crate::sweep::sweep;
pub use crate::upstream::client::{http_client, install_crypto, registry_secrets};
pub use crate::wire::{Envelope, model_line};
