//! The read side's platform in the draining context: what the engine's generic executor
//! ([`ReadRun`], `engine/read/run.rs`) needs done in a browser — the change streams
//! ([`super::stream`], SSE over `fetch`, under a session and a proof), catch-up page requests
//! and what their JSON says, pages stored with their cursor in one IndexedDB transaction,
//! `setTimeout` timers, `spawn_local`. The decisions of how to perform the
//! [`Reader`](crate::engine::read::machine::Reader)'s actions (the input queue, the page
//! deadline, stopping, retries, what a stream's end means) are the executor's.

use std::rc::Rc;

use gloo_timers::callback::Timeout;
use js_sys::JSON;
use wasm_bindgen::JsValue;

use super::convert::{refused_from_js, tips_from_js};
use super::env::BrowserEnv;
use super::idb::outbox::IdbOutbox;
use super::js;
use super::network::{NetworkSwitch, SWITCHED_OFF};
use super::session::GatewaySessions;
use super::stream::WatchStream;
use crate::engine::backoff::Backoff;
use crate::engine::env::Env;
use crate::engine::model::AggregateRef;
use crate::engine::read::machine::StreamId;
use crate::engine::read::routing::ReaderNews;
use crate::engine::read::run::{ReadPlatform, ReadRun, StreamSink};
use crate::engine::status::Hub;
use celeriant_sync_protocol::WATCH_PATH;
use celeriant_sync_protocol::watch;

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `JSON.parse` of a JS string as it is (`js_sys::JSON::parse` takes a `&str`: a copy of
    /// the text into JS).
    #[wasm_bindgen(js_namespace = JSON, js_name = parse, catch)]
    fn parse_text(text: &JsValue) -> Result<JsValue, JsValue>;
}

mod fetch_page;

/// Where the reader reads from.
pub(crate) struct ReaderConfig {
    /// The gateway's base URL.
    pub gateway_url: String,
    /// Per-request timeout for pages.
    pub timeout_ms: u32,
    /// The device's client id, as the server writes it.
    pub me: String,
    /// How a failed stream or page waits before it is tried again (the drain's, `maxBackoffMs`).
    pub backoff: Backoff,
    /// The client's network switch: off, no page is read and no stream opened.
    pub network: NetworkSwitch,
}

/// The read side of the draining context: the engine's executor over the browser.
pub(crate) type ReaderRuntime = ReadRun<BrowserRead>;

/// The browser's side of the read executor.
pub(crate) struct BrowserRead {
    config: ReaderConfig,
    env: BrowserEnv,
    outbox: Rc<IdbOutbox>,
    sessions: Rc<GatewaySessions>,
}

/// A reader with nothing watched yet; `news` hears of log changes and catch-ups.
pub(crate) fn start(
    config: ReaderConfig,
    outbox: Rc<IdbOutbox>,
    hub: Rc<Hub>,
    sessions: Rc<GatewaySessions>,
    news: Box<dyn Fn(ReaderNews)>,
) -> Rc<ReaderRuntime> {
    let backoff = config.backoff;
    let env = BrowserEnv {
        lock: None,
        network: config.network.clone(),
    };
    let platform = BrowserRead {
        config,
        env,
        outbox,
        sessions,
    };
    ReadRun::start(platform, backoff, hub, news)
}

impl BrowserRead {
    /// A session token: the drain's session, or one opened (or renewed) when needed
    /// ([`GatewaySessions::token`]).
    async fn token(&self) -> Result<String, String> {
        self.sessions
            .token()
            .await
            .map_err(|failure| failure.message)
    }
}

impl Env for BrowserRead {
    fn now_ms(&self) -> u64 {
        self.env.now_ms()
    }

    fn sleep(&self, ms: u64) -> impl std::future::Future<Output = ()> {
        self.env.sleep(ms)
    }

    fn is_online(&self) -> bool {
        self.env.is_online()
    }

    fn random(&self) -> f64 {
        self.env.random()
    }
}

impl ReadPlatform for BrowserRead {
    type Log = IdbOutbox;
    type Stream = WatchStream;
    type Timer = Timeout;
    type Reply = fetch_page::PageReply;

    fn log(&self) -> &IdbOutbox {
        &self.outbox
    }

