//! How a field's JSON value reaches its grammar, and how a refusal is worded.
//!
//! serde's own errors say `invalid type: string "3", expected u32`; an operator reading Envoy's
//! log is better served by `expected a whole number, got the string "3"`, and by being told what
//! `null` means. So every field is read with `deserialize_any` into one of three shapes: a value
//! ([`read`], whose grammar gets it as [`Found`]), an object ([`object`], which hands the map to the
//! type's derived `Deserialize`) or a bounded list ([`list`]). An object or a list given a value
//! of another kind refuses it at once; a value given a list or an object skips it (without
//! recursion) and then refuses it. So nothing is read deeper than the schema nests.

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::marker::PhantomData;

/// What was found in a field, as its grammar sees it and an error message names it. (Numbers
/// with a fraction are not shown: formatting floats would grow the module for an error message.)
pub enum Found {
    Null,
    Bool(bool),
    Unsigned(u64),
    Negative(i64),
    /// A number with a fraction or an exponent.
    Fraction,
    /// A whole number too large for 64 bits.
    Huge,
    Text(String),
    List,
    Object,
}

impl Found {
    /// A JSON integer serde_json read as signed.
    pub fn signed(v: i64) -> Found {
        u64::try_from(v).map_or(Found::Negative(v), Found::Unsigned)
    }

    /// A JSON number serde_json read as a float.
    pub fn float(v: f64) -> Found {
        // serde_json hands over a whole number past 64 bits as a float.
        let huge = v.fract() == 0.0
            && !(-9.223_372_036_854_776e18..1.844_674_407_370_955_2e19).contains(&v);
        if huge {
            Found::Huge
        } else {
            Found::Fraction
        }
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Found::Null => f.write_str("null"),
            Found::Bool(b) => write!(f, "the boolean {b}"),
            Found::Unsigned(n) => write!(f, "the number {n}"),
            Found::Negative(n) => write!(f, "the number {n}"),
            Found::Fraction => f.write_str("a fraction"),
            Found::Huge => f.write_str("a number too large for 64 bits"),
            Found::Text(s) => write!(f, "the string {s:?}"),
            Found::List => f.write_str("a list"),
            Found::Object => f.write_str("an object"),
        }
    }
}

/// Why a grammar refused a value.
pub enum Refusal {
    /// It is not of the kind the field takes: worded "expected …, got …".
    Kind(Found),
    /// It is of that kind, and this is what is wrong with it.
    Reason(String),
}

impl Refusal {
    /// The refusal as an error says it, for a field that takes `expected`.
    pub fn worded(self, expected: &str) -> String {
        match self {
            Refusal::Kind(found) => mismatch(expected, &found),
            Refusal::Reason(reason) => reason,
        }
    }
}

impl From<String> for Refusal {
    fn from(reason: String) -> Self {
        Refusal::Reason(reason)
    }
}

impl From<&str> for Refusal {
    fn from(reason: &str) -> Self {
        Refusal::Reason(reason.to_owned())
    }
}

/// "expected …, got …"; for `null`, also what `null` means.
pub fn mismatch(expected: &str, found: &Found) -> String {
    match found {
        Found::Null => format!(
            "expected {expected}, got null; null turns off only a field that can be off, so leave \
             this one out for its default"
        ),
        other => format!("expected {expected}, got {other}"),
    }
}

/// Implements a [`Visitor`]'s scalar methods by handing each value as [`Found`] to the visitor's
/// own `scalar` method.
macro_rules! scalars_as_found {
    () => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.scalar(Found::Null)
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            self.scalar(Found::Bool(v))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            self.scalar(Found::Unsigned(v))
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            self.scalar(Found::signed(v))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            self.scalar(Found::float(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            self.scalar(Found::Text(v.to_owned()))
        }

        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            self.scalar(Found::Text(v))
        }
    };
}
pub(crate) use scalars_as_found;

/// Reads a field that takes one value (`expected` says what kind) and hands it to `grammar`.
pub fn read<'de, D: Deserializer<'de>, T>(
    d: D,
    expected: &'static str,
    grammar: impl FnOnce(Found) -> Result<T, Refusal>,
) -> Result<T, D::Error> {
    let found = d.deserialize_any(AValue(expected))?;
    grammar(found).map_err(|refusal| de::Error::custom(refusal.worded(expected)))
}

