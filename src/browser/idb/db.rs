//! The database connection and the one way to use it: [`Db::read`] and [`Db::write`] open a
//! transaction on the named stores, run the given requests, wait for the transaction to
//! finish, and map every failure to a [`StoreError`] the same way — so a full disk reads as
//! `QuotaExceeded` on every write path (append, pin, settle, park, discard, prune).
//!
//! The connection is replaced when another context upgrades the database: on `versionchange`
//! it is closed at once (so the upgrade is never blocked by this client) and the next
//! operation reopens the database at whatever version it now has. Schema upgrades are
//! additive ([`super::schema`]), so this client keeps working on a newer schema. The browser
//! closing the connection abnormally (the `close` event) takes the same path
//! ([`connection_lost`]). A reopen never creates the database: if it is gone (deleted or
//! evicted), the storage is [`Storage::Lost`] and the connection closed for good, so a running
//! client never starts over on an empty database with a new identity. An open or reopen whose
//! future is dropped midway leaves nothing behind: no database created or upgraded, no
//! connection open ([`Abandon`], [`Unkept`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{DomException, IdbDatabase, IdbFactory, IdbOpenDbRequest, IdbTransaction};

use super::request;
use super::schema;
use crate::browser::global;
use crate::engine::outbox::{Begun, Cause, StoreError};

/// How committed writes reach the disk (IndexedDB transaction durability).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Committed means flushed to disk.
    Strict,
    /// Committed means handed to the OS; may be lost on power failure, not on a crash of the
    /// tab or the browser.
    Relaxed,
    /// The browser's default.
    Default,
}

impl Durability {
    fn as_str(self) -> &'static str {
        match self {
            Durability::Strict => "strict",
            Durability::Relaxed => "relaxed",
            Durability::Default => "default",
        }
    }
}

/// Maps a platform error (a `DOMException`, usually) to a [`StoreError`], keeping it as the
/// cause.
pub fn store_error(e: JsValue) -> StoreError {
    let Some(ex) = e.dyn_ref::<DomException>() else {
        let message = e
            .dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .unwrap_or_else(|| "an IndexedDB call failed".into());
        return StoreError::Failed {
            name: "IndexedDB".into(),
            message,
            cause: Cause::new(e),
        };
    };
    let (name, message) = (ex.name(), ex.message());
    match name.as_str() {
        "QuotaExceededError" => StoreError::QuotaExceeded(message, Cause::new(e)),
        "InvalidStateError" => StoreError::Closed,
        _ => StoreError::Failed {
            name,
            message,
            cause: Cause::new(e),
        },
    }
}

/// `?` for results whose error is a `JsValue`.
pub trait Js<T> {
    /// The result with its error mapped by [`store_error`].
    fn js(self) -> Result<T, StoreError>;
}

impl<T> Js<T> for Result<T, JsValue> {
    fn js(self) -> Result<T, StoreError> {
        self.map_err(store_error)
    }
}

fn factory() -> Result<IdbFactory, StoreError> {
    global::property("indexedDB")
        .and_then(|f| f.dyn_into::<IdbFactory>().ok())
        .ok_or_else(|| StoreError::Failed {
            name: "NotSupportedError".into(),
            message: "IndexedDB is not available here".into(),
            cause: Cause::NONE,
        })
}

/// The storage under a [`Db`], as the client last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// The connection is open (or was never lost).
    Ok,
    /// The connection was closed under the client (the browser's `close` event, another
    /// context's upgrade); the next operation reopens it.
    Reopening,
    /// The database is gone (deleted by another context, or evicted): never reopened.
    Lost,
}

impl Storage {
    /// As JavaScript sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            Storage::Ok => "ok",
            Storage::Reopening => "reopening",
            Storage::Lost => "lost",
        }
    }
}

/// The error name of a reopen that found no database ([`open_at`] with `must_exist`).
const GONE: &str = "NotFoundError";

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    /// Listeners of our own on an open request; returns `abandon()` ([`Abandon`]).
    #[wasm_bindgen(js_name = guardOpen)]
    fn guard_open(request: &IdbOpenDbRequest) -> js_sys::Function;
}

/// Calls `abandon()` of `guardOpen` (glue.js) when dropped armed: the open's future was dropped
/// before it settled (a drain's operation dropped on close or takeover, mid-reopen). The
/// request runs on without us; `guardOpen` aborts its upgrade (a reopen must not create an
/// empty database) and closes the connection it opens (nobody else would, and it would block
/// deletes and other contexts' upgrades).
struct Abandon(Option<js_sys::Function>);

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(abandon) = self.0.take() {
            let _ = abandon.call0(&JsValue::UNDEFINED);
        }
    }
}

