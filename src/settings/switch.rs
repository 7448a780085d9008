//! Reading an on/off [`Switch`] from the TOML file: `"on"` / `"off"` as on the command line,
//! and TOML's own `true` / `false` (`think = false`), which a user writes as naturally.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use super::Switch;

struct SwitchVisitor;

impl Visitor<'_> for SwitchVisitor {
    type Value = Switch;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"on\", \"off\", true or false")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Switch, E> {
        Ok(if v { Switch::On } else { Switch::Off })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Switch, E> {
        match v {
            "on" => Ok(Switch::On),
            "off" => Ok(Switch::Off),
            other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
        }
    }
}

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Switch, D::Error> {
        d.deserialize_any(SwitchVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_switches_take_words_and_booleans() {
        #[derive(Deserialize)]
        struct T {
            s: Switch,
        }
        for (src, want) in [
            ("s = false", Switch::Off),
            ("s = true", Switch::On),
            ("s = \"off\"", Switch::Off),
            ("s = \"on\"", Switch::On),
        ] {
            assert_eq!(toml::from_str::<T>(src).unwrap().s, want, "{src}");
        }
        let err = toml::from_str::<T>("s = \"no\"").err().unwrap().to_string();
        assert!(err.contains("\"on\", \"off\", true or false"), "{err}");
    }
}
