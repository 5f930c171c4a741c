//! `SyncClient`, the class apps use.
//!
//! State lives behind an `Rc<Inner>`; every async method clones it and runs an `async move`
//! block, so concurrent calls from JS never hit "recursive use of an object". This layer only
//! converts between JavaScript and Rust: whether this context drains or follows is the
//! runtime's business ([`crate::browser::runtime`]), decided by the engine.

use std::rc::Rc;

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;
use web_sys::EventTarget;

use super::budget::{Budget, Parsing};
use super::encryption::Encryption;
use super::errors::ClientError;
use super::events::DomEvents;
use super::options;
use super::{input, output};
use crate::browser::idb::db::Storage;
use crate::browser::idb::outbox::IdbOutbox;
use crate::browser::idb::principal::Binding;
use crate::browser::identity::{self, Identity};
use crate::browser::network::NetworkSwitch;
use crate::browser::runtime::{Config, Runtime};
use crate::browser::session::GatewaySessions;
use crate::browser::views::Callback;
use crate::engine::append::{self, Held};
use crate::engine::drain;
use crate::engine::errors::ErrorCode;
use crate::engine::model::AggregateRef;
use crate::engine::order::CallOrder;
use crate::engine::outbox::Outbox;
use celeriant_sync_protocol::validate::Limits;

/// How long `open` waits for an answer to `persist: true` (Firefox asks the user).
const PERSIST_WAIT_MS: u32 = 1_000;

/// The error of every call after the database was deleted or evicted under the client.
pub(super) fn storage_lost(pending: u64) -> ClientError {
    ClientError::new(
        ErrorCode::StorageLost,
        format!(
            "the database was deleted or evicted under the client: {pending} pending events \
             are lost (client.storage.lost); open a new client deliberately"
        ),
    )
}

/// What a `SyncClient` holds: the runtime, where listeners are registered, and the limits it
/// checks input against.
pub(super) struct Inner {
    pub(super) runtime: Rc<Runtime>,
    identity: Identity,
    target: EventTarget,
    database_name: String,
    pub(super) limits: Limits,
    persisted: Option<bool>,
    network: NetworkSwitch,
    /// `open`'s `encryption`, if any.
    pub(super) encryption: Option<Rc<Encryption>>,
    /// With `encryption`: appends reach group commit in call order although each awaits
    /// WebCrypto first (see `engine::order`).
    pub(super) order: CallOrder<AggregateRef>,
    /// What the module's appends copied in and have not stored yet (shared by every client).
    pub(super) held: Held,
}

impl Inner {
    pub(super) fn check_open(&self) -> Result<(), ClientError> {
        if let Some(lost) = self.runtime.storage.lost() {
            Err(storage_lost(lost.pending))
        } else if self.runtime.hub.is_closed() {
            Err(ClientError::closed())
        } else {
            Ok(())
        }
    }

    pub(super) fn outbox(&self) -> &IdbOutbox {
        &self.runtime.outbox
    }
}

impl SyncClient {
    /// Registers a listener of the aggregate's views (watching it from the device's change
    /// stream if it is the first here); returns the function that removes it (idempotent).
    fn watch(&self, aggregate: AggregateRef, callback: Callback) -> impl FnMut() + 'static {
        let runtime = self.inner.runtime.clone();
        let id = runtime.views.subscribe(aggregate, callback);
        // Told on every change: the routing passes on only what changes what is watched.
        runtime.watch_changed();
        let mut done = false;
        move || {
            if std::mem::replace(&mut done, true) {
                return;
            }
            runtime.views.unsubscribe(aggregate, id);
            if !runtime.hub.is_closed() {
                runtime.watch_changed();
            }
        }
    }

    /// `append` without options, an unconditional append (what JavaScript's `append(a, e)`
    /// is; for Rust callers, which cannot leave an argument out).
    pub fn append(&self, aggregate: JsValue, events: JsValue) -> Promise {
        self.append_with(aggregate, events, JsValue::UNDEFINED)
    }

    /// Whether this client may reach the network: not switched off, and the platform online.
    pub(super) fn online(&self) -> bool {
        self.inner.network.online()
    }

    /// The runtime (for the API's other files, e.g. `inspect`).
    pub(super) fn runtime(&self) -> Rc<Runtime> {
        self.inner.runtime.clone()
    }

    /// What the client holds (for the API's other files that append, e.g. `atomic`).
    pub(super) fn inner(&self) -> Rc<Inner> {
        self.inner.clone()
    }
}