/// Opens `name` at `version`, running the upgrade when it is older (or new). With
/// `must_exist`, a database that does not exist is not created: the upgrade is aborted (which
/// leaves no database behind) and the open fails with [`GONE`]. Dropping the future before it
/// settled leaves nothing behind either ([`Abandon`]): no database created or upgraded, no
/// connection open.
async fn open_at(
    name: &str,
    version: Option<u32>,
    must_exist: bool,
) -> Result<IdbDatabase, StoreError> {
    let factory = factory()?;
    let request: IdbOpenDbRequest = match version {
        Some(v) => factory.open_with_u32(name, v),
        None => factory.open(name),
    }
    .js()?;
    let gone = Rc::new(Cell::new(false));
    let upgrade = Closure::<dyn FnMut(web_sys::IdbVersionChangeEvent)>::new({
        let (request, gone) = (request.clone(), gone.clone());
        move |event: web_sys::IdbVersionChangeEvent| {
            let old = event.old_version() as u32;
            if let (Ok(db), Some(tx)) = (request.result(), request.transaction()) {
                if must_exist && old == 0 {
                    gone.set(true);
                    let _ = tx.abort();
                    return;
                }
                // An error here aborts the upgrade; the open then fails with it.
                if let Err(e) = schema::upgrade(&db.unchecked_into(), &tx, old) {
                    let _ = tx.abort();
                    web_sys::console::error_1(&e);
                }
            }
        }
    });
    request.set_onupgradeneeded(Some(upgrade.as_ref().unchecked_ref()));
    let mut abandon = Abandon(Some(guard_open(&request)));
    let opened = request::result(Ok(request.clone().unchecked_into())).await;
    abandon.0 = None; // settled, and what it opened is in hand (closed below if unwanted)
    request.set_onupgradeneeded(None);
    drop(upgrade);
    if gone.get() {
        if let Ok(db) = opened {
            db.unchecked_into::<IdbDatabase>().close();
        }
        return Err(StoreError::Failed {
            name: GONE.into(),
            message: format!("the database \"{name}\" is gone (deleted or evicted)"),
            cause: Cause::NONE,
        });
    }
    Ok(opened.js()?.unchecked_into())
}

/// Deletes the database `name` (every store: outbox, local log, the device key, the user it
/// belongs to). Resolves once it is gone; open connections of this origin's clients close
/// themselves on the `versionchange` this causes (see [`watch_version_changes`]).
pub async fn delete_database(name: &str) -> Result<(), StoreError> {
    let request = factory()?.delete_database(name).js()?;
    request::result(Ok(request.unchecked_into())).await.js()?;
    Ok(())
}

/// Opens `name` at [`schema::VERSION`] (creating or upgrading it, unless `must_exist`), or at
/// its current version when a newer client already upgraded it. Public for the browser tests
/// (`tests/browser_storage.rs` drops it midway); the client opens through [`Db`].
#[doc(hidden)]
pub async fn open_database(name: &str, must_exist: bool) -> Result<IdbDatabase, StoreError> {
    match open_at(name, Some(schema::VERSION), must_exist).await {
        Err(StoreError::Failed { name: kind, .. }) if kind == "VersionError" => {
            open_at(name, None, must_exist).await
        }
        other => other,
    }
}

/// What to tell of a change of [`Storage`].
type Hook = Rc<RefCell<Option<Box<dyn Fn(Storage)>>>>;

/// What a [`Db`] shares with its connections' event handlers.
#[derive(Clone, Default)]
struct Shared {
    /// The connection was closed under the client: reopen before the next operation.
    stale: Rc<Cell<bool>>,
    /// Closed by `close`, or the database is gone: never reopened.
    closed: Rc<Cell<bool>>,
    storage: Rc<Cell<Option<Storage>>>,
    /// Told every change of [`Storage`].
    hook: Hook,
}

impl Shared {
    fn storage(&self) -> Storage {
        self.storage.get().unwrap_or(Storage::Ok)
    }

    fn set(&self, storage: Storage) {
        if self.storage() == storage || self.storage() == Storage::Lost {
            return;
        }
        self.storage.set(Some(storage));
        if let Some(hook) = self.hook.borrow().as_ref() {
            hook(storage);
        }
    }
}

