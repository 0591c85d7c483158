//! A small binary image format for built tables: what the compiled encoder cache and pickles
//! carry instead of JSON, so that loading copies tables rather than parsing and rebuilding them.
//!
//! [`Writer`] appends little-endian integers, length-prefixed byte strings and integer arrays;
//! [`Reader`] reads them back in the same order and fails with a message (never panics) on bytes
//! that end early or hold an impossible length. An image carries no schema: the writer and the
//! reader of one type are written side by side, and the container (see `crate::compiled`)
//! checks the chatids version and a [`checksum`] before any image is read.

/// Appends values to a byte buffer.
#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty image.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A length (as u64).
    pub fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.buf.extend_from_slice(v);
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    /// `None` or a value written by `put`.
    pub fn option<T>(&mut self, v: Option<T>, put: impl FnOnce(&mut Self, T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                put(self, v);
            }
        }
    }

    /// A length-prefixed array of u32.
    pub fn u32s(&mut self, v: &[u32]) {
        self.len(v.len());
        self.buf.reserve(v.len() * 4);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }

    /// A length-prefixed array of u64.
    pub fn u64s(&mut self, v: &[u64]) {
        self.len(v.len());
        self.buf.reserve(v.len() * 8);
        for x in v {
            self.buf.extend_from_slice(&x.to_le_bytes());
        }
    }
}

/// Reads an image in the order it was written.
pub struct Reader<'a> {
    buf: &'a [u8],
}

/// A read error: what was being read.
pub type ReadResult<T> = Result<T, String>;

fn short(what: &str) -> String {
    format!("the image ends inside {what}")
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// Whether every byte was read.
    pub fn is_done(&self) -> bool {
        self.buf.is_empty()
    }

    fn take(&mut self, n: usize, what: &str) -> ReadResult<&'a [u8]> {
        if n > self.buf.len() {
            return Err(short(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> ReadResult<u8> {
        Ok(self.take(1, "a byte")?[0])
    }

    pub fn bool(&mut self) -> ReadResult<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("invalid boolean {b}")),
        }
    }

    pub fn u32(&mut self) -> ReadResult<u32> {
        let b = self.take(4, "an integer")?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> ReadResult<u64> {
        let b = self.take(8, "an integer")?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A length of items of `item_bytes` bytes each, checked against the bytes left.
    pub fn len(&mut self, item_bytes: usize) -> ReadResult<usize> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n.saturating_mul(item_bytes.max(1)) <= self.buf.len())
            .ok_or_else(|| format!("impossible length {n}"))
    }

    /// A length-prefixed byte string, borrowed.
    pub fn bytes(&mut self) -> ReadResult<&'a [u8]> {
        let n = self.len(1)?;
        self.take(n, "a byte string")
    }

    /// A length-prefixed UTF-8 string, borrowed.
    pub fn str(&mut self) -> ReadResult<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|e| format!("invalid UTF-8: {e}"))
    }

    /// `None` or a value read by `get`.
    pub fn option<T>(
        &mut self,
        get: impl FnOnce(&mut Self) -> ReadResult<T>,
    ) -> ReadResult<Option<T>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(get(self)?)),
            b => Err(format!("invalid option tag {b}")),
        }
    }

    pub fn u32s(&mut self) -> ReadResult<Vec<u32>> {
        let n = self.len(4)?;
        let b = self.take(n * 4, "an array")?;
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    pub fn u64s(&mut self) -> ReadResult<Vec<u64>> {
        let n = self.len(8)?;
        let b = self.take(n * 8, "an array")?;
        Ok(b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }
}

/// A 64-bit checksum of `bytes`, fast enough to run over a cache of tens of megabytes on every
/// load (four independent multiply-rotate lanes over 8-byte words). It detects damage (a
/// truncated or partly overwritten file), not tampering.
pub fn checksum(bytes: &[u8]) -> u64 {
    checksum_seeded(bytes, 0)
}

/// [`checksum`] with its lanes started from `seed`: two seeds give two independent hashes.
pub fn checksum_seeded(bytes: &[u8], seed: u64) -> u64 {
    let mut sum = Checksum::new(seed);
    sum.update(bytes);
    sum.finish()
}

/// [`checksum_seeded`] of what `reader` yields, read in pieces (no buffer of its whole size).
pub fn checksum_reader(mut reader: impl std::io::Read, seed: u64) -> std::io::Result<u64> {
    let mut sum = Checksum::new(seed);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // Fill the buffer, so that only the last piece has a partial block.
        let mut filled = 0;
        while filled < buf.len() {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        sum.update(&buf[..filled]);
        if filled < buf.len() {
            return Ok(sum.finish());
        }
    }
}

const K: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0x85EB_CA77_C2B2_AE63,
];