/// An outbox for one IndexedDB database, draining to one gateway.
///
/// ```ts
/// import init, { SyncClient } from "celeriant-sync";
/// await init();
/// const client = await SyncClient.open({ gatewayUrl: "http://127.0.0.1:8080" });
/// const [receipt] = await client.append({ typeId, id }, [{ type: 3, data: { amount: 10 } }]);
/// client.addEventListener("synced", (e) => console.log("landed", e.detail.eventIds));
/// await client.flush();
/// ```
#[wasm_bindgen]
#[derive(Clone)]
pub struct SyncClient {
    inner: Rc<Inner>,
}

/// Runs `future` as a JS promise. Boxed, so every method shares one instantiation of the
/// promise glue (each generic instantiation costs kilobytes of wasm).
pub(super) fn promise(
    future: impl std::future::Future<Output = Result<JsValue, ClientError>> + 'static,
) -> Promise {
    let boxed: std::pin::Pin<Box<dyn std::future::Future<Output = Result<JsValue, ClientError>>>> =
        Box::pin(future);
    future_to_promise(async move { boxed.await.map_err(JsValue::from) })
}

#[wasm_bindgen]
impl SyncClient {
    /// Opens (or creates) the outbox database and starts draining it to the gateway: a
    /// non-empty outbox from an earlier session is drained at once, its pinned batch first.
    ///
    /// (Declared in `typescript.rs`, with its typed form.)
    #[wasm_bindgen(skip_typescript)]
    pub async fn open(
        #[wasm_bindgen(unchecked_param_type = "SyncClientOptions")] options: JsValue,
    ) -> Result<SyncClient, JsValue> {
        Self::open_inner(options).await.map_err(JsValue::from)
    }

    async fn open_inner(options: JsValue) -> Result<SyncClient, ClientError> {
        let options = options::parse(&options)?;
        let unsupported = |what: &str| ClientError::new(ErrorCode::Unsupported, what.to_owned());
        let target =
            EventTarget::new().map_err(|_| unsupported("EventTarget is not constructible here"))?;
        if !identity::supported() {
            return Err(unsupported(
                "WebCrypto (crypto.subtle) is missing: the client needs a secure context \
                 (https: or localhost) to hold its device key",
            ));
        }
        let outbox = Rc::new(IdbOutbox::open(&options.database_name, options.durability).await?);
        if let Some(user) = &options.user {
            let principal = format!("user:{user}");
            // Bound before the first append can happen, so events appended offline are this
            // user's even if another user's session is the first the gateway opens.
            let refused = match outbox.bind_principal(&principal).await {
                Ok(Binding::Same) => None,
                Ok(Binding::Other(bound)) => Some(ClientError::new(
                    ErrorCode::WrongUser,
                    format!(
                        "database \"{}\" belongs to {bound}, not {principal}: open the user's \
                         own database (databaseName), or delete this one \
                         (SyncClient.deleteDatabase)",
                        options.database_name
                    ),
                )),
                Err(e) => Some(e.into()),
            };
            if let Some(refused) = refused {
                outbox.close();
                return Err(refused);
            }
        }
        let identity = identity::load_or_create(&outbox).await?;
        // Counted before `open` resolves, so `status()` is right from the start.
        let counts = outbox.counts().await?;
        let persisted = if options.persist {
            crate::browser::global::persist_storage(PERSIST_WAIT_MS).await
        } else {
            None
        };
        let network = NetworkSwitch::default();
        network.set_off(options.offline);
        let config = Config {
            gateway_url: options.gateway_url.clone(),
            database_name: options.database_name.clone(),
            write_url: format!(
                "{}{}",
                options.gateway_url,
                celeriant_sync_protocol::WRITE_PATH
            ),
            request_timeout_ms: options.request_timeout_ms,
            policy: options.policy,
            network: network.clone(),
        };
        let events = Rc::new(DomEvents {
            target: target.clone(),
        });
        let sessions = GatewaySessions::new(
            &options.gateway_url,
            identity.clone(),
            options.auth,
            options.request_timeout_ms,
            network.clone(),
            outbox.clone(),
        );
        let watched = outbox.clone();
        let dom = events.clone();
        let runtime = Runtime::start(config, outbox, sessions, events, counts)
            .map_err(|_| unsupported("cannot listen for the online event"))?;
        let encryption = options.encryption.map(Rc::new);
        if let Some(encryption) = &encryption {
            // Before any view is built: views are built in tasks that run after this returns.
            runtime.views.set_decryptor(encryption.clone().decryptor());
        }
        // The connection closed under the client (reopening, then ok again) or the database
        // gone (lost: deleted by another context's `signOut` or `deleteDatabase`, or evicted):
        // reported as the `storage` event; lost also closes the client for good — the drain
        // lock released, the reader stopped, `status().state` "closed" — so the next client on
        // that name is not left following a drainer that can never write again.
        let weak = Rc::downgrade(&runtime);
        watched.on_storage(move |state| {
            let Some(runtime) = weak.upgrade() else {
                return;
            };
            let lost =
                (state == Storage::Lost).then(|| runtime.storage.lose(&runtime.hub.status()));
            dom.dispatch("storage", super::storage::state_to_js(state, lost.as_ref()));
            if lost.is_some() {
                wasm_bindgen_futures::spawn_local(async move { runtime.close().await });
            }
        });
        let inner = Rc::new(Inner {
            runtime,
            identity,
            target,
            database_name: options.database_name,
            limits: Limits::default(),
            persisted,
            network,
            encryption,
            order: CallOrder::default(),
            held: super::budget::module_held(),
        });
        Ok(SyncClient { inner })
    }

