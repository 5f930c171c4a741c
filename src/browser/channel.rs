//! The `BroadcastChannel` of one database: carries [`Message`]s between its contexts (tabs,
//! workers) of the same origin.
//!
//! A message travels as a plain object `{ kind, ...fields }` (structured clone); status and
//! notices in the very shapes the app sees ([`super::convert`]). A message this version cannot
//! read (another version of the library, damage) is ignored.
//!
//! Fields added since a message first existed are read as absent from an older release: a
//! `catchUp` without `read` asks an untagged catch-up (its `caughtUp` answers that tab's reads
//! as its release does, by aggregate), a `caughtUp` without `reads` answers every `read` of
//! its aggregate (an older drainer's, as its release does). An older release ignores the
//! fields it does not know.

use js_sys::{Array, Object};
use wasm_bindgen::prelude::*;
use web_sys::{BroadcastChannel, MessageEvent};

use super::convert::{
    aggregate_from_js, aggregate_to_js, parked_from_js, parked_to_js, status_from_js, status_to_js,
    synced_from_js, synced_to_js,
};
use super::idb::legs::{legs_js, legs_of};
use super::js;
use crate::engine::coord::Message;
use crate::engine::model::{AggregateRef, ParkRecord};
use crate::engine::read::message::{ReadMessage, ReadTag};

fn tagged(kind: &str, fields: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    js::set(&o, "kind", kind);
    for (k, v) in fields {
        js::set(&o, k, v.clone());
    }
    o.into()
}

/// A message as the plain object that travels.
pub(crate) fn encode(message: &Message) -> JsValue {
    match message {
        Message::Status(s) => tagged("status", &[("value", status_to_js(s))]),
        Message::Synced(n) => tagged("synced", &[("value", synced_to_js(n))]),
        Message::Parked(r) => match &r.atomic {
            // The legs too (the detail names only the other aggregates, `atomicWith`): every
            // context's hub then holds the record as the drainer's does, and tells its app's
            // `parked` listeners which aggregates were parked with it.
            Some(legs) => tagged(
                "parked",
                &[("value", parked_to_js(r)), ("legs", legs_js(legs))],
            ),
            None => tagged("parked", &[("value", parked_to_js(r))]),
        },
        Message::Appended { n } => tagged("appended", &[("n", JsValue::from_f64(*n as f64))]),
        Message::Discarded { aggregate, removed } => tagged(
            "discarded",
            &[
                ("aggregate", aggregate_to_js(aggregate)),
                ("removed", JsValue::from(*removed)),
            ],
        ),
        Message::Heartbeat => tagged("heartbeat", &[]),
        Message::Hello => tagged("hello", &[]),
        Message::Read(read) => encode_read(read),
    }
}

fn agg(aggregate: &AggregateRef) -> (&'static str, JsValue) {
    ("aggregate", aggregate_to_js(aggregate))
}

fn encode_read(message: &ReadMessage) -> JsValue {
    match message {
        ReadMessage::Watch { context, list } => {
            let items = Array::new();
            for (aggregate, count) in list {
                let item = Object::new();
                js::set(&item, "aggregate", aggregate_to_js(aggregate));
                js::set(&item, "count", *count);
                items.push(&item);
            }
            tagged(
                "watch",
                &[
                    // A u64 in a string: the context id is random over 64 bits.
                    ("context", JsValue::from_str(&context.to_string())),
                    ("list", items.into()),
                ],
            )
        }
        ReadMessage::WhoWatches => tagged("whoWatches", &[]),
        ReadMessage::CatchUp { aggregate, read } => match read {
            Some(tag) => tagged("catchUp", &[agg(aggregate), ("read", tag_to_js(tag))]),
            None => tagged("catchUp", &[agg(aggregate)]),
        },
        ReadMessage::CaughtUp {
            aggregate,
            ok,
            reads,
        } => tagged(
            "caughtUp",
            &[
                agg(aggregate),
                ("ok", JsValue::from_bool(*ok)),
                (
                    "reads",
                    (reads.iter().flatten())
                        .map(tag_to_js)
                        .collect::<Array>()
                        .into(),
                ),
            ],
        ),
        ReadMessage::LogChanged(a) => tagged("logChanged", &[agg(a)]),
        ReadMessage::Touched(a) => tagged("touched", &[agg(a)]),
    }
}

/// A read's tag as it travels: `"<context>.<waiter>"` (both u64: the context id is random over
/// 64 bits, past what a JS number holds exactly).
fn tag_to_js(tag: &ReadTag) -> JsValue {
    JsValue::from_str(&format!("{}.{}", tag.context, tag.waiter))
}

