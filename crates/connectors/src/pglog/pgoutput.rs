//! The `pgoutput` logical replication messages (protocol version 1, `binary` on), as
//! `pg_logical_slot_peek_binary_changes` returns them: one message per row. Only what a
//! log read needs is kept; the message layout is PostgreSQL's "Logical Replication
//! Message Formats".

use super::Lsn;

/// One column of a tuple, as the log carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum {
    Null,
    /// A TOASTed value the change left as it was: the log does not repeat it.
    Unchanged,
    /// The value in its binary send format (`binary` on) or text (a type without one).
    Binary(Vec<u8>),
    Text(Vec<u8>),
}

/// A relation's columns as the log describes them (sent before its first change in
/// each decoding session, and again after its definition changes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub id: u32,
    pub schema: String,
    pub name: String,
    /// `d` default (primary key), `n` nothing, `f` full, `i` an index.
    pub replica_identity: u8,
    pub columns: Vec<RelationColumn>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    pub name: String,
    pub type_oid: u32,
    /// Part of the replica identity (the key a delete carries).
    pub key: bool,
}

/// The message kinds a log read acts on; the rest ([`Message::Other`]) are skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Begin {
        final_lsn: Lsn,
        /// Microseconds since 2000-01-01 UTC.
        commit_time: i64,
        xid: u32,
    },
    Commit {
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    },
    Relation(Relation),
    Insert {
        relation: u32,
        new: Vec<Datum>,
    },
    Update {
        relation: u32,
        /// The replica identity's columns (`K`) or the whole old row (`O`, under
        /// `REPLICA IDENTITY FULL`), when the log carries them.
        old: Option<Vec<Datum>>,
        new: Vec<Datum>,
    },
    Delete {
        relation: u32,
        old: Vec<Datum>,
    },
    Truncate {
        relations: Vec<u32>,
    },
    Other(u8),
}

/// A message the decoder could not read: the bytes are not `pgoutput` v1 as expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("malformed pgoutput message")
    }
}
impl std::error::Error for Malformed {}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }
    fn i16(&mut self) -> Result<i16, Malformed> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn lsn(&mut self) -> Result<Lsn, Malformed> {
        Ok(Lsn(self.i64()? as u64))
    }
    /// A NUL-terminated string.
    fn string(&mut self) -> Result<String, Malformed> {
        let end = self.0.iter().position(|&b| b == 0).ok_or(Malformed)?;
        let s = std::str::from_utf8(&self.0[..end]).map_err(|_| Malformed)?;
        self.0 = &self.0[end + 1..];
        Ok(s.to_owned())
    }
    fn tuple(&mut self) -> Result<Vec<Datum>, Malformed> {
        let n = self.i16()?;
        let mut out = Vec::with_capacity(n.max(0) as usize);
        for _ in 0..n {
            out.push(match self.u8()? {
                b'n' => Datum::Null,
                b'u' => Datum::Unchanged,
                kind @ (b't' | b'b') => {
                    let len = usize::try_from(self.i32()?).map_err(|_| Malformed)?;
                    let bytes = self.take(len)?.to_vec();
                    if kind == b'b' {
                        Datum::Binary(bytes)
                    } else {
                        Datum::Text(bytes)
                    }
                }
                _ => return Err(Malformed),
            });
        }
        Ok(out)
    }
}