    /// The device's client id (a UUID): the first 16 bytes of the SHA-256 of its public key,
    /// little-endian, as Celeriant derives it. Fixed for the database.
    #[wasm_bindgen(getter = clientId)]
    pub fn client_id(&self) -> String {
        self.inner.identity.client_id.to_string()
    }

    /// The device's public key: its SPKI DER, standard base64 (check the `clientId` from it).
    #[wasm_bindgen(getter = publicKey)]
    pub fn public_key(&self) -> String {
        self.inner.identity.public_key.clone()
    }

    /// With `persist: true`: whether the browser granted persistent storage (`null` when it
    /// was not asked, or cannot be asked here, e.g. in a worker).
    #[wasm_bindgen(getter, unchecked_return_type = "boolean | null")]
    pub fn persisted(&self) -> JsValue {
        self.inner.persisted.map_or(JsValue::NULL, JsValue::from)
    }

    /// The IndexedDB database this client uses.
    #[wasm_bindgen(getter = databaseName)]
    pub fn database_name(&self) -> String {
        self.inner.database_name.clone()
    }

    /// Stores events for an aggregate, each with its next sequence, in one IndexedDB
    /// transaction. Resolves once that transaction committed (before any network attempt) with
    /// one receipt per event; rejects with a `CeleriantSyncError` and stores nothing when any
    /// event is invalid or storage fails. With `{ expectedVersion }` it is a conditional
    /// append: its events land, all together, only if the aggregate is then at exactly that
    /// version (`0`: only if it does not exist yet); otherwise they are parked with code 2003.
    #[wasm_bindgen(js_name = append, unchecked_return_type = "Promise<Receipt[]>")]
    pub fn append_with(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
        #[wasm_bindgen(unchecked_param_type = "EventInput[]")] events: JsValue,
        #[wasm_bindgen(unchecked_param_type = "AppendOptions | undefined")] options: JsValue,
    ) -> Promise {
        let inner = self.inner.clone();
        let mut charge = inner.held.charge();
        // Parse synchronously: the caller's objects are read now, not after an await.
        let parsed = inner.check_open().and_then(|()| {
            let _parsing = Parsing::enter()?;
            let now = js_sys::Date::now() as u64;
            let aggregate = input::aggregate(&aggregate)?;
            let expected_version = input::append_options(&options)?;
            let budget = match expected_version {
                Some(_) => {
                    Budget::request("a conditional append, sent as one request,", &inner.limits)
                }
                None => Budget::APPEND,
            };
            let events = input::events(&events, &inner.limits, budget, &mut charge, now)?;
            append::check(&events, &inner.limits)?;
            input::conditional_fits(&events, expected_version, &inner.limits)?;
            Ok((aggregate, events, expected_version))
        });
        // With encryption, the place in the aggregate's line is taken now, in call order (see
        // `engine::order`); a call refused already (bad input, closed) takes none.
        let turn = match (&parsed, &inner.encryption) {
            (Ok((aggregate, _, _)), Some(_)) => Some(inner.order.take(*aggregate)),
            _ => None,
        };
        // Given back when the append's future ends (its events stored, or it failed), at once
        // when the call is refused here.
        let charge = parsed.is_ok().then_some(charge);
        promise(async move {
            let _charge = charge;
            let (aggregate, mut events, expected_version) = parsed?;
            let held = match turn {
                Some(turn) => Some(turn.wait().await),
                None => None,
            };
            // Encrypted before the append's transaction opens: a failure stores nothing, and
            // the ciphertext is what the outbox stores, pins and resends.
            if let Some(encryption) = &inner.encryption {
                encryption.encrypt_all(&aggregate, &mut events).await?;
                // The tag makes each event 16 bytes longer: checked again against the limits.
                append::check(&events, &inner.limits)?;
                input::conditional_fits(&events, expected_version, &inner.limits)?;
            }
            // Polled once before the turn is released: that first poll queues the append in
            // group commit, so the next append cannot reach the queue before this one.
            let mut appended =
                std::pin::pin!(inner.runtime.append(aggregate, events, expected_version));
            let first = futures_util::poll!(appended.as_mut());
            drop(held);
            let receipts = match first {
                std::task::Poll::Ready(receipts) => receipts,
                std::task::Poll::Pending => appended.await,
            };
            // Lost meanwhile: rejected even if the transaction committed, as the database that
            // held it is gone (the runtime added it to what `client.storage.lost` reports).
            if let Some(lost) = inner.runtime.storage.lost() {
                return Err(storage_lost(lost.pending));
            }
            let receipts = receipts?;
            Ok(output::receipts(&receipts))
        })
    }