    fn spawn(&self, task: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>) {
        super::env::spawn_boxed(task);
    }

    fn timer(&self, ms: u64, fire: Box<dyn FnOnce()>) -> Timeout {
        // `setTimeout` takes a signed 32-bit delay (gloo passes it on as an `i32`): a longer one
        // would fire at once, so it is capped as `BrowserEnv::sleep` caps it.
        Timeout::new(ms.min(i32::MAX as u64) as u32, fire)
    }

    fn forget_timer(timer: Timeout) {
        timer.forget();
    }

    fn switched_off(&self) -> Option<&'static str> {
        self.config.network.is_off().then_some(SWITCHED_OFF)
    }

    fn page_deadline_ms(&self) -> u64 {
        u64::from(self.config.timeout_ms.saturating_mul(3))
    }

    async fn open_stream(
        &self,
        _id: StreamId,
        aggregates: Vec<AggregateRef>,
        sink: StreamSink<Self>,
    ) -> Option<WatchStream> {
        let body = watch::watch_body(&aggregates);
        let token = self.token().await;
        if !sink.wanted() {
            return None;
        }
        let failed = |sink: StreamSink<Self>| {
            sink.failed();
            None
        };
        if self.config.network.is_off() {
            return failed(sink);
        }
        let Ok(token) = token else {
            return failed(sink);
        };
        let url = format!("{}{WATCH_PATH}", self.config.gateway_url);
        let Ok(proof) = self.sessions.proof("POST", &url, &body, &token).await else {
            return failed(sink);
        };
        if !sink.wanted() {
            return None;
        }
        let named = aggregates;
        let (on_chunk, on_end) = (sink.clone(), sink);
        let sessions = self.sessions.clone();
        let streamed_under = token.clone();
        Some(WatchStream::open(
            &url,
            &token,
            &proof,
            &body,
            move |text: String| {
                on_chunk.chunk(&text, |data| {
                    let data = JSON::parse(data).unwrap_or(JsValue::NULL);
                    let refused = refused_from_js(&js::get(&data, watch::REFUSED));
                    (refused, tips_from_js(&js::get(&data, watch::TIPS), &named))
                })
            },
            move |status: u16, why: String| {
                if on_end.ended(status, || refusal_code(&why)) && status == 401 {
                    sessions.refused(&streamed_under);
                }
            },
        ))
    }

    fn request(
        &self,
        aggregate: AggregateRef,
        probe: bool,
        cursor: crate::engine::read::log::Cursor,
    ) -> impl std::future::Future<Output = Result<fetch_page::PageReply, String>> {
        self.request_page(aggregate, probe, cursor)
    }

    fn read_reply(
        &self,
        reply: &fetch_page::PageReply,
    ) -> crate::engine::read::run::Replied<js_sys::Array> {
        self.read_page(reply)
    }

    fn store(
        &self,
        aggregate: AggregateRef,
        batches: &js_sys::Array,
        expected: crate::engine::read::log::Cursor,
        size: u64,
    ) -> impl std::future::Future<
        Output = Result<
            Option<crate::engine::read::log::Cursor>,
            crate::engine::outbox::StoreError,
        >,
    > {
        self.outbox
            .store_fetched_page(aggregate, batches, &self.config.me, expected, size)
    }

    fn caught_up(&self, aggregate: AggregateRef) {
        self.outbox.caught_up(aggregate);
    }

    fn stopped(&self) {
        self.outbox.forget_kept();
    }

    fn never_served(&self, aggregate: AggregateRef, notified: u64, reached: u64) {
        web_sys::console::warn_1(
            &format!(
                "celeriant-sync: the gateway notified version {notified} of {}/{} but its \
                 pages still end at {reached}; no longer waiting for it",
                aggregate.type_id, aggregate.id
            )
            .into(),
        );
    }
}

/// The gateway's code in a refusal as `openWatch` reports it (`HTTP 400: {"code":…}`).
fn refusal_code(why: &str) -> Option<u32> {
    let body = why.split_once(": ")?.1;
    let parsed = JSON::parse(body).ok()?;
    js::get_u64(&parsed, watch::CODE).and_then(|c| u32::try_from(c).ok())
}
