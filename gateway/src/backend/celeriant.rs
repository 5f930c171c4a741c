//! Forwarding to a real Celeriant cluster through `celeriant_client_tokio` (placeholder: being
//! written).

use std::time::Duration;

use async_trait::async_trait;

use super::{Backend, BackendError, ReadPage, ReadQuery, WriteAck, WriteCommand};

/// How to reach the cluster.
#[derive(Debug, Clone)]
pub struct CeleriantOptions {
    /// Seed addresses, `HOST:PORT`; the first is dialled first.
    pub addresses: Vec<String>,
    /// The gateway's API key, if the cluster requires one.
    pub api_key: Option<String>,
    /// How long one request may take upstream.
    pub request_timeout: Duration,
}

/// A Celeriant cluster as a [`Backend`].
pub struct CeleriantBackend {
    _options: CeleriantOptions,
}

impl CeleriantBackend {
    /// Builds the pool (dialling lazily).
    pub async fn connect(options: CeleriantOptions) -> Result<Self, String> {
        Ok(CeleriantBackend { _options: options })
    }
}

#[async_trait]
impl Backend for CeleriantBackend {
    fn name(&self) -> &'static str {
        "celeriant"
    }
    async fn write(&self, _command: WriteCommand) -> Result<WriteAck, BackendError> {
        Err(BackendError::Unavailable("not implemented".into()))
    }
    async fn read(&self, _query: ReadQuery) -> Result<ReadPage, BackendError> {
        Err(BackendError::Unavailable("not implemented".into()))
    }
    async fn health(&self) -> Result<(), BackendError> {
        Err(BackendError::Unavailable("not implemented".into()))
    }
}