    /// The outbox's state now: `{ state, role, pending, parked, lastError, read }` (`role`:
    /// whether this context drains or follows; `read`: the change stream's state).
    #[wasm_bindgen(unchecked_return_type = "SyncStatus")]
    pub fn status(&self) -> JsValue {
        crate::browser::convert::status_to_js(&self.inner.runtime.hub.status())
    }

    /// Switches this client's network off (`true`) or back on (`false`), for tests, demos and
    /// apps that want to stay off the network. Off, the client acts as when the device is
    /// offline — appends are stored, the drain waits (state `offline`), `read` answers from the
    /// local log — and sends nothing at all: no write, no offline probe, no session request, no
    /// catch-up read; its change stream is closed. A request already in flight finishes. Back
    /// on, the drain and the change stream resume at once, as on the `online` event. The
    /// switch belongs to this client object: with several tabs on one database, the drainer's
    /// switch is what governs the writes.
    #[wasm_bindgen(js_name = setOffline)]
    pub fn set_offline(
        &self,
        #[wasm_bindgen(unchecked_param_type = "boolean")] offline: JsValue,
    ) -> Result<(), JsValue> {
        // A `JsValue`, not a `bool`: wasm-bindgen converts a `bool` after it has read the
        // client's pointer, running an object's `valueOf` (which could free the client) — and
        // `"true"` or `{}` read as `false`.
        let offline = offline
            .as_bool()
            .ok_or_else(|| js_sys::TypeError::new("setOffline takes a boolean"))?;
        if self.inner.network.set_off(offline) {
            self.inner.runtime.network_switched();
        }
        Ok(())
    }

    /// Whether this client's network is switched off (`setOffline(true)`).
    #[wasm_bindgen(getter)]
    pub fn offline(&self) -> bool {
        self.inner.network.is_off()
    }

