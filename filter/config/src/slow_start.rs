//! `health_checks.slow_start` in its two spellings: a duration alone is the window with the
//! default tuning (`"slow_start": "30s"`, as NGINX's `slow_start=30s` and HAProxy's
//! `slowstart 30s` read), an object tunes it as Envoy's `slow_start_config` does
//! (`{"window": "30s", "aggression": 2.0, "min_weight_percent": 5}`), and `null` is off.
//! [`SlowStart`], what they are read into, is defined here too: its derived reader is the object
//! spelling.

use super::duration::{positive, EXPECTED};
use super::json::{mismatch, scalars_as_found, Found};
use super::{duration, grammar};
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

/// `health_checks.slow_start`: a backend that enters service (passes the probe that makes it
/// healthy, new or returning) gets a share of its weight that rises over `window`, by Envoy's
/// formula `weight × max(min_weight_percent / 100, time_factor ^ (1 / aggression))`, where
/// `time_factor` is the elapsed share of the window. In JSON a duration (the window, with the
/// other fields' defaults), `null` (off) or an object. Defaults in [`SlowStart::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowStart {
    /// How long the share takes to rise to the full weight; `None` (`null`) for no warm-up.
    #[serde(with = "duration::optional")]
    pub window: Option<Duration>,
    /// How the share rises: 1.0 linearly, more than 1 faster at first, less than 1 slower
    /// (Envoy's `aggression`). Greater than zero.
    #[serde(deserialize_with = "aggression")]
    pub aggression: f64,
    /// The share a backend starts at, in percent of its weight, within
    /// [`SlowStart::MIN_WEIGHT_PERCENT`].
    #[serde(deserialize_with = "grammar::percent")]
    pub min_weight_percent: u8,
}

/// The values of left-out fields, each stated here only: off, and Envoy's tuning.
impl Default for SlowStart {
    fn default() -> Self {
        SlowStart {
            window: None,
            aggression: 1.0,
            min_weight_percent: 10,
        }
    }
}

impl SlowStart {
    /// What `min_weight_percent` may be.
    pub const MIN_WEIGHT_PERCENT: RangeInclusive<u8> = 1..=100;
}

/// What the field takes, for "expected …".
const EXPECTED_SLOW_START: &str = "a duration (the window), null (off) or an object";

/// Serde: `health_checks.slow_start` from a duration, `null` or an object.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SlowStart, D::Error> {
    d.deserialize_any(Spelling)
}

/// Serde: `aggression`, any JSON number (its range is checked by `validate`). Read through
/// `deserialize_any`, as every other field is: serde_json's `deserialize_f64` would bring a
/// parser of its own into the module (about 44 KB).
pub fn aggression<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    d.deserialize_any(Number)
}

/// A JSON number as a float.
struct Number;

impl Number {
    fn scalar<E: de::Error>(self, found: Found) -> Result<f64, E> {
        Err(E::custom(mismatch(EXPECTED_NUMBER, &found)))
    }
}

/// What `aggression` takes, for "expected …".
const EXPECTED_NUMBER: &str = "a number greater than 0, like 1.0";

impl<'de> Visitor<'de> for Number {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED_NUMBER)
    }

    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        self.scalar(Found::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<f64, E> {
        self.scalar(Found::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        self.scalar(Found::Text(v.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<f64, A::Error> {
        Err(de::Error::custom(mismatch(EXPECTED_NUMBER, &Found::List)))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<f64, A::Error> {
        Err(de::Error::custom(mismatch(EXPECTED_NUMBER, &Found::Object)))
    }
}

struct Spelling;

impl Spelling {
    fn scalar<E: de::Error>(self, found: Found) -> Result<SlowStart, E> {
        if matches!(found, Found::Null) {
            return Ok(SlowStart::default());
        }
        let window = positive(found).map_err(|refusal| E::custom(refusal.worded(EXPECTED)))?;
        Ok(SlowStart {
            window: Some(window),
            ..SlowStart::default()
        })
    }
}

impl<'de> Visitor<'de> for Spelling {
    type Value = SlowStart;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(EXPECTED_SLOW_START)
    }

    scalars_as_found!();

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<SlowStart, A::Error> {
        Err(de::Error::custom(mismatch(
            EXPECTED_SLOW_START,
            &Found::List,
        )))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SlowStart, A::Error> {
        SlowStart::deserialize(MapAccessDeserializer::new(map))
    }
}