fn tag_from_js(value: &JsValue) -> Option<ReadTag> {
    let text = value.as_string()?;
    let (context, waiter) = text.split_once('.')?;
    Some(ReadTag {
        context: context.parse().ok()?,
        waiter: waiter.parse().ok()?,
    })
}

/// At most this many entries in a `watch` message's list (a context's subscriptions) and in a
/// `caughtUp`'s `reads` (the reads one catch-up answers): a message past either is ignored, so
/// a malformed one (a sparse array of 2^32 - 1, cheap to post) is refused by its length before
/// anything is read, not copied until the module's memory runs out.
const MAX_LIST: u32 = 1 << 20;
const MAX_READS: u32 = 1 << 16;

fn decode_read(kind: &str, value: &JsValue) -> Option<ReadMessage> {
    let aggregate = || aggregate_from_js(&js::get(value, "aggregate"));
    Some(match kind {
        "watch" => {
            let context = js::get_string(value, "context")?.parse().ok()?;
            let mut list = Vec::new();
            let items = js::get(value, "list");
            // Not an array: no subscriptions, as before; too long: the message is ignored.
            let items = match items.dyn_ref::<Array>() {
                Some(_) => js::array_within(&items, MAX_LIST)?.clone(),
                None => Array::new(),
            };
            for item in items.iter() {
                let aggregate = aggregate_from_js(&js::get(&item, "aggregate"))?;
                list.push((aggregate, u32::try_from(js::get_u64(&item, "count")?).ok()?));
            }
            ReadMessage::Watch { context, list }
        }
        "whoWatches" => ReadMessage::WhoWatches,
        "catchUp" => {
            // Absent: an older release's (untagged); present, it must read as a tag.
            let read = js::get(value, "read");
            ReadMessage::CatchUp {
                aggregate: aggregate()?,
                read: if read.is_undefined() {
                    None
                } else {
                    Some(tag_from_js(&read)?)
                },
            }
        }
        "caughtUp" => ReadMessage::CaughtUp {
            aggregate: aggregate()?,
            ok: js::get(value, "ok").as_bool()?,
            // Absent (an older release's): `None`, every read of the aggregate is answered.
            reads: match js::get(value, "reads") {
                v if v.is_undefined() => None,
                v => Some(
                    (js::array_within(&v, MAX_READS)?.iter())
                        .map(|t| tag_from_js(&t))
                        .collect::<Option<_>>()?,
                ),
            },
        },
        "logChanged" => ReadMessage::LogChanged(aggregate()?),
        "touched" => ReadMessage::Touched(aggregate()?),
        _ => return None,
    })
}

/// Reads a message back; `None` for anything this version does not understand.
pub(crate) fn decode(value: &JsValue) -> Option<Message> {
    let inner = || js::get(value, "value");
    Some(match js::get_string(value, "kind")?.as_str() {
        "status" => Message::Status(status_from_js(&inner())?),
        "synced" => Message::Synced(synced_from_js(&inner())?),
        "parked" => Message::Parked(ParkRecord {
            atomic: legs_of(&js::get(value, "legs"), "a parked message").ok()?,
            ..parked_from_js(&inner())?
        }),
        "appended" => Message::Appended {
            n: js::get_u64(value, "n")?,
        },
        "discarded" => Message::Discarded {
            aggregate: aggregate_from_js(&js::get(value, "aggregate"))?,
            removed: js::get_u64(value, "removed")? as u32,
        },
        "heartbeat" => Message::Heartbeat,
        "hello" => Message::Hello,
        other => Message::Read(decode_read(other, value)?),
    })
}

/// The channel of one database; closed when dropped.
pub(crate) struct Channel {
    channel: BroadcastChannel,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
}

impl Channel {
    /// Opens the channel of `database`, calling `handle` for every message from another context.
    /// `None` where `BroadcastChannel` does not exist.
    pub(crate) fn open(
        database: &str,
        mut handle: impl FnMut(Message) + 'static,
    ) -> Option<Channel> {
        let channel = BroadcastChannel::new(&format!("celeriant-sync:{database}")).ok()?;
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
            if let Some(message) = decode(&event.data()) {
                handle(message);
            }
        });
        channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        Some(Channel {
            channel,
            _on_message: on_message,
        })
    }

    /// Posts a message to every other context of the database.
    pub(crate) fn post(&self, message: &Message) {
        let _ = self.channel.post_message(&encode(message));
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.channel.set_onmessage(None);
        self.channel.close();
    }
}
