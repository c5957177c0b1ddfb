//! Comparing a sealed build's EROFS bytes with an unsealed build of the same tree: they differ only
//! by the per-file digest table a sealed build appends (docs/format.md §8): its 64-byte locator at
//! byte 0, its blocks after every other block, and so the superblock's block count and checksum.
//! The comparison masks exactly those fields and computes nothing itself.

/// Where the table of a sealed build's EROFS bytes starts (the locator's `table_offset`), or
/// `None` when the bytes have no locator.
pub fn table_offset(erofs: &[u8]) -> Option<usize> {
    (erofs.get(..8)? == b"\x89SEALFT\n")
        .then(|| u64::from_le_bytes(erofs[24..32].try_into().expect("8 bytes")) as usize)
}

/// Checks that `plain` (an unsealed build) equals `sealed` (a sealed build's EROFS bytes) but for
/// the per-file digest table: `plain` ends where the table starts, has no locator (zeros), and
/// every other byte is the same, except the superblock's checksum (bytes 1028..1032) and block
/// count (1060..1064), which count the table. `what` names the case in the message.
pub fn check_same_but_table(plain: &[u8], sealed: &[u8], what: &str) -> Result<(), String> {
    let table = table_offset(sealed)
        .ok_or_else(|| format!("{what}: the sealed image has no per-file digest table"))?;
    if plain.len() != table {
        return Err(format!(
            "{what}: the unsealed image has {} bytes; the sealed one's table starts at {table}",
            plain.len()
        ));
    }
    if plain[..64].iter().any(|&b| b != 0) {
        return Err(format!(
            "{what}: the unsealed image has bytes in the locator's place"
        ));
    }
    for (start, end) in [(64, 1028), (1032, 1060), (1064, table)] {
        if let Some(at) = (start..end).find(|&i| plain[i] != sealed[i]) {
            return Err(format!(
                "{what}: the images differ at byte {at} (outside the table and the fields counting it)"
            ));
        }
    }
    Ok(())
}