/// The checksum's state: four lanes over whole 32-byte blocks, and the bytes after the last
/// whole block (only the last [`Checksum::update`] may leave some).
struct Checksum {
    lanes: [u64; 4],
    len: u64,
    tail: Vec<u8>,
}

impl Checksum {
    fn new(seed: u64) -> Self {
        Checksum {
            lanes: [1u64, 2, 3, 4].map(|l| l ^ seed.wrapping_mul(K[3])),
            len: 0,
            tail: Vec::new(),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        debug_assert!(
            self.tail.is_empty(),
            "only the last piece may end inside a block"
        );
        self.len += bytes.len() as u64;
        let mut blocks = bytes.chunks_exact(32);
        for block in &mut blocks {
            for (i, lane) in self.lanes.iter_mut().enumerate() {
                let w = u64::from_le_bytes(block[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                *lane = (*lane ^ w).wrapping_mul(K[i]).rotate_left(31);
            }
        }
        self.tail.extend_from_slice(blocks.remainder());
    }

    fn finish(self) -> u64 {
        let mut h = self.len;
        for (i, lane) in self.lanes.iter().enumerate() {
            h = (h ^ lane.wrapping_mul(K[i]))
                .rotate_left(27)
                .wrapping_mul(K[0]);
        }
        for &b in &self.tail {
            h = (h ^ u64::from(b)).wrapping_mul(K[1]).rotate_left(23);
        }
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_in_order_and_short_images_fail() {
        let mut w = Writer::new();
        w.u8(7);
        w.bool(true);
        w.u32(0xDEAD_BEEF);
        w.str("héllo");
        w.option(Some(5u32), |w, v| w.u32(v));
        w.option(None::<u32>, |w, v| w.u32(v));
        w.u32s(&[1, 2, 3]);
        w.u64s(&[u64::MAX]);
        let bytes = w.into_bytes();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8().unwrap(), 7);
        assert!(r.bool().unwrap());
        assert_eq!(r.u32().unwrap(), 0xDEAD_BEEF);
        assert_eq!(r.str().unwrap(), "héllo");
        assert_eq!(r.option(|r| r.u32()).unwrap(), Some(5));
        assert_eq!(r.option(|r| r.u32()).unwrap(), None);
        assert_eq!(r.u32s().unwrap(), vec![1, 2, 3]);
        assert_eq!(r.u64s().unwrap(), vec![u64::MAX]);
        assert!(r.is_done());
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let all = (|| -> ReadResult<()> {
                r.u8()?;
                r.bool()?;
                r.u32()?;
                r.str()?;
                r.option(|r| r.u32())?;
                r.option(|r| r.u32())?;
                r.u32s()?;
                r.u64s()?;
                Ok(())
            })();
            assert!(all.is_err(), "a cut at {cut} must fail");
        }
    }

    #[test]
    fn checksum_sees_every_byte() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let base = checksum(&data);
        for i in [0, 31, 32, 500, 998, 999] {
            let mut d = data.clone();
            d[i] ^= 1;
            assert_ne!(checksum(&d), base, "byte {i}");
        }
        assert_ne!(checksum(&data[..999]), base);
        assert_ne!(checksum_seeded(&data, 1), base);
        let big: Vec<u8> = (0..(3 << 20) + 77u32)
            .map(|i| (i * 31 % 253) as u8)
            .collect();
        assert_eq!(
            checksum_reader(&big[..], 5).unwrap(),
            checksum_seeded(&big, 5)
        );
    }
}
