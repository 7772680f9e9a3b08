//! Curator's item envelope: how `DistributedQueue` stores one or more items in a node's data.
//!
//! Layout (big-endian, Java `DataOutputStream`): a 4-byte version `0x00010001`, then for each
//! item the opcode byte `0x01`, a 4-byte length and the item's bytes, then the opcode byte
//! `0x02` (end). A node made by `put` holds one item; one made by Curator's `putMulti` (our
//! [`put_multi`](super::DistributedQueue::put_multi)) holds several, consumed as one unit.
//!
//! Invariant: decoding never panics on foreign bytes; anything that is not exactly this layout
//! (bad version, unknown opcode, a length past the end, bytes after the end marker) is refused
//! with a reason, so the consumer can leave the node alone.

const VERSION: u32 = 0x0001_0001;
const ITEM: u8 = 0x01;
const END: u8 = 0x02;

/// Encodes `items` as one node's data.
pub(crate) fn encode<I, B>(items: I) -> Vec<u8>
where
    I: IntoIterator<Item = B>,
    B: AsRef<[u8]>,
{
    let mut out = VERSION.to_be_bytes().to_vec();
    for item in items {
        let item = item.as_ref();
        out.push(ITEM);
        // Item sizes are bounded far below 2^31 by the server's packet limit (jute.maxbuffer).
        out.extend_from_slice(&(item.len() as u32).to_be_bytes());
        out.extend_from_slice(item);
    }
    out.push(END);
    out
}

/// Decodes one node's data into its items, or says why it is not an envelope.
pub(crate) fn decode(data: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let (version, mut rest) = take_u32(data).ok_or("shorter than the 4-byte version")?;
    if version != VERSION {
        return Err(format!("version {version:#010x}, expected {VERSION:#010x}"));
    }
    let mut items = Vec::new();
    loop {
        let (&opcode, after) = rest.split_first().ok_or("no end marker")?;
        rest = after;
        match opcode {
            END if rest.is_empty() => return Ok(items),
            END => return Err(format!("{} bytes after the end marker", rest.len())),
            ITEM => {
                let (len, after) = take_u32(rest).ok_or("item length cut short")?;
                let len = usize::try_from(len).map_err(|_| "item length too large")?;
                if len > i32::MAX as usize {
                    return Err(format!("negative item length {}", len as u32 as i32));
                }
                if after.len() < len {
                    return Err(format!("item of {len} bytes, only {} left", after.len()));
                }
                items.push(after[..len].to_vec());
                rest = &after[len..];
            }
            other => return Err(format!("unknown opcode {other:#04x}")),
        }
    }
}

fn take_u32(data: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = data.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*head), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_item_matches_curator_bytes() {
        // What Curator's ItemSerializer writes for the single item "hi".
        let expected = [0, 1, 0, 1, 1, 0, 0, 0, 2, b'h', b'i', 2];
        assert_eq!(encode([b"hi"]), expected);
        assert_eq!(decode(&expected).unwrap(), vec![b"hi".to_vec()]);
    }

    #[test]
    fn several_and_empty_items_round_trip() {
        let items: Vec<&[u8]> = vec![b"a", b"", b"ccc"];
        assert_eq!(decode(&encode(&items)).unwrap(), items);
        assert_eq!(
            decode(&encode::<_, &[u8]>([])).unwrap(),
            Vec::<Vec<u8>>::new()
        );
    }

    #[test]
    fn foreign_bytes_are_refused_not_panicked_on() {
        for bad in [
            &b""[..],
            b"abc",
            &[0, 1, 0, 2, 2],
            &[0, 1, 0, 1],
            &[0, 1, 0, 1, 7, 2],
            &[0, 1, 0, 1, 1, 0, 0, 0, 9, 1, 2],
            &[0, 1, 0, 1, 1, 0xff, 0xff, 0xff, 0xff, 2],
            &[0, 1, 0, 1, 2, 0],
        ] {
            assert!(decode(bad).is_err(), "{bad:?} decoded");
        }
    }
}
