//! Jute binary encoding: the primitive types every ZooKeeper record is built from.
//!
//! Decoding never panics and never trusts a length: a length is checked against the bytes that
//! are actually left before anything is allocated, so a hostile frame cannot make the server
//! reserve gigabytes or read past its end.

use bytes::{BufMut, Bytes};

/// Why a record could not be decoded. The connection that sent it is at fault, not the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The frame ended before the record did.
    #[error("record ends early: needed {needed} more bytes")]
    Truncated {
        /// How many more bytes the record needed.
        needed: usize,
    },
    /// A length below `-1`, or `-1` (null) where the field cannot be null.
    #[error("negative length {0} where a value is required")]
    NegativeLength(i32),
    /// A request type ZooKeeper does not define.
    #[error("unknown opcode {0}")]
    UnknownOpCode(i32),
    /// A known request type in a place it cannot appear (e.g. a read inside a write multi).
    #[error("opcode {0} is not allowed here")]
    UnexpectedOpCode(i32),
    /// Bytes left after a complete record.
    #[error("{0} bytes left over after the record")]
    TrailingBytes(usize),
}

/// A cursor over one frame's bytes. Buffers are sliced out of the frame without copying.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    /// A reader at the start of `buf`.
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    /// The number of bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.buf.len(),
            });
        }
        Ok(self.buf.split_to(n))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&bytes);
        Ok(out)
    }

    /// `n` raw bytes (fixed-size fields of lockkeeper's own files, not part of jute).
    pub fn read_raw(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        self.take(n)
    }

    /// A big-endian `int`.
    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    /// A big-endian `long`.
    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// A one-byte `boolean`; any non-zero byte is true.
    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.array::<1>()?[0] != 0)
    }

    /// A length-prefixed buffer; jute's null (`-1`) reads as empty, any other negative length
    /// is an error (as in ZooKeeper's `BinaryInputArchive`).
    pub fn read_buffer(&mut self) -> Result<Bytes, DecodeError> {
        match self.read_i32()? {
            -1 => Ok(Bytes::new()),
            len if len < 0 => Err(DecodeError::NegativeLength(len)),
            len => self.take(len as usize),
        }
    }

    /// Invalid UTF-8 becomes U+FFFD, as Java's decoder does on a ZooKeeper server, so a bad path
    /// gets ZooKeeper's answer for an invalid path instead of failing to decode.
    pub fn read_string(&mut self) -> Result<String, DecodeError> {
        let bytes = self.read_buffer()?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// A length-prefixed vector; null reads as empty. Each element must decode from bytes that
    /// are really present, so a huge count fails fast instead of allocating.
    pub fn read_vec<T: Jute>(&mut self) -> Result<Vec<T>, DecodeError> {
        let count = self.read_i32()?;
        if count <= 0 {
            return Ok(Vec::new());
        }
        // Every jute value takes at least one byte, so a count above the bytes left is a lie.
        if count as usize > self.buf.len() {
            return Err(DecodeError::Truncated {
                needed: count as usize - self.buf.len(),
            });
        }
        (0..count).map(|_| T::read(self)).collect()
    }

    /// Everything not yet read, e.g. a request body after its header.
    pub fn rest(self) -> Bytes {
        self.buf
    }

    /// Fails if bytes are left: a record followed by junk is a malformed request.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

/// A value with a jute encoding.
pub trait Jute: Sized {
    /// Appends the value's encoding to `out`.
    fn write(&self, out: &mut Vec<u8>);
    /// Reads one value from `r`, leaving the rest for the next field.
    fn read(r: &mut Reader) -> Result<Self, DecodeError>;

    /// Decodes a whole record from `bytes`, rejecting trailing bytes.
    fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let value = Self::read(&mut r)?;
        r.finish()?;
        Ok(value)
    }

    /// The value's encoding in a new buffer.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out);
        out
    }
}

impl Jute for i32 {
    fn write(&self, out: &mut Vec<u8>) {
        out.put_i32(*self);
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        r.read_i32()
    }
}

impl Jute for i64 {
    fn write(&self, out: &mut Vec<u8>) {
        out.put_i64(*self);
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        r.read_i64()
    }
}

impl Jute for bool {
    fn write(&self, out: &mut Vec<u8>) {
        out.put_u8(u8::from(*self));
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        r.read_bool()
    }
}

impl Jute for Bytes {
    fn write(&self, out: &mut Vec<u8>) {
        write_len(out, self.len());
        out.put_slice(self);
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        r.read_buffer()
    }
}

/// Node data, where ZooKeeper tells null (`-1`) from empty: a node created with null data reads
/// back as null.
impl Jute for Option<Bytes> {
    fn write(&self, out: &mut Vec<u8>) {
        write_data(out, self.as_deref());
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        match r.read_i32()? {
            -1 => Ok(None),
            len if len < 0 => Err(DecodeError::NegativeLength(len)),
            len => r.take(len as usize).map(Some),
        }
    }
}

impl Jute for String {
    fn write(&self, out: &mut Vec<u8>) {
        write_len(out, self.len());
        out.put_slice(self.as_bytes());
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        r.read_string()
    }
}

impl<T: Jute> Jute for Vec<T> {
    fn write(&self, out: &mut Vec<u8>) {
        write_len(out, self.len());
        for item in self {
            item.write(out);
        }
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        r.read_vec()
    }
}

/// Lengths are jute ints. Nothing the server builds approaches 2 GiB (frames are capped far
/// below), so saturating is only a guard against a logic error, never a silent truncation.
/// Writes node data as jute does: its length and bytes, or `-1` for null data. For callers
/// that hold the bytes in something other than `Bytes` (the server's tree).
pub fn write_data(out: &mut Vec<u8>, data: Option<&[u8]>) {
    match data {
        Some(bytes) => {
            write_len(out, bytes.len());
            out.put_slice(bytes);
        }
        None => out.put_i32(-1),
    }
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    out.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
}

/// Declares a jute record: a struct whose fields are written and read in declaration order,
/// exactly as `zookeeper.jute` lists them.
#[macro_export]
macro_rules! record {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name { $($(#[$fmeta])* pub $field: $ty),* }

        impl $crate::jute::Jute for $name {
            fn write(&self, _out: &mut Vec<u8>) {
                $($crate::jute::Jute::write(&self.$field, _out);)*
            }
            fn read(_r: &mut $crate::jute::Reader) -> Result<Self, $crate::jute::DecodeError> {
                Ok($name { $($field: <$ty as $crate::jute::Jute>::read(_r)?),* })
            }
        }
    };
}