/// Decodes one message.
pub fn decode(bytes: &[u8]) -> Result<Message, Malformed> {
    let mut r = Reader(bytes);
    let tag = r.u8()?;
    Ok(match tag {
        b'B' => Message::Begin {
            final_lsn: r.lsn()?,
            commit_time: r.i64()?,
            xid: r.u32()?,
        },
        b'C' => {
            let _flags = r.u8()?;
            Message::Commit {
                commit_lsn: r.lsn()?,
                end_lsn: r.lsn()?,
                commit_time: r.i64()?,
            }
        }
        b'R' => {
            let id = r.u32()?;
            let schema = r.string()?;
            let name = r.string()?;
            let replica_identity = r.u8()?;
            let n = r.i16()?;
            let mut columns = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                let flags = r.u8()?;
                let name = r.string()?;
                let type_oid = r.u32()?;
                let _typmod = r.i32()?;
                columns.push(RelationColumn {
                    name,
                    type_oid,
                    key: flags & 1 == 1,
                });
            }
            Message::Relation(Relation {
                id,
                schema,
                name,
                replica_identity,
                columns,
            })
        }
        b'I' => {
            let relation = r.u32()?;
            if r.u8()? != b'N' {
                return Err(Malformed);
            }
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32()?;
            let mut old = None;
            let mut kind = r.u8()?;
            if kind == b'K' || kind == b'O' {
                old = Some(r.tuple()?);
                kind = r.u8()?;
            }
            if kind != b'N' {
                return Err(Malformed);
            }
            Message::Update {
                relation,
                old,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32()?;
            if !matches!(r.u8()?, b'K' | b'O') {
                return Err(Malformed);
            }
            Message::Delete {
                relation,
                old: r.tuple()?,
            }
        }
        b'T' => {
            let n = r.i32()?;
            let _options = r.u8()?;
            let mut relations = Vec::with_capacity(n.clamp(0, 1024) as usize);
            for _ in 0..n {
                relations.push(r.u32()?);
            }
            Message::Truncate { relations }
        }
        other => Message::Other(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(cols: &[&[u8]]) -> Vec<u8> {
        let mut b = (cols.len() as i16).to_be_bytes().to_vec();
        for c in cols {
            match *c {
                b"\0null" => b.push(b'n'),
                b"\0unchanged" => b.push(b'u'),
                v => {
                    b.push(b'b');
                    b.extend((v.len() as i32).to_be_bytes());
                    b.extend(v);
                }
            }
        }
        b
    }

    #[test]
    fn begin_commit_and_relation_messages_decode() {
        let mut b = vec![b'B'];
        b.extend(0x0153_B7B0u64.to_be_bytes());
        b.extend(5i64.to_be_bytes());
        b.extend(728u32.to_be_bytes());
        assert_eq!(
            decode(&b).unwrap(),
            Message::Begin {
                final_lsn: Lsn(0x0153_B7B0),
                commit_time: 5,
                xid: 728
            }
        );
        let mut c = vec![b'C', 0];
        c.extend(1u64.to_be_bytes());
        c.extend(2u64.to_be_bytes());
        c.extend(3i64.to_be_bytes());
        assert_eq!(
            decode(&c).unwrap(),
            Message::Commit {
                commit_lsn: Lsn(1),
                end_lsn: Lsn(2),
                commit_time: 3
            }
        );
        let mut r = vec![b'R'];
        r.extend(16384u32.to_be_bytes());
        r.extend(b"public\0t\0d");
        r.extend(2i16.to_be_bytes());
        r.extend(b"\x01id\0");
        r.extend(23u32.to_be_bytes());
        r.extend((-1i32).to_be_bytes());
        r.extend(b"\x00name\0");
        r.extend(25u32.to_be_bytes());
        r.extend((-1i32).to_be_bytes());
        let Message::Relation(rel) = decode(&r).unwrap() else {
            panic!("a relation")
        };
        assert_eq!(
            (rel.id, rel.schema.as_str(), rel.name.as_str()),
            (16384, "public", "t")
        );
        assert_eq!(rel.replica_identity, b'd');
        assert!(rel.columns[0].key && !rel.columns[1].key);
        assert_eq!(rel.columns[1].type_oid, 25);
    }

    #[test]
    fn changes_carry_their_tuples_and_unchanged_toast() {
        let mut u = vec![b'U'];
        u.extend(7u32.to_be_bytes());
        u.push(b'K');
        u.extend(tuple(&[&1i32.to_be_bytes(), b"\0null"]));
        u.push(b'N');
        u.extend(tuple(&[&2i32.to_be_bytes(), b"\0unchanged"]));
        assert_eq!(
            decode(&u).unwrap(),
            Message::Update {
                relation: 7,
                old: Some(vec![
                    Datum::Binary(1i32.to_be_bytes().to_vec()),
                    Datum::Null
                ]),
                new: vec![Datum::Binary(2i32.to_be_bytes().to_vec()), Datum::Unchanged],
            }
        );
        let mut d = vec![b'D'];
        d.extend(7u32.to_be_bytes());
        d.push(b'O');
        d.extend(tuple(&[b"x"]));
        assert_eq!(
            decode(&d).unwrap(),
            Message::Delete {
                relation: 7,
                old: vec![Datum::Binary(b"x".to_vec())]
            }
        );
    }

    #[test]
    fn truncated_or_unknown_bytes_are_malformed_not_a_panic() {
        assert_eq!(decode(b""), Err(Malformed));
        assert_eq!(decode(b"B\0\0"), Err(Malformed));
        let mut i = vec![b'I'];
        i.extend(7u32.to_be_bytes());
        i.push(b'N');
        i.extend(1i16.to_be_bytes());
        i.push(b'b');
        i.extend(100i32.to_be_bytes());
        assert_eq!(decode(&i), Err(Malformed), "a length past the end");
        let mut x = vec![b'I'];
        x.extend(7u32.to_be_bytes());
        x.push(b'N');
        x.extend(1i16.to_be_bytes());
        x.push(b'z');
        assert_eq!(decode(&x), Err(Malformed), "an unknown column kind");
        assert_eq!(decode(b"Mxyz").unwrap(), Message::Other(b'M'));
    }
}
