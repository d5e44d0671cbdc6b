//! Segmented runs (docs/engine.md, "Continued runs"): a run asked to stop stops at the
//! next boundary it can resume from, seals what it wrote as finished parts, and says
//! where the next run starts. A run that resumes reads exactly the rows after that point,
//! in the same order, so the parts of all runs together hold what one uninterrupted run
//! would have written.

use serde::{Deserialize, Serialize};

use crate::model::result::ResultPart;

/// Where a stopped run ended and the next one resumes: the datasource (plan step) and
/// table it stopped in, and the order-key values of the last row it wrote, as the result
/// renders them (`None`: the table is read from its start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumePoint {
    pub config: String,
    pub table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<serde_json::Value>>,
}

/// What a run may do beyond an ordinary one ([`crate::Engine::execute_segment`]).
#[derive(Debug, Clone, Default)]
pub struct Segment {
    /// Once this instant passes, stop at the next resumable boundary: after a batch of a
    /// table whose connector reports positions (its order key), or where a table begins.
    pub stop_at: Option<tokio::time::Instant>,
    /// Where this run starts; `None`: at the plan's beginning.
    pub resume: Option<ResumePoint>,
    /// The parts earlier runs of the job wrote, in order: this run's parts are numbered
    /// after them, and when it finishes the manifest lists them first.
    pub earlier_parts: Vec<ResultPart>,
    /// A range of a fanned-out job (docs/engine.md, "Fan-out"): `Some(base)` numbers its
    /// parts from `base` (then after `earlier_parts`), writes every stream as a part
    /// (never at the single object's key) and, at the end of its plan, returns its parts
    /// in a [`Stopped`] that is [`Stopped::ended`] instead of writing a manifest: the host
    /// writes that once every range is done ([`crate::Engine::seal_manifest`]).
    pub part_base: Option<usize>,
    /// Set when this run took its job (or range) over from a claim whose lease ran out,
    /// which may still be writing: the run writes parts only (never the single result
    /// object, whose key every claim shares) and names them by this claim
    /// ([`crate::ports::ResultObject::Part`]), so the two runs never write the same
    /// object and each can remove its own.
    pub claim: Option<u32>,
}

impl Segment {
    /// Whether earlier runs wrote parts, so this one writes parts too (never the single
    /// result object) and its result, when it finishes, is their manifest. A run resumed
    /// after segments that wrote nothing is like a first one.
    pub fn continues(&self) -> bool {
        !self.earlier_parts.is_empty()
    }

    /// Whether this run writes parts whatever happens: it continues earlier runs, is a
    /// range of a fanned-out job, or took its job over ([`Segment::claim`]).
    pub fn in_parts(&self) -> bool {
        self.continues() || self.part_base.is_some() || self.claim.is_some()
    }

    /// The number of this run's first part.
    pub fn first_part(&self) -> usize {
        self.part_base.unwrap_or(0) + self.earlier_parts.len()
    }

    /// Part `index` of this run, checked against its numbering space: a range's parts
    /// stay below the next range's first ([`RANGE_PART_STRIDE`]), so a range that would
    /// outrun it fails (`limit_exceeded`) instead of writing over another range's part.
    pub fn part(&self, index: usize) -> crate::Result<usize> {
        match self.part_base {
            Some(base) if index >= base + RANGE_PART_STRIDE => Err(crate::EngineError::new(
                crate::Category::LimitExceeded,
                "a range wrote more parts than its numbering allows (100000)",
            )),
            _ => Ok(index),
        }
    }
}

/// Part numbers each range of a fanned-out job has to itself: range `i` numbers its parts
/// from `i * RANGE_PART_STRIDE`.
pub const RANGE_PART_STRIDE: usize = 100_000;

/// One value of a table's leading key, typed as the datasource holds it: what key
/// spans and key ranges are made of. Values of one kind compare as the datasources
/// order them (integers by value, ObjectIds and UUIDs by their bytes); a span or range
/// mixes no kinds.
///
/// In JSON (queue messages, stored fan-outs) an integer is a number, as before this type
/// existed, text is a string, and the others are `{"$oid": "<24 hex>"}` (MongoDB's
/// extended JSON) and `{"$uuid": "<8-4-4-4-12 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "KeyWire", into = "KeyWire")]
pub enum KeyValue {
    Int(i64),
    /// A MongoDB ObjectId's 12 bytes.
    ObjectId([u8; 12]),
    Uuid([u8; 16]),
    /// Text orders by the datasource's collation, which this crate cannot know: a text
    /// key is held (a position, a bound a connector gave) but never cut into ranges.
    Text(String),
}

/// The kind of a [`KeyValue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    Int,
    ObjectId,
    Uuid,
    Text,
}

impl KeyValue {
    pub fn kind(&self) -> KeyKind {
        match self {
            KeyValue::Int(_) => KeyKind::Int,
            KeyValue::ObjectId(_) => KeyKind::ObjectId,
            KeyValue::Uuid(_) => KeyKind::Uuid,
            KeyValue::Text(_) => KeyKind::Text,
        }
    }

