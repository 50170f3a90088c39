//! The one streaming request, the Lease watch: its body is read line by
//! line for as long as the server keeps it open. It rides on the client's
//! TLS set-up, credentials and request building, over a connection pool
//! of its own, so closing that pool ends a read blocked in it at once
//! (ureq's `Agent::shutdown`).

use std::io::Read;

use ureq::http;
use ureq::RequestExt;

use super::failure::{self, NoAnswer};
use super::{Client, Patience, Target, CONNECT_TIMEOUT};
use crate::clock::Wakeup;
use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// A stream's status and its body, read as it arrives.
pub(crate) type Streamed = (u16, Box<dyn Read + Send>);

impl Client {
    /// A pool for one long-lived stream, with this client's settings.
    pub(crate) fn stream_pool(&self) -> ureq::Agent {
        let slot = self
            .inner
            .agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.inner.shared_tls.agent(slot.1.config().clone())
    }

    /// `GET path` on `pool`. No overall time limit (a watch lives for
    /// minutes), but a response head not whole within `patience.head`
    /// fails, and so does a read that waits longer than
    /// `patience.silence` for a byte (the peer is gone). `refresh` re-reads the token (after a 401);
    /// `stop` ends a wait for an exec plugin's token. A redirect is an
    /// error, as for every other request.
    pub(crate) fn open_stream(
        &self,
        pool: &ureq::Agent,
        path: &str,
        target: Target<'_>,
        patience: Patience,
        refresh: bool,
        stop: &Wakeup,
    ) -> Result<Streamed> {
        let server = self.inner.base_url.as_str();
        let transport = |why: NoAnswer| Error::Transport {
            target: target.what.to_string(),
            action: target.action,
            source: Box::new(why),
        };
        let mut req = http::Request::builder()
            .method(http::Method::GET)
            .uri(format!("{}{}", self.inner.base_url, path))
            .header("Accept", "application/json");
        let deadline = Deadline::from_now(self.inner.timeout).cancelled_by(stop);
        if let Some(auth) = self.inner.auth.header(refresh, &deadline)? {
            req = req.header("Authorization", auth);
        }
        for (name, value) in &self.inner.headers {
            req = req.header(name, value);
        }
        let resp = req
            .body(&b""[..])
            .map_err(|e| transport(NoAnswer::unbuilt(server, e)))?
            .with_agent(pool)
            .configure()
            .timeout_global(None)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_per_read(Some(patience.silence))
            // The head too: one trickled a byte at a time would otherwise
            // hold the watch, never open, for as long as it lasts.
            .timeout_recv_response(Some(patience.head))
            .build()
            .run()
            .map_err(|e| {
                transport(NoAnswer::from_ureq(
                    server,
                    e,
                    patience.head,
                    CONNECT_TIMEOUT,
                ))
            })?;
        let code = resp.status().as_u16();
        if (300..400).contains(&code) {
            let location = resp.headers().get("location").map(|v| v.as_bytes());
            return Err(failure::redirect(target, code, location));
        }
        Ok((code, Box::new(resp.into_body().into_reader())))
    }
}
