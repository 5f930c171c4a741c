//! The access policy: one preset per aggregate type, and a default, read from `--policy FILE`.
//!
//! The file is TOML (`.toml`) or JSON (`.json`), chosen by its extension:
//!
//! ```toml
//! default = "owner"
//! [types]
//! "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0002" = "members"
//! ```
//!
//! It is read strictly, once, at start: an unknown key, a key given twice (also two spellings
//! of one UUID), a type that is not a UUID or an unknown preset stops the gateway with a message
//! naming it, rather than running with a policy other than the one written. Without a file
//! every type is `owner`. The presets are described on [`Preset`] and in `docs/protocol.md`.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What the owner, the members and everyone else may do with the aggregates of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Only the owner reads, appends and watches (the default); anyone may create.
    Owner,
    /// The owner, and the members the owner grants `read` or `readWrite`.
    Members,
    /// Any proven principal may do everything (explicit opt-in: shared data).
    Authenticated,
    /// Any proven principal reads and watches; only the owner appends.
    AuthenticatedRead,
    /// Members (granted `read` only) read and watch; only the owner appends.
    MembersRead,
    /// Nobody creates or appends through the gateway; any proven principal reads.
    ReadOnly,
}

impl Preset {
    /// The name used in the policy file.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Owner => "owner",
            Preset::Members => "members",
            Preset::Authenticated => "authenticated",
            Preset::AuthenticatedRead => "authenticated-read",
            Preset::MembersRead => "members-read",
            Preset::ReadOnly => "read-only",
        }
    }
}

/// The presets of every aggregate type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The preset of a type the file does not name.
    pub default: Preset,
    /// The preset of each named type.
    pub types: HashMap<Uuid, Preset>,
}

impl Default for Policy {
    /// `owner` for every type.
    fn default() -> Self {
        Policy {
            default: Preset::Owner,
            types: HashMap::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    default: Option<Preset>,
    #[serde(default)]
    types: TypeRules,
}

/// The `types` table, refusing a type given twice (serde's maps keep the last silently).
#[derive(Default)]
struct TypeRules(HashMap<Uuid, Preset>);

impl<'de> Deserialize<'de> for TypeRules {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Rules;
        impl<'de> Visitor<'de> for Rules {
            type Value = TypeRules;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of aggregate type UUID = preset")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TypeRules, A::Error> {
                let mut rules = HashMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let type_id = Uuid::parse_str(&key).map_err(|e| {
                        de::Error::custom(format!("type {key:?} is not a UUID: {e}"))
                    })?;
                    let preset: Preset = map.next_value()?;
                    if rules.insert(type_id, preset).is_some() {
                        return Err(de::Error::custom(format!("type {type_id} is given twice")));
                    }
                }
                Ok(TypeRules(rules))
            }
        }
        deserializer.deserialize_map(Rules)
    }
}

impl Policy {
    /// The preset of `type_id`.
    pub fn preset(&self, type_id: Uuid) -> Preset {
        self.types.get(&type_id).copied().unwrap_or(self.default)
    }

    /// Whether every type (and the default) is `authenticated`: nothing needs an owner.
    pub fn all_authenticated(&self) -> bool {
        self.default == Preset::Authenticated
            && self.types.values().all(|p| *p == Preset::Authenticated)
    }

    /// Parses a policy from `text`, TOML or JSON.
    pub fn parse(text: &str, json: bool) -> Result<Self, String> {
        let file: PolicyFile = if json {
            serde_json::from_str(text).map_err(|e| e.to_string())?
        } else {
            toml::from_str(text).map_err(|e| e.to_string())?
        };
        Ok(Policy {
            default: file.default.unwrap_or(Preset::Owner),
            types: file.types.0,
        })
    }

    /// Reads the policy file at `path` (`.toml` or `.json`).
    pub fn load(path: &Path) -> Result<Self, String> {
        let json = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => true,
            Some("toml") => false,
            _ => {
                return Err(format!(
                    "--policy {}: the file must end in .toml or .json",
                    path.display()
                ));
            }
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--policy {}: {e}", path.display()))?;
        Policy::parse(&text, json).map_err(|e| format!("--policy {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0002";

    #[test]
    fn toml_and_json_say_the_same() {
        let toml = format!("default = \"authenticated-read\"\n[types]\n\"{T}\" = \"members\"\n");
        let json = format!(r#"{{"default":"authenticated-read","types":{{"{T}":"members"}}}}"#);
        let a = Policy::parse(&toml, false).unwrap();
        let b = Policy::parse(&json, true).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.preset(Uuid::parse_str(T).unwrap()), Preset::Members);
        assert_eq!(a.preset(Uuid::nil()), Preset::AuthenticatedRead);
        assert_eq!(Policy::parse("", false).unwrap(), Policy::default());
        assert!(!Policy::default().all_authenticated());
        assert!(
            Policy::parse("default = \"authenticated\"", false)
                .unwrap()
                .all_authenticated()
        );
    }

    /// The policy files the repository ships load, and say what their comments say.
    #[test]
    fn the_shipped_policies_load() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let demo = Policy::load(&root.join("scripts/demo-policy.toml")).unwrap();
        let account = Uuid::parse_str("5e0d9e1a-7c41-4b8e-9f2a-0c6b3d1e2f01").unwrap();
        assert_eq!(demo.preset(account), Preset::Authenticated);
        assert_eq!(demo.preset(Uuid::nil()), Preset::Owner);
        let browser = Policy::load(&root.join("tests/browser/policy.toml")).unwrap();
        assert_eq!(browser.default, Preset::AuthenticatedRead);
        assert_eq!(browser.types.len(), 2);
        let shared = Uuid::parse_str("5a4ed000-0000-4000-8000-00000000b001").unwrap();
        assert_eq!(browser.preset(shared), Preset::Authenticated);
        let members = Uuid::parse_str("5a4ed000-0000-4000-8000-00000000b002").unwrap();
        assert_eq!(browser.preset(members), Preset::Members);
    }

    #[test]
    fn anything_unexpected_is_refused_with_its_name() {
        let upper = T.to_uppercase();
        for (text, json, needle) in [
            ("defualt = \"owner\"".to_owned(), false, "defualt"),
            ("default = \"everyone\"".to_owned(), false, "everyone"),
            ("[types]\n\"nope\" = \"owner\"".to_owned(), false, "nope"),
            (
                format!("[types]\n\"{T}\" = \"owner\"\n\"{T}\" = \"members\""),
                false,
                "duplicate",
            ),
            (
                format!("[types]\n\"{T}\" = \"owner\"\n\"{upper}\" = \"members\""),
                false,
                "twice",
            ),
            (
                format!(r#"{{"types":{{"{T}":"owner","{T}":"members"}}}}"#),
                true,
                "twice",
            ),
            (
                r#"{"default":"owner","default":"members"}"#.to_owned(),
                true,
                "duplicate",
            ),
            (r#"{"default":"owner","extra":1}"#.to_owned(), true, "extra"),
        ] {
            let err = Policy::parse(&text, json).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let err = Policy::load(Path::new("policy.yaml")).unwrap_err();
        assert!(err.contains(".toml or .json"), "{err}");
    }
}