    /// The integer, for a connector that splits integer keys only.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            KeyValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The value as an unsigned number preserving its order within its kind (`None` for
    /// text), and back: how spans of fixed-width keys are cut at equal distances.
    fn ordinal(&self) -> Option<u128> {
        match self {
            KeyValue::Int(i) => Some((*i as i128 - i64::MIN as i128) as u128),
            KeyValue::ObjectId(b) => {
                let mut wide = [0u8; 16];
                wide[4..].copy_from_slice(b);
                Some(u128::from_be_bytes(wide))
            }
            KeyValue::Uuid(b) => Some(u128::from_be_bytes(*b)),
            KeyValue::Text(_) => None,
        }
    }

    fn from_ordinal(kind: KeyKind, n: u128) -> KeyValue {
        match kind {
            KeyKind::Int => KeyValue::Int((n as i128 + i64::MIN as i128) as i64),
            KeyKind::ObjectId => {
                let mut b = [0u8; 12];
                b.copy_from_slice(&n.to_be_bytes()[4..]);
                KeyValue::ObjectId(b)
            }
            KeyKind::Uuid => KeyValue::Uuid(n.to_be_bytes()),
            KeyKind::Text => unreachable!("text keys have no ordinal"),
        }
    }
}

impl From<i64> for KeyValue {
    fn from(i: i64) -> Self {
        KeyValue::Int(i)
    }
}

/// [`KeyValue`]'s JSON form.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum KeyWire {
    Int(i64),
    Text(String),
    ObjectId {
        #[serde(rename = "$oid")]
        oid: String,
    },
    Uuid {
        #[serde(rename = "$uuid")]
        uuid: String,
    },
}

impl From<KeyValue> for KeyWire {
    fn from(v: KeyValue) -> Self {
        match v {
            KeyValue::Int(i) => KeyWire::Int(i),
            KeyValue::Text(s) => KeyWire::Text(s),
            KeyValue::ObjectId(b) => KeyWire::ObjectId {
                oid: crate::hex(&b),
            },
            KeyValue::Uuid(b) => {
                let h = crate::hex(&b);
                KeyWire::Uuid {
                    uuid: format!(
                        "{}-{}-{}-{}-{}",
                        &h[..8],
                        &h[8..12],
                        &h[12..16],
                        &h[16..20],
                        &h[20..]
                    ),
                }
            }
        }
    }
}

impl TryFrom<KeyWire> for KeyValue {
    type Error = String;

    fn try_from(w: KeyWire) -> Result<Self, String> {
        Ok(match w {
            KeyWire::Int(i) => KeyValue::Int(i),
            KeyWire::Text(s) => KeyValue::Text(s),
            KeyWire::ObjectId { oid } => {
                KeyValue::ObjectId(unhex(&oid).ok_or("an ObjectId is 24 hexadecimal digits")?)
            }
            KeyWire::Uuid { uuid } => KeyValue::Uuid(
                unhex(&uuid.replace('-', ""))
                    .ok_or("a UUID is 32 hexadecimal digits, with or without dashes")?,
            ),
        })
    }
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(out)
}

/// A key range `lo <= key < hi` of a table's leading key (an open end where `None`):
/// what one range of a fanned-out job reads of its table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<KeyValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<KeyValue>,
}

impl KeyRange {
    /// Whether `key` is in the range. A bound of another kind than `key` holds nothing
    /// (as a datasource's typed comparison would).
    pub fn contains(&self, key: &KeyValue) -> bool {
        let same = |b: &KeyValue| b.kind() == key.kind();
        self.lo.as_ref().is_none_or(|lo| same(lo) && key >= lo)
            && self.hi.as_ref().is_none_or(|hi| same(hi) && key < hi)
    }
}

/// What a connector knows of a table's leading key: its smallest and largest value and
/// the catalog's row estimate ([`crate::ports::Connector::key_span`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpan {
    pub min: KeyValue,
    pub max: KeyValue,
    pub rows: i64,
}

