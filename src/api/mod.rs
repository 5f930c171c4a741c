//! The JavaScript API: `SyncClient` and the conversions at its edge — nothing else.
//!
//! * [`client`]: the `#[wasm_bindgen]` class; async methods clone an `Rc` and never hold a
//!   borrow of `self` across an `await`;
//! * [`encryption`]: the `encryption` option: AES-GCM of `data` on append, decryption in views;
//! * [`options`]: parsing and checking `SyncClient.open`'s options;
//! * [`input`]: parsing `append`'s aggregate and events from JS values;
//! * [`output`]: receipts and parked events as plain objects;
//! * [`projection`]: `client.project`, a live fold of a view (the rule in `engine::read::fold`);
//! * [`events`]: the `status`, `synced` and `parked` DOM events;
//! * [`errors`]: every thrown value is a real `Error` named `CeleriantSyncError` with a stable
//!   `code`;
//! * [`codes`]: the server's codes as the exported `ServerCode` enum;
//! * [`typescript`]: the precise `.d.ts` declarations;
//! * [`inspect`]: `client.inspect()` and its types (a second `impl SyncClient` block);
//! * [`account`]: `signOut` and `SyncClient.deleteDatabase` (one browser, many users).
//! * [`share`]: `share`, `unshare` and `members` (the gateway's members endpoint, typed).
//! * [`atomic`]: `appendAtomic`, several aggregates' events landing together or not at all.

pub(crate) mod account;
pub(crate) mod atomic;
pub(crate) mod budget;
pub(crate) mod client;
pub(crate) mod codes;
pub(crate) mod decide;
pub(crate) mod encryption;
pub(crate) mod errors;
pub(crate) mod events;
pub(crate) mod input;
pub(crate) mod inspect;
pub(crate) mod options;
pub(crate) mod output;
pub(crate) mod parked;
pub(crate) mod projection;
pub(crate) mod share;
pub(crate) mod storage;
pub(crate) mod typescript;