/// The one handling of a connection closed under the client: the browser's `close` event (an
/// abnormal close: the disk failed, the storage was cleared or evicted) and `versionchange`
/// (another context upgrades or deletes the database) both come here. Deleted (`deleted`):
/// the storage is lost and the connection closed for good — reopening would silently create an
/// empty database under a client that still holds the deleted one's identity and user.
/// Otherwise the connection is marked stale and the next operation reopens it; if the
/// database is gone by then, the reopen finds out ([`Db::connection`]).
fn connection_lost(shared: &Shared, db: &IdbDatabase, deleted: bool) {
    if shared.closed.get() {
        return; // closed by this client, or already lost
    }
    if deleted {
        shared.closed.set(true);
        shared.set(Storage::Lost);
    } else {
        shared.stale.set(true);
        shared.set(Storage::Reopening);
    }
    db.close();
}

/// Watches `db` for `versionchange` (closed at once, so another context's upgrade or delete is
/// never blocked by this client) and `close`, both through [`connection_lost`]. Returns whether
/// either happened to this connection (a reopened one is not adopted then: [`Db::connection`]).
fn watch_connection(db: &IdbDatabase, shared: &Shared) -> Rc<Cell<bool>> {
    let lost = Rc::new(Cell::new(false));
    let (target, on_change_shared, on_change_lost) = (db.clone(), shared.clone(), lost.clone());
    let on_change = Closure::<dyn FnMut(web_sys::IdbVersionChangeEvent)>::new(
        move |event: web_sys::IdbVersionChangeEvent| {
            on_change_lost.set(true);
            connection_lost(&on_change_shared, &target, event.new_version().is_none());
        },
    );
    db.set_onversionchange(Some(on_change.as_ref().unchecked_ref()));
    let (target, on_close_shared, on_close_lost) = (db.clone(), shared.clone(), lost.clone());
    let on_close = Closure::<dyn FnMut()>::new(move || {
        // The browser fires `close` only when it closed the connection itself, never after
        // this client's own `close()`.
        on_close_lost.set(true);
        connection_lost(&on_close_shared, &target, false);
    });
    db.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    // Live as long as the connection (closed connections fire nothing more).
    on_change.forget();
    on_close.forget();
    lost
}

/// A reopened connection not kept yet ([`Db::connection`]): closed when dropped armed — on
/// every path that does not adopt it, including the future being dropped during the
/// incarnation check (a drain's operation dropped on close or takeover), where nothing else
/// would close it and it would block deletes and other contexts' upgrades.
struct Unkept(Option<IdbDatabase>);

impl Drop for Unkept {
    fn drop(&mut self) {
        if let Some(db) = self.0.take() {
            db.close();
        }
    }
}

/// When a write transaction commits (see [`Db::write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Once its last request answered (the browser's own rule).
    Auto,
    /// As soon as its requests are issued.
    Early,
}

/// One IndexedDB database, reopened after another context upgraded it.
pub struct Db {
    name: String,
    db: RefCell<IdbDatabase>,
    shared: Shared,
    /// `{ durability }` objects, made once.
    options: [JsValue; 3],
    /// Whether a request failing after `commit()` aborts the transaction in this engine
    /// ([`Db::early_commit_is_atomic`]); `None` until probed.
    early_commit_atomic: Cell<Option<bool>>,
    /// Transactions begun so far ([`Db::begun`]).
    begun: Cell<u64>,
    /// The `meta` client id of the database this client opened ([`Db::bind_incarnation`]):
    /// a reopen that finds another one (or none) found a database recreated meanwhile.
    incarnation: RefCell<Option<JsValue>>,
}

/// The stores one transaction works on, as the JS array IndexedDB wants.
pub fn stores(names: &[&str]) -> JsValue {
    names
        .iter()
        .map(|n| JsValue::from_str(n))
        .collect::<Array>()
        .into()
}

impl Db {
    /// Opens (creating or upgrading) the database `name`.
    pub async fn open(name: &str) -> Result<Db, StoreError> {
        let db = open_database(name, false).await?;
        let shared = Shared::default();
        watch_connection(&db, &shared);
        let options = [Durability::Strict, Durability::Relaxed, Durability::Default].map(|d| {
            let o = Object::new();
            let _ = Reflect::set(&o, &"durability".into(), &d.as_str().into());
            JsValue::from(o)
        });
        Ok(Db {
            name: name.to_owned(),
            db: RefCell::new(db),
            shared,
            options,
            early_commit_atomic: Cell::new(None),
            begun: Cell::new(0),
            incarnation: RefCell::new(None),
        })
    }