impl KeySpan {
    /// `n` ranges covering every key, the first and last open (rows inserted beyond the
    /// span while the job runs are read too), cut at equal key distances; fewer when the
    /// span has fewer keys than `n`, and one when it cannot be cut (text keys, or ends
    /// of different kinds).
    pub fn ranges(&self, n: usize) -> Vec<KeyRange> {
        let (Some(min), Some(max)) = (self.min.ordinal(), self.max.ordinal()) else {
            return vec![KeyRange::default()];
        };
        if self.min.kind() != self.max.kind() || max < min {
            return vec![KeyRange::default()];
        }
        let kind = self.min.kind();
        let width = (max - min).saturating_add(1);
        let n = (n.max(1) as u128).min(width);
        // min + width * k / n without overflowing: width may be 2^128 - 1.
        let cut = |k: u128| {
            let at = min + (width / n) * k + (width % n) * k / n;
            KeyValue::from_ordinal(kind, at)
        };
        (0..n)
            .map(|k| KeyRange {
                lo: (k > 0).then(|| cut(k)),
                hi: (k + 1 < n).then(|| cut(k + 1)),
            })
            .collect()
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn integer_spans_cut_as_before() {
        let span = KeySpan {
            min: 1.into(),
            max: 100.into(),
            rows: 100,
        };
        let r = span.ranges(4);
        let bounds: Vec<_> = r.iter().map(|r| (r.lo.clone(), r.hi.clone())).collect();
        assert_eq!(
            bounds,
            vec![
                (None, Some(26.into())),
                (Some(26.into()), Some(51.into())),
                (Some(51.into()), Some(76.into())),
                (Some(76.into()), None),
            ]
        );
        let whole = KeySpan {
            min: i64::MIN.into(),
            max: i64::MAX.into(),
            rows: 10,
        };
        assert_eq!(whole.ranges(3).len(), 3);
        let few = KeySpan {
            min: 5.into(),
            max: 6.into(),
            rows: 2,
        };
        assert_eq!(few.ranges(8).len(), 2);
    }

    #[test]
    fn object_id_and_uuid_spans_cut_in_byte_order() {
        let oid = |b: u8| KeyValue::ObjectId([b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let span = KeySpan {
            min: oid(0x10),
            max: oid(0x50),
            rows: 1000,
        };
        let r = span.ranges(4);
        assert_eq!(r.len(), 4);
        for w in r.windows(2) {
            assert_eq!(w[0].hi, w[1].lo);
            assert!(w[0].hi.as_ref().unwrap().kind() == KeyKind::ObjectId);
        }
        assert!(r[1].lo < r[2].lo && r[0].hi > Some(oid(0x10)));
        let all = KeySpan {
            min: KeyValue::Uuid([0; 16]),
            max: KeyValue::Uuid([0xff; 16]),
            rows: 10,
        };
        let r = all.ranges(2);
        let mut mid = [0u8; 16];
        mid[0] = 0x7f;
        mid[1..].fill(0xff);
        assert_eq!(r[0].hi, Some(KeyValue::Uuid(mid)));
        assert!(r[0].contains(&KeyValue::Uuid([0; 16])));
        assert!(!r[0].contains(&KeyValue::Uuid(mid)) && r[1].contains(&KeyValue::Uuid(mid)));
    }

    #[test]
    fn a_range_stays_in_its_part_numbering() {
        let range = Segment {
            part_base: Some(RANGE_PART_STRIDE),
            ..Segment::default()
        };
        assert_eq!(
            range.part(2 * RANGE_PART_STRIDE - 1).unwrap(),
            2 * RANGE_PART_STRIDE - 1
        );
        let e = range.part(2 * RANGE_PART_STRIDE).unwrap_err();
        assert_eq!(e.category(), crate::Category::LimitExceeded);
        // A whole job's parts have no ceiling of their own.
        assert!(Segment::default().part(5 * RANGE_PART_STRIDE).is_ok());
    }

    #[test]
    fn text_and_mixed_spans_are_not_cut() {
        let text = KeySpan {
            min: KeyValue::Text("a".into()),
            max: KeyValue::Text("z".into()),
            rows: 1000,
        };
        assert_eq!(text.ranges(4), vec![KeyRange::default()]);
        let mixed = KeySpan {
            min: 1.into(),
            max: KeyValue::ObjectId([1; 12]),
            rows: 1000,
        };
        assert_eq!(mixed.ranges(4), vec![KeyRange::default()]);
    }

    #[test]
    fn json_keeps_integers_as_numbers() {
        let r = KeyRange {
            lo: Some(7.into()),
            hi: Some(KeyValue::ObjectId([0xab; 12])),
        };
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"lo": 7, "hi": {"$oid": "abababababababababababab"}})
        );
        assert_eq!(serde_json::from_value::<KeyRange>(j).unwrap(), r);
        let u = KeyValue::Uuid([0x12; 16]);
        let j = serde_json::to_value(&u).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"$uuid": "12121212-1212-1212-1212-121212121212"})
        );
        assert_eq!(serde_json::from_value::<KeyValue>(j).unwrap(), u);
        assert_eq!(
            serde_json::from_value::<KeyValue>(serde_json::json!("k-1")).unwrap(),
            KeyValue::Text("k-1".into())
        );
        assert!(serde_json::from_value::<KeyValue>(serde_json::json!({"$oid": "zz"})).is_err());
    }
}

/// A run that stopped before the end of its plan ([`crate::ExtractionResult::stopped`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    /// Where the next run resumes.
    pub at: ResumePoint,
    /// The parts this run sealed, in order (none when it wrote no row).
    pub parts: Vec<ResultPart>,
    /// A range of a fanned-out job read its plan to the end ([`Segment::part_base`]):
    /// there is nothing to resume; `at` is only where it ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ended: bool,
}
