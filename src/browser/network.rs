//! The client's network switch (`client.setOffline(true)`): one flag that every part of a
//! client which talks to the gateway checks before it does, so an app, a test or a demo can
//! take the client off the network for real — unlike overriding `navigator.onLine`, which
//! leaves the drain's slow probe, the catch-up reads and the change stream running.
//!
//! Switched off, the client behaves as it does with the device offline (the drain waits,
//! `read` answers from the local log) and additionally sends nothing at all: a probe, a
//! session request, a write, a catch-up page or a stream would each fail at once, here, as a
//! network error, without reaching `fetch`. The open change stream is closed by the runtime.
//! Switched on again, everything is woken as by the `online` event.

use std::cell::Cell;
use std::rc::Rc;

use super::global;

/// What a request refused by the switch reports (`lastError.message`).
pub(crate) const SWITCHED_OFF: &str = "offline: the client's network is switched off (setOffline)";

/// The switch, shared by the runtime, the drain's transport and environment, the sessions and
/// the reader of one client. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub(crate) struct NetworkSwitch(Rc<Cell<bool>>);

impl NetworkSwitch {
    /// Whether the app switched the network off.
    pub(crate) fn is_off(&self) -> bool {
        self.0.get()
    }

    /// Switches the network off (`true`) or on; returns whether that changed anything.
    pub(crate) fn set_off(&self, off: bool) -> bool {
        self.0.replace(off) != off
    }

    /// Whether the client may count on the network: switched on, and `navigator.onLine`.
    pub(crate) fn online(&self) -> bool {
        !self.is_off() && global::is_online()
    }
}
