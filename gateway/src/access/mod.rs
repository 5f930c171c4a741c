//! Who may do what to an aggregate: principals, access records and the decisions of a policy.
//!
//! Identity (the client id a device proves) grants nothing by itself; access is decided here.
//! A **principal** is who a session acts for: `user:<sub>` when app tokens are on (the app
//! token's subject, so two devices of one user share that user's aggregates), otherwise
//! `device:<clientId>`. Every aggregate has an **access record** written atomically with the
//! write that creates it — its owner (the creating principal) and the members the owner granted
//! access to — and a **preset** for its type, from the policy file (`policy.rs`), decides what
//! the owner, the members and everyone else may do. The backends store the records (the
//! embedded store in the creating write's transaction); the routes and the store ask
//! [`Preset`]'s questions; nothing here touches a store.

pub mod policy;

use std::collections::BTreeMap;

use celeriant_sync_protocol::codes::{celeriant as cc, gateway as g};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use policy::{Policy, Preset};

/// The aggregate type of the gateway's own access records on the Celeriant backend
/// (`backend::celeriant::access`). Refused to every caller of the public API, the operator
/// included (`Session::check_type`): nobody reads, writes or watches the records but the gateway.
pub const RESERVED_TYPE: Uuid = Uuid::from_u128(0xac0e55ed_5ec0_4d00_8000_0000000000a1);

/// The longest principal accepted, in bytes (`user:` and an app token's subject).
pub const MAX_PRINCIPAL_BYTES: usize = 256;

/// Most members one aggregate may have, invitations included.
pub const MAX_MEMBERS: usize = 256;

/// Who a session acts for: `user:<sub>` or `device:<clientId>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Principal(String);

impl Principal {
    /// The principal of a device without an app token.
    pub fn device(client_id: Uuid) -> Self {
        Principal(format!("device:{client_id}"))
    }

    /// The principal of an app token's subject; `None` when it cannot be one (empty, too long,
    /// or with control characters — the rules of [`Principal::parse`], so that every session
    /// issued names a principal the gateway accepts back).
    pub fn user(subject: &str) -> Option<Self> {
        let p = format!("user:{subject}");
        Principal::parse(&p).ok()
    }

    /// A principal named in a request (the members endpoint): `user:<non-empty>` or
    /// `device:<uuid>` in canonical form, without control characters, at most
    /// [`MAX_PRINCIPAL_BYTES`].
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_PRINCIPAL_BYTES {
            return Err(format!(
                "a principal has at most {MAX_PRINCIPAL_BYTES} bytes"
            ));
        }
        if text.chars().any(char::is_control) {
            return Err("a principal has no control characters".into());
        }
        if let Some(id) = text.strip_prefix("device:") {
            let uuid = Uuid::parse_str(id).map_err(|_| format!("{text:?}: not device:<uuid>"))?;
            if uuid.to_string() != id {
                return Err(format!(
                    "{text:?}: write the client id in lower-case hyphenated form"
                ));
            }
            return Ok(Principal::device(uuid));
        }
        match text.strip_prefix("user:") {
            Some(sub) if !sub.is_empty() => Ok(Principal(text.to_owned())),
            _ => Err(format!(
                "{text:?} is not user:<subject> or device:<clientId>"
            )),
        }
    }

    /// The text form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an owner grants a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Grant {
    /// Read and watch.
    Read,
    /// Read, watch and append.
    ReadWrite,
}

/// An aggregate's owner, members and invitations, as stored.
///
/// A grant is first an **invitation** (`invited`): it gives nothing until the invited principal
/// accepts it (`POST …/members/accept`), which moves it into `members`. Otherwise anyone could
/// pre-create an aggregate id another principal's app will use later, grant that principal
/// `readWrite`, and read what its "creating" write then appends to the attacker's aggregate.
///
/// Unknown fields are accepted (not denied): records are written only by gateways, and during a
/// rolling upgrade an older replica must still read a record a newer one wrote. An older
/// replica's members change writes the record back without the fields it does not know, so a
/// new field must be safe to lose until every replica knows it (docs/protocol.md §17.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessRecord {
    /// The principal whose write created the aggregate.
    pub owner: Principal,
    /// The members: principals that accepted the access the owner granted them.
    #[serde(default)]
    pub members: BTreeMap<Principal, Grant>,
    /// Grants not accepted yet: they give nothing. Absent from records written before
    /// invitations existed (read as none); an older replica rewriting a record drops them,
    /// which only withdraws invitations.
    #[serde(default)]
    pub invited: BTreeMap<Principal, Grant>,
}

impl AccessRecord {
    /// A record with `owner` and no members.
    pub fn owned_by(owner: Principal) -> Self {
        AccessRecord {
            owner,
            members: BTreeMap::new(),
            invited: BTreeMap::new(),
        }
    }

    /// Principals named as members or invited (a member with a raise waiting counts once):
    /// what [`MAX_MEMBERS`] bounds.
    pub fn listed(&self) -> usize {
        self.members.len()
            + self
                .invited
                .keys()
                .filter(|p| !self.members.contains_key(*p))
                .count()
    }