    /// The current connection, reopened first if it was closed under the client — but never
    /// recreated: a database gone meanwhile makes the storage [`Storage::Lost`].
    async fn connection(&self) -> Result<IdbDatabase, StoreError> {
        let shared = &self.shared;
        // Once more only when the reopened connection was itself closed under the client
        // during its incarnation check (another context's upgrade, again).
        loop {
            if shared.closed.get() {
                return Err(StoreError::Closed);
            }
            if !shared.stale.get() {
                return Ok(self.db.borrow().clone());
            }
            let db = match open_database(&self.name, true).await {
                Ok(db) => db,
                Err(StoreError::Failed { name, .. }) if name == GONE => {
                    shared.closed.set(true);
                    shared.set(Storage::Lost);
                    return Err(StoreError::Closed);
                }
                Err(e) => return Err(e),
            };
            // Watched from the moment it exists: another context's upgrade or delete during
            // the incarnation check closes it at once instead of waiting for a connection that
            // has not seen the `versionchange`.
            let lost = watch_connection(&db, shared);
            let mut unkept = Unkept(Some(db.clone()));
            // An error (not readable now, a transient failure) is not proof of another
            // database: the connection stays stale and the next operation tries again.
            let same = self.same_incarnation(&db).await?;
            if lost.get() {
                continue; // closed under the client meanwhile: not adoptable
            }
            if !same {
                // Deleted and recreated (another context signed in again after the loss):
                // adopting it would write and send another database's events under this
                // client's identity and user, with sequences that start again at 1.
                shared.closed.set(true);
                shared.set(Storage::Lost);
                return Err(StoreError::Closed);
            }
            // Not adopted if closed or lost meanwhile, nor if another operation reopened it
            // meanwhile (no longer stale); `unkept` closes it then.
            if shared.stale.get() && !shared.closed.get() {
                shared.stale.set(false);
                unkept.0 = None;
                *self.db.borrow_mut() = db;
                shared.set(Storage::Ok);
            }
        }
    }

    /// Records the client id in `meta` of the database opened (once its identity is known), so
    /// that a reopen can tell that database from one recreated under the same name.
    pub fn bind_incarnation(&self, client_id: JsValue) {
        *self.incarnation.borrow_mut() = Some(client_id);
    }

    /// Whether `db` (just reopened) is the database this client opened: its `meta` client id is
    /// the bound one (true when none is bound yet; an error when it cannot be read).
    async fn same_incarnation(&self, db: &IdbDatabase) -> Result<bool, StoreError> {
        let Some(expected) = self.incarnation.borrow().clone() else {
            return Ok(true);
        };
        let found = async {
            let tx = db.transaction_with_str(schema::META)?;
            let meta = tx.object_store(schema::META)?;
            request::result(meta.get(&schema::CLIENT_ID_KEY.into())).await
        }
        .await;
        Ok(found.js()? == expected)
    }

    /// Whether the connection was lost under the client (and not closed by us).
    pub fn lost_to_upgrade(&self) -> bool {
        self.shared.stale.get() && !self.shared.closed.get()
    }

    /// Calls `hook` on every change of the storage's state ([`Storage`]).
    pub fn on_storage(&self, hook: impl Fn(Storage) + 'static) {
        *self.shared.hook.borrow_mut() = Some(Box::new(hook));
    }

    /// The storage's state now.
    pub fn storage(&self) -> Storage {
        self.shared.storage()
    }

    /// Closes the connection for good.
    pub fn close(&self) {
        self.shared.closed.set(true);
        self.db.borrow().close();
    }

    /// Whether a transaction committed explicitly ([`Commit::Early`]) still aborts, whole, when
    /// one of its requests fails after the `commit()` (an `add` over an existing key, a full
    /// disk reported on a request). Chromium and WebKit abort it; Firefox commits the other
    /// requests (docs/browsers.md), which would break an append's all-or-nothing. Found out
    /// once per database, by doing exactly that — `put`, then `add` of the same `meta` key,
    /// then `delete` of it, then `commit()` (`earlyCommitIsAtomic` in `src/browser/glue.js`) —
    /// and seeing whether the transaction aborted (with the `add`'s error, or none). It leaves
    /// nothing behind either way. Any other outcome (a closed database, this client's or one
    /// closed for another context's upgrade; a full disk) answers `false` and is not
    /// remembered, nor is an abort seen after the connection was lost to an upgrade.
    pub async fn early_commit_is_atomic(&self) -> bool {
        if let Some(known) = self.early_commit_atomic.get() {
            return known;
        }
        let Ok(db) = self.connection().await else {
            return false;
        };
        let probe = JsFuture::from(request::early_commit_is_atomic(&db, schema::META)).await;
        match probe.ok().and_then(|answer| answer.as_bool()) {
            Some(atomic) if !(atomic && self.lost_to_upgrade()) => {
                self.early_commit_atomic.set(Some(atomic));
                atomic
            }
            _ => false,
        }
    }