    /// Resolves once every event appended before the call has landed. Rejects with code
    /// `PARKED` as soon as one of their aggregates is parked, `CLOSED` if the client closes.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn flush(&self) -> Promise {
        let inner = self.inner.clone();
        promise(async move {
            inner.check_open()?;
            drain::flush(inner.outbox(), &inner.runtime.hub).await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Resolves once the event with this id (from an `append` receipt, in this tab or another,
    /// before or after a reload) has landed. Rejects with `PARKED` if it is parked, `DISCARDED`
    /// if the app discarded it, `CLOSED` if the client closes first. An id this database does
    /// not hold (never appended here, or landed and pruned) resolves at once, as landed.
    #[wasm_bindgen(js_name = whenSynced, unchecked_return_type = "Promise<void>")]
    pub fn when_synced(
        &self,
        #[wasm_bindgen(unchecked_param_type = "string")] event_id: JsValue,
    ) -> Promise {
        let inner = self.inner.clone();
        let id = input::string(
            &event_id,
            ErrorCode::InvalidEventId,
            "eventId",
            input::UUID_TEXT_MAX,
        )
        .and_then(|text| super::input::uuid_text(&text, ErrorCode::InvalidEventId, "eventId"));
        promise(async move {
            inner.check_open()?;
            drain::when_synced(inner.outbox(), &inner.runtime.hub, id?).await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The converged view of an aggregate now: what the server confirmed, in server order, then
    /// this device's pending events. Online, it catches the local log up first; offline (or if
    /// the catch-up fails) it answers from the local log with `fromCache: true`.
    #[wasm_bindgen(unchecked_return_type = "Promise<AggregateView>")]
    pub fn read(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
    ) -> Promise {
        let inner = self.inner.clone();
        let aggregate = input::aggregate(&aggregate);
        promise(async move {
            inner.check_open()?;
            Ok(inner.runtime.read(aggregate?).await?)
        })
    }

    /// Calls `listener` with the aggregate's view at once (from the local log), then after
    /// every change: a confirmed page arrived, a local append, a pending event confirmed, a
    /// reset. Returns the function that unsubscribes (idempotent). The device holds one change
    /// stream for all its contexts' subscriptions.
    #[wasm_bindgen(unchecked_return_type = "() => void")]
    pub fn subscribe(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
        #[wasm_bindgen(unchecked_param_type = "(view: AggregateView) => void")] listener: Function,
    ) -> Result<JsValue, JsValue> {
        self.inner.check_open()?;
        let aggregate = input::aggregate(&aggregate)?;
        let unsubscribe = self.watch(aggregate, Callback::Js(listener));
        let unsubscribe = Closure::<dyn FnMut()>::new(unsubscribe);
        Ok(unsubscribe.into_js_value())
    }

    /// A live projection of the aggregate: `projection.apply(state, event)` folded over its
    /// view from `projection.initial` — the confirmed events once (a new page folds only its
    /// new events), the pending ones again on top at each change, everything again after a
    /// reset. Returns `{ current, value(), subscribe(listener), close() }` (typed in the
    /// `.d.ts`); `apply` must not change the state it is given. What `apply` throws is a
    /// `PROJECTION_FAILED` error in the snapshot, never thrown into the read side.
    #[wasm_bindgen(skip_typescript)]
    pub fn project(&self, aggregate: JsValue, projection: JsValue) -> Result<JsValue, JsValue> {
        self.inner.check_open()?;
        let aggregate = input::aggregate(&aggregate)?;
        let live = super::projection::Projection::new(super::projection::parse_spec(&projection)?);
        let fed = live.clone();
        let mut unsubscribe = self.watch(
            aggregate,
            Callback::Native(Rc::new(move |view: &JsValue, shape| fed.view(view, shape))),
        );
        // The client closing closes it too, so a `value()` waiting for a first fold rejects
        // with CLOSED instead of waiting for ever.
        let closing = live.clone();
        // The event itself is not read: a listener can dispatch one of its own on the client's
        // target, saying anything. The client's own state says whether it closed (set before
        // the `closed` status is dispatched). Weak: the target holds this listener.
        let client = Rc::downgrade(&self.inner);
        let on_status = Closure::<dyn Fn(JsValue)>::new(move |_: JsValue| {
            if client.upgrade().is_none_or(|c| c.runtime.hub.is_closed()) {
                closing.close();
            }
        })
        .into_js_value()
        .unchecked_into::<Function>();
        let target = self.inner.target.clone();
        let _ = target.add_event_listener_with_callback("status", &on_status);
        let stop = move || {
            unsubscribe();
            let _ = target.remove_event_listener_with_callback("status", &on_status);
        };
        Ok(super::projection::to_js(live, Box::new(stop)))
    }

    /// Stops the drain loop (an in-flight request is aborted; its batch stays pinned and is
    /// resent identically next time) and closes the database. Idempotent.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn close(&self) -> Promise {
        let inner = self.inner.clone();
        promise(async move {
            inner.runtime.close().await;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Registers a listener for `status`, `synced` or `parked` (typed in the `.d.ts`).
    #[wasm_bindgen(js_name = addEventListener, skip_typescript)]
    pub fn add_event_listener(
        &self,
        kind: JsValue,
        listener: &Function,
        options: JsValue,
    ) -> Result<(), JsValue> {
        let kind = input::listener_kind(&kind)?;
        if options.is_undefined() {
            self.inner
                .target
                .add_event_listener_with_callback(&kind, listener)
        } else {
            let add: Function =
                js_sys::Reflect::get(&self.inner.target, &"addEventListener".into())?.into();
            add.call3(&self.inner.target, &kind.into(), listener, &options)
                .map(|_| ())
        }
    }

    /// Removes a listener.
    #[wasm_bindgen(js_name = removeEventListener, skip_typescript)]
    pub fn remove_event_listener(&self, kind: JsValue, listener: &Function) -> Result<(), JsValue> {
        let kind = input::listener_kind(&kind)?;
        self.inner
            .target
            .remove_event_listener_with_callback(&kind, listener)
    }
}