    /// Whether `who` is named in the record at all: owner, member or invited.
    pub fn names(&self, who: &Principal) -> bool {
        &self.owner == who || self.members.contains_key(who) || self.invited.contains_key(who)
    }
}

/// Who a request acts as, for the access checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A proven principal: the policy applies.
    Principal(Principal),
    /// The operator credential: reads everything, writes nothing.
    Operator,
    /// `--auth none` (loopback experiments): nobody is proven, nothing is enforced.
    Unchecked,
}

/// Why a write to one aggregate is refused by the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The code to answer (2005 where a refusal must look like a missing aggregate).
    pub code: u32,
    /// The message.
    pub message: String,
}

/// The message of Celeriant's 2005, given alike for a missing aggregate and for one the writer
/// may not see, so that the two cannot be told apart.
pub const NOT_EXISTS_MESSAGE: &str = "aggregate does not exist";

impl Preset {
    /// Whether `who` may read (and watch) an aggregate with `record` (`None`: no record, the
    /// aggregate does not exist or has no owner). An invitation counts for nothing here.
    pub fn may_read(self, record: Option<&AccessRecord>, who: &Principal) -> bool {
        match self {
            Preset::Authenticated | Preset::AuthenticatedRead | Preset::ReadOnly => true,
            Preset::Owner => record.is_some_and(|r| &r.owner == who),
            Preset::Members | Preset::MembersRead => {
                record.is_some_and(|r| &r.owner == who || r.members.contains_key(who))
            }
        }
    }

    /// Whether `who` may append to an existing aggregate with `record`.
    pub fn may_append(self, record: &AccessRecord, who: &Principal) -> bool {
        match self {
            Preset::Authenticated => true,
            Preset::Owner | Preset::AuthenticatedRead | Preset::MembersRead => &record.owner == who,
            Preset::Members => {
                &record.owner == who || record.members.get(who) == Some(&Grant::ReadWrite)
            }
            Preset::ReadOnly => false,
        }
    }

    /// The most an owner may grant a member under this preset (`None`: no members).
    pub fn member_grants(self) -> Option<Grant> {
        match self {
            Preset::Members => Some(Grant::ReadWrite),
            Preset::MembersRead => Some(Grant::Read),
            _ => None,
        }
    }