    fn begin(
        &self,
        db: &IdbDatabase,
        names: &JsValue,
        mode: &str,
        durability: Durability,
    ) -> Result<IdbTransaction, StoreError> {
        let options = &self.options[durability as usize];
        let tx = request::begin(db, names, mode, options).js()?;
        self.begun.set(self.begun.get() + 1);
        Ok(tx)
    }

    /// Runs `body` in a read-only transaction on `names` (see [`stores`]).
    pub async fn read<T>(
        &self,
        names: &JsValue,
        body: impl AsyncFnOnce(&IdbTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = self.begin_read(names).await?;
        body(&tx).await
    }

    /// Begins a read-only transaction (one function for every [`Db::read`], for size).
    async fn begin_read(&self, names: &JsValue) -> Result<IdbTransaction, StoreError> {
        let db = self.connection().await?;
        self.begin(&db, names, "readonly", Durability::Default)
    }

    /// When the transaction of the [`Db::read`] or [`Db::write`] body that asks began — asked
    /// before the body's first `await` (the body starts right after its transaction began, in
    /// the same turn). A read sees exactly the writes of this `Db` (across reconnections)
    /// that began before it: IndexedDB runs transactions with overlapping scopes in the order
    /// they began.
    pub fn begun(&self) -> Begun {
        Begun(self.begun.get().saturating_sub(1))
    }

    /// Runs `body` in a read-write transaction on `names` and resolves once the transaction
    /// committed, durable as `durability` says. If it aborted, the error is the transaction's
    /// own (`QuotaExceededError` for a full disk, which only shows there). A request that fails
    /// (an `add` over an existing key) aborts the whole transaction.
    ///
    /// `commit` asks the browser to commit as soon as the body has issued its requests,
    /// instead of after the last one's answer reached this context — one round trip less. Only
    /// for transactions whose requests cannot fail one by one (`put`, `delete`), or where
    /// [`Db::early_commit_is_atomic`]: Firefox commits an explicitly committed transaction
    /// even when one of its requests fails afterwards, which would break an append's
    /// all-or-nothing.
    pub async fn write<T>(
        &self,
        names: &JsValue,
        durability: Durability,
        commit: Commit,
        body: impl AsyncFnOnce(&IdbTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // Only the body is generic: beginning and ending are one function each, shared by
        // every caller (each instantiation of this function costs wasm size).
        let (tx, done) = self.begin_write(names, durability).await?;
        let value = body(&tx).await;
        end_write(&tx, done, commit, value.is_ok()).await?;
        value
    }

    /// Begins a read-write transaction, watching for its end before any request can finish.
    async fn begin_write(
        &self,
        names: &JsValue,
        durability: Durability,
    ) -> Result<(IdbTransaction, JsFuture), StoreError> {
        let db = self.connection().await?;
        let tx = self.begin(&db, names, "readwrite", durability)?;
        let done: JsFuture = request::watch(&tx);
        Ok((tx, done))
    }
}

/// Ends a [`Db::write`]: after a body that failed (`ok` false), aborts and waits for the abort
/// (the body's error is the one returned); otherwise commits (at once with [`Commit::Early`])
/// and resolves once the transaction committed, or fails with why it aborted.
async fn end_write(
    tx: &IdbTransaction,
    done: JsFuture,
    commit: Commit,
    ok: bool,
) -> Result<(), StoreError> {
    if !ok {
        let _ = tx.abort();
        let _ = done.await;
        return Ok(());
    }
    if commit == Commit::Early {
        request::commit(tx);
    }
    match done.await {
        Ok(_) => Ok(()),
        Err(e) if e.is_null() || e.is_undefined() => Err(StoreError::Failed {
            name: "AbortError".into(),
            message: "the transaction was aborted".into(),
            cause: Cause::NONE,
        }),
        Err(e) => Err(store_error(e)),
    }
}
