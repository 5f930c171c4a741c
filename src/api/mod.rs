//! The JavaScript API: `SyncClient` and the conversions at its edge.
//!
//! * [`client`]: the `#[wasm_bindgen]` class; async methods clone an `Rc` and never hold a
//!   borrow of `self` across an `await`;
//! * [`options`]: parsing and checking `SyncClient.open`'s options;
//! * [`input`]: parsing `append`'s aggregate and events from JS values;
//! * [`output`]: the plain objects handed back (receipts, status, event details);
//! * [`errors`]: every thrown value is a real `Error` named `CeleriantSyncError` with a stable
//!   `code`;
//! * [`typescript`]: the precise `.d.ts` declarations.

pub mod client;
pub mod errors;
pub mod input;
pub mod options;
pub mod output;
pub mod session;
pub mod typescript;