    /// Judges a write by `who` to an aggregate at `version` (0: not created) with `record`.
    /// `Ok(true)`: allowed, and the write creates the aggregate, so the store records `who` as
    /// its owner in the same transaction; `Ok(false)`: allowed. Judged before the existence
    /// and sequence checks, so that a refused write learns nothing from them.
    ///
    /// A write to an aggregate the writer may not even read is answered exactly like a write
    /// to a missing one when it may not create (2005), so that it is no existence oracle; with
    /// `allowCreate` it is a 403 (40302): the write cannot create an existing aggregate, and
    /// answering "created" would be a lie, so the oracle is unavoidable there (as it is in any
    /// store where ids are unique), and costs the asker nothing it could not learn by trying.
    pub fn judge_write(
        self,
        record: Option<&AccessRecord>,
        version: u64,
        allow_create: bool,
        who: &Principal,
        type_id: Uuid,
    ) -> Result<bool, Refusal> {
        if self == Preset::ReadOnly {
            return Err(Refusal {
                code: g::AGGREGATE_FORBIDDEN,
                message: format!(
                    "aggregates of type {type_id} are read-only through the gateway (policy \
                     read-only)"
                ),
            });
        }
        match record {
            None if version == 0 => return Ok(true),
            // An aggregate without an owner (older than ownership, its first batch gone):
            // only a preset that lets everyone append lets anyone append to it.
            None if self == Preset::Authenticated => return Ok(false),
            Some(r) if self.may_append(r, who) => return Ok(false),
            _ => {}
        }
        if !allow_create && !self.may_read(record, who) {
            return Err(Refusal {
                code: cc::AGGREGATE_NOT_EXISTS,
                message: NOT_EXISTS_MESSAGE.into(),
            });
        }
        Err(Refusal {
            code: g::AGGREGATE_FORBIDDEN,
            message: format!(
                "this aggregate belongs to another principal; {who} may not write to it"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Principal {
        Principal::parse(s).unwrap()
    }

    #[test]
    fn a_record_with_a_field_from_a_later_version_is_read() {
        let json = r#"{"owner":"user:o","members":{"user:m":"read"},"since":7}"#;
        let record: AccessRecord = serde_json::from_str(json).unwrap();
        assert_eq!(record.owner, p("user:o"));
        assert_eq!(record.members[&p("user:m")], Grant::Read);
    }

    #[test]
    fn a_record_without_invitations_is_read_and_an_invitation_grants_nothing() {
        let json = r#"{"owner":"user:o","members":{}}"#;
        let mut record: AccessRecord = serde_json::from_str(json).unwrap();
        assert!(record.invited.is_empty());
        let invited = p("user:i");
        record.invited.insert(invited.clone(), Grant::ReadWrite);
        let back: AccessRecord =
            serde_json::from_str(&serde_json::to_string(&record).unwrap()).unwrap();
        assert_eq!(back, record);
        for preset in [Preset::Members, Preset::MembersRead, Preset::Owner] {
            assert!(!preset.may_read(Some(&record), &invited), "{preset:?}");
            assert!(!preset.may_append(&record, &invited), "{preset:?}");
            // The takeover: the invited principal's creating write to the inviter's id.
            let refused = preset
                .judge_write(Some(&record), 1, true, &invited, Uuid::nil())
                .unwrap_err();
            assert_eq!(refused.code, g::AGGREGATE_FORBIDDEN);
            let refused = preset
                .judge_write(Some(&record), 1, false, &invited, Uuid::nil())
                .unwrap_err();
            assert_eq!(refused.code, cc::AGGREGATE_NOT_EXISTS);
        }
        assert_eq!(record.listed(), 1);
        assert!(record.names(&invited));
    }

    #[test]
    fn principals_are_parsed_strictly() {
        let id = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001";
        assert_eq!(p(&format!("device:{id}")).as_str(), format!("device:{id}"));
        assert_eq!(p("user:alice").as_str(), "user:alice");
        for bad in [
            "alice",
            "user:",
            "device:nope",
            "device:6F1C1C5E-6A4C-4F52-9A37-1E2A8D2F0001",
            "user:a\nb",
            &format!("user:{}", "x".repeat(300)),
        ] {
            assert!(Principal::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_preset_decides_as_documented() {
        let (owner, member, writer, other) = (p("user:o"), p("user:m"), p("user:w"), p("user:x"));
        let mut record = AccessRecord::owned_by(owner.clone());
        record.members.insert(member.clone(), Grant::Read);
        record.members.insert(writer.clone(), Grant::ReadWrite);
        let r = Some(&record);
        let t = Uuid::nil();
        // (preset, who may read, who may append)
        let table = [
            (Preset::Owner, vec![&owner], vec![&owner]),
            (
                Preset::Members,
                vec![&owner, &member, &writer],
                vec![&owner, &writer],
            ),
            (
                Preset::MembersRead,
                vec![&owner, &member, &writer],
                vec![&owner],
            ),
            (
                Preset::Authenticated,
                vec![&owner, &member, &writer, &other],
                vec![&owner, &member, &writer, &other],
            ),
            (
                Preset::AuthenticatedRead,
                vec![&owner, &member, &writer, &other],
                vec![&owner],
            ),
            (
                Preset::ReadOnly,
                vec![&owner, &member, &writer, &other],
                vec![],
            ),
        ];
        for (preset, readers, appenders) in table {
            for who in [&owner, &member, &writer, &other] {
                assert_eq!(
                    preset.may_read(r, who),
                    readers.contains(&who),
                    "{preset:?} {who}"
                );
                let judged = preset.judge_write(r, 3, true, who, t);
                assert_eq!(judged.is_ok(), appenders.contains(&who), "{preset:?} {who}");
                if let Ok(created) = judged {
                    assert!(!created);
                }
            }
        }
        // Creating: anyone, except under read-only.
        assert_eq!(
            Preset::Owner.judge_write(None, 0, true, &other, t),
            Ok(true)
        );
        assert_eq!(
            Preset::ReadOnly
                .judge_write(None, 0, true, &other, t)
                .unwrap_err()
                .code,
            g::AGGREGATE_FORBIDDEN
        );
    }

    #[test]
    fn a_write_to_an_unreadable_aggregate_without_allow_create_looks_missing() {
        let record = AccessRecord::owned_by(p("user:o"));
        let other = p("user:x");
        let refused = Preset::Owner
            .judge_write(Some(&record), 1, false, &other, Uuid::nil())
            .unwrap_err();
        assert_eq!(refused.code, cc::AGGREGATE_NOT_EXISTS);
        assert_eq!(refused.message, NOT_EXISTS_MESSAGE);
        let refused = Preset::Owner
            .judge_write(Some(&record), 1, true, &other, Uuid::nil())
            .unwrap_err();
        assert_eq!(refused.code, g::AGGREGATE_FORBIDDEN);
        // A reader that may not write already knows the aggregate exists: a plain 403.
        let refused = Preset::AuthenticatedRead
            .judge_write(Some(&record), 1, false, &other, Uuid::nil())
            .unwrap_err();
        assert_eq!(refused.code, g::AGGREGATE_FORBIDDEN);
        // An existing aggregate without a record (no owner) is nobody's to write, except under
        // `authenticated`, where it is everybody's.
        assert!(
            Preset::Owner
                .judge_write(None, 4, true, &other, Uuid::nil())
                .is_err()
        );
        assert_eq!(
            Preset::Authenticated.judge_write(None, 4, true, &other, Uuid::nil()),
            Ok(false)
        );
    }
}
