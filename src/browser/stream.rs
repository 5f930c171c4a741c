//! The change stream's connection: `POST {gateway}/v1/watch` read as a stream with `fetch`
//! (so it carries the session's `Authorization` header and its `DPoP` proof, which
//! `EventSource` cannot).
//!
//! The connection is a few lines of JavaScript: the response body decoded as UTF-8 chunks,
//! each handed to Rust (which parses the Server-Sent Events, [`crate::engine::read::sse`]);
//! a timer that ends the stream after [`SILENCE_MS`] without a byte (the gateway heartbeats
//! every 15 s, so a dead connection is noticed within 30 s); one end callback, called once,
//! with the HTTP status when there was a refusal. Closing from Rust aborts the request and
//! calls nothing.

use js_sys::Function;
use wasm_bindgen::prelude::*;

/// How long a stream may stay silent before it is treated as dead.
pub(crate) const SILENCE_MS: u32 = 30_000;

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    #[wasm_bindgen(js_name = openWatch)]
    fn open_watch(
        url: &str,
        token: &str,
        proof: &str,
        body: &str,
        silence_ms: u32,
        on_chunk: &Function,
        on_end: &Function,
    ) -> Function;
}

/// An open change stream; dropping it closes it (without calling its end callback).
pub(crate) struct WatchStream {
    close: Function,
    _on_chunk: Closure<dyn FnMut(String) -> bool>,
    _on_end: Closure<dyn FnMut(u16, String)>,
}

impl WatchStream {
    /// Opens the stream: `on_chunk` gets the text as it arrives (returning `false` ends the
    /// stream), `on_end` is called once with the refusal's HTTP status (0 when there was none)
    /// and why.
    pub(crate) fn open(
        url: &str,
        token: &str,
        proof: &str,
        body: &str,
        on_chunk: impl FnMut(String) -> bool + 'static,
        on_end: impl FnMut(u16, String) + 'static,
    ) -> WatchStream {
        let on_chunk = Closure::<dyn FnMut(String) -> bool>::new(on_chunk);
        let on_end = Closure::<dyn FnMut(u16, String)>::new(on_end);
        let close = open_watch(
            url,
            token,
            proof,
            body,
            SILENCE_MS,
            on_chunk.as_ref().unchecked_ref(),
            on_end.as_ref().unchecked_ref(),
        );
        WatchStream {
            close,
            _on_chunk: on_chunk,
            _on_end: on_end,
        }
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        let _ = self.close.call0(&JsValue::NULL);
    }
}