/// One value as it was found. A list or an object is refused once it is skipped (serde_json
/// skips a value without recursion), so a document broken inside it is refused as broken.
struct AValue(&'static str);

impl AValue {
    fn scalar<E: de::Error>(self, found: Found) -> Result<Found, E> {
        Ok(found)
    }
}

impl<'de> Visitor<'de> for AValue {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }

    scalars_as_found!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Err(de::Error::custom(mismatch(self.0, &Found::List)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Err(de::Error::custom(mismatch(self.0, &Found::Object)))
    }
}

/// A string, or the kind refused.
pub fn text(found: Found) -> Result<String, Refusal> {
    match found {
        Found::Text(s) => Ok(s),
        other => Err(Refusal::Kind(other)),
    }
}

/// A whole number, or the kind refused.
pub fn whole(found: Found) -> Result<u64, Refusal> {
    match found {
        Found::Unsigned(n) => Ok(n),
        other => Err(Refusal::Kind(other)),
    }
}

/// `null` is off; anything else goes through `grammar`.
pub fn or_off<T>(
    found: Found,
    grammar: impl FnOnce(Found) -> Result<T, Refusal>,
) -> Result<Option<T>, Refusal> {
    match found {
        Found::Null => Ok(None),
        other => grammar(other).map(Some),
    }
}

/// Serde: a JSON object read into `T` (whose derived `Deserialize` checks its members);
/// anything else refused as "expected an object, got …".
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(AnObject {
        one_member: &[],
        object: PhantomData,
    })
}

/// Like [`object`], with `null` for none.
pub fn optional_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    /// `T`, read as an object.
    struct AnObjectOf<T>(T);
    impl<'de, T: Deserialize<'de>> Deserialize<'de> for AnObjectOf<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            object(d).map(AnObjectOf)
        }
    }
    Option::<AnObjectOf<T>>::deserialize(d).map(|o| o.map(|AnObjectOf(t)| t))
}

/// Like [`object`], where the names in `one_member` are one member of `T` (Caddy's `uri` is
/// `path`, which `T` takes as an alias): giving it by two of them is refused at the second,
/// with the reason. Giving it twice by one name is a duplicate field, as anywhere.
pub fn object_with_one_member<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    one_member: &'static [&'static str],
) -> Result<T, D::Error> {
    d.deserialize_any(AnObject {
        one_member,
        object: PhantomData,
    })
}

/// An object's members, handed to `T`.
struct AnObject<T> {
    one_member: &'static [&'static str],
    object: PhantomData<T>,
}

impl<T> AnObject<T> {
    fn scalar<E: de::Error>(self, found: Found) -> Result<T, E> {
        Err(E::custom(mismatch("an object", &found)))
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for AnObject<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    scalars_as_found!();

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<T, A::Error> {
        Err(de::Error::custom(mismatch("an object", &Found::List)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(Members {
            map,
            one_member: self.one_member,
            given: None,
        }))
    }
}

/// An object's members as `T` reads them, with the names of one member watched.
struct Members<A> {
    map: A,
    one_member: &'static [&'static str],
    /// The name of `one_member` given first.
    given: Option<&'static str>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Members<A> {
    type Error = A::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        // Read through the map's own key, so an error about the key is at the key.
        self.map.next_key_seed(Key {
            seed,
            one_member: self.one_member,
            given: &mut self.given,
        })
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A member's name, refused if it is the second name given of `one_member`, and then handed to
/// `seed`.
struct Key<'a, K> {
    seed: K,
    one_member: &'static [&'static str],
    given: &'a mut Option<&'static str>,
}

impl<'de, K: de::DeserializeSeed<'de>> de::DeserializeSeed<'de> for Key<'_, K> {
    type Value = K::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K::Value, D::Error> {
        let name = String::deserialize(d)?;
        if let Some(&this) = self.one_member.iter().find(|n| **n == name) {
            match *self.given {
                Some(first) if first != this => {
                    // The two names in the order of `one_member`, whichever came first.
                    let mut both: Vec<&str> = self.one_member.to_vec();
                    both.retain(|n| *n == first || *n == this);
                    return Err(de::Error::custom(format!(
                        "give `{}`, not both",
                        both.join("` or `")
                    )));
                }
                _ => *self.given = Some(this),
            }
        }
        self.seed
            .deserialize(de::IntoDeserializer::<D::Error>::into_deserializer(name))
    }
}

/// A value read as one item of a list: `T` itself, or through `object`.
pub trait Item<'de>: Sized {
    /// Reads one item.
    fn item<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// Reads a JSON list of at most `max` items; the one past it is refused with `too_many`, at the
/// list.
pub fn list<'de, D: Deserializer<'de>, T: Item<'de>>(
    d: D,
    max: usize,
    too_many: fn() -> String,
) -> Result<Vec<T>, D::Error> {
    d.deserialize_any(List {
        max,
        too_many,
        item: PhantomData,
    })
}

struct List<T> {
    max: usize,
    too_many: fn() -> String,
    item: PhantomData<T>,
}

/// One list item, read by [`Item::item`].
struct Next<T>(PhantomData<T>);

impl<'de, T: Item<'de>> de::DeserializeSeed<'de> for Next<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::item(d)
    }
}

impl<T> List<T> {
    fn scalar<E: de::Error>(self, found: Found) -> Result<Vec<T>, E> {
        Err(E::custom(mismatch("a list", &found)))
    }
}

impl<'de, T: Item<'de>> Visitor<'de> for List<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    scalars_as_found!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Next(PhantomData))? {
            if items.len() == self.max {
                return Err(de::Error::custom((self.too_many)()));
            }
            items.push(item);
        }
        Ok(items)
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Vec<T>, A::Error> {
        Err(de::Error::custom(mismatch("a list", &Found::Object)))
    }
}
