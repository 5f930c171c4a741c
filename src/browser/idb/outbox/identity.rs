//! The device's identity in `meta`: its key pair, the client id derived from it, and the move
//! from the random client id a database had before device keys (which parks a pinned batch
//! rather than resend it under the new id).

use js_sys::Object;
use uuid::Uuid;
use wasm_bindgen::{JsCast, JsValue};

use super::super::db::{Commit, Js, stores};
use super::super::keys::{Agg, parse_uuid, uuid_js};
use super::super::schema::{CLIENT_ID_KEY, META, OUTBOX, PARKED, PIN_KEY};
use super::codecs::{batch_of_record, parked_record};
use super::cut::events_between;
use super::{IdbOutbox, get, store};
use crate::browser::js;
use crate::engine::model::{IDENTITY_CHANGED, ParkRecord};
use crate::engine::outbox::StoreError;

/// The device's key pair, as stored in `meta` (`"device"`).
pub struct Device {
    /// The `CryptoKeyPair` (structured-cloned into IndexedDB; its private key stays
    /// non-extractable).
    pub key_pair: JsValue,
    /// The public key's SPKI DER.
    pub spki: Vec<u8>,
    /// The client id derived from it.
    pub client_id: Uuid,
}

/// `meta` key of the device's key pair.
const DEVICE_KEY: &str = "device";
/// `meta` key of the random client id a database had before it had a device key.
const PREVIOUS_CLIENT_ID_KEY: &str = "previousClientId";

fn device_record(d: &Device) -> JsValue {
    let o = Object::new();
    js::set(&o, "keyPair", d.key_pair.clone());
    js::set(&o, "spki", js_sys::Uint8Array::from(d.spki.as_slice()));
    js::set(&o, "clientId", uuid_js(&d.client_id));
    o.into()
}

fn device_of_record(v: &JsValue) -> Result<Option<Device>, StoreError> {
    if v.is_undefined() {
        return Ok(None);
    }
    let spki = js::get(v, "spki")
        .dyn_into::<js_sys::Uint8Array>()
        .map_err(|_| StoreError::Corrupt("the device record has no public key".into()))?;
    Ok(Some(Device {
        key_pair: js::get(v, "keyPair"),
        spki: spki.to_vec(),
        client_id: parse_uuid(&js::get(v, "clientId"))?,
    }))
}

impl IdbOutbox {
    /// The device's stored key pair, if it has one.
    pub async fn device(&self) -> Result<Option<Device>, StoreError> {
        self.db
            .read(&stores(&[META]), async |tx| {
                device_of_record(&get(&store(tx, META)?, &DEVICE_KEY.into()).await?)
            })
            .await
    }

    /// Binds the connection to this database's identity: a reopen after the connection was
    /// closed under the client refuses a database whose `meta` client id is not `client_id`
    /// (one deleted and recreated meanwhile), and reports the storage lost instead.
    pub fn bind_incarnation(&self, client_id: &Uuid) {
        self.db.bind_incarnation(uuid_js(client_id));
    }

    /// Stores `candidate` as the device's key pair and its client id as the database's — in
    /// one transaction, unless a key pair is stored already (another context was first), which
    /// is then returned instead.
    ///
    /// A database that had a random client id (made before device keys) starts its new
    /// identity here: events never sent are simply sent under the new id, but a pinned batch
    /// may have landed under the old one, so it is parked ([`IDENTITY_CHANGED`],
    /// `mayHaveLanded`) for the app to check and discard or append again — never resent under
    /// the new id, where it could land a second time.
    pub async fn adopt_device(&self, candidate: Device) -> Result<Device, StoreError> {
        self.db
            .write(
                &stores(&[META, PARKED, OUTBOX]),
                self.durability,
                Commit::Early,
                async |tx| {
                    let meta = store(tx, META)?;
                    if let Some(stored) = device_of_record(&get(&meta, &DEVICE_KEY.into()).await?)?
                    {
                        return Ok(stored);
                    }
                    let previous = get(&meta, &CLIENT_ID_KEY.into()).await?;
                    let new_id = uuid_js(&candidate.client_id);
                    meta.put_with_key(&device_record(&candidate), &DEVICE_KEY.into())
                        .js()?;
                    meta.put_with_key(&new_id, &CLIENT_ID_KEY.into()).js()?;
                    if previous.is_undefined() || previous == new_id {
                        return Ok(candidate);
                    }
                    meta.put_with_key(&previous, &PREVIOUS_CLIENT_ID_KEY.into())
                        .js()?;
                    if let Some(pin) = batch_of_record(&get(&meta, &PIN_KEY.into()).await?)? {
                        // One record per aggregate: every leg of a pinned atomic write.
                        let (events, parked) = (store(tx, OUTBOX)?, store(tx, PARKED)?);
                        let message = format!(
                            "this batch was pinned when the database moved from client id {} \
                             to its device key; it may have landed under the old id: check the \
                             aggregate, then discard it or append it again",
                            previous.as_string().unwrap_or_default()
                        );
                        for (aggregate, first_seq, last_seq) in pin.spans() {
                            let a = Agg::new(&aggregate);
                            let above = first_seq.saturating_sub(1);
                            let stored = if above < last_seq {
                                events_between(&events, &a, above, last_seq).await?.len()
                            } else {
                                0
                            };
                            let record = ParkRecord {
                                aggregate,
                                first_seq,
                                last_seq,
                                count: stored as u32,
                                code: IDENTITY_CHANGED,
                                message: message.clone(),
                                parked_at: js_sys::Date::now() as u64,
                                may_have_landed: true,
                                current_version: None,
                                atomic: pin.atomic.clone(),
                            };
                            parked.put(&parked_record(&record)).js()?;
                        }
                        meta.delete(&PIN_KEY.into()).js()?;
                    }
                    Ok(candidate)
                },
            )
            .await
    }
}

/// [`Outbox::client_id`](crate::engine::outbox::Outbox::client_id).
pub(super) async fn client_id(this: &IdbOutbox, fresh: Uuid) -> Result<Uuid, StoreError> {
    this.db
        .write(
            &stores(&[META]),
            this.durability,
            Commit::Early,
            async |tx| {
                let meta = store(tx, META)?;
                let existing = get(&meta, &CLIENT_ID_KEY.into()).await?;
                if existing.is_undefined() {
                    meta.put_with_key(&uuid_js(&fresh), &CLIENT_ID_KEY.into())
                        .js()?;
                    Ok(fresh)
                } else {
                    parse_uuid(&existing)
                }
            },
        )
        .await
}
