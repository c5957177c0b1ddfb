//! Holes as a file written on disk has them: an importer hands the builder the data ranges a
//! directory scan would find (`SEEK_DATA`/`SEEK_HOLE`) in the file `tar -x` or `unsquashfs`
//! writes, so that the same tree gives the same image.

/// Block size holes are counted in (that of the file systems extraction writes to).
const FS_BLOCK: u64 = 4096;

/// The data ranges a file written with these stretches (and holes elsewhere) has on a file
/// system of 4 KiB blocks, as a directory scan would find them (`SEEK_DATA`/`SEEK_HOLE`);
/// `None` when every block is allocated.
pub(crate) fn data_ranges(size: u64, map: &[(u64, u64)]) -> Option<Vec<(u64, u64)>> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for &(off, len) in map.iter().filter(|(_, len)| *len > 0) {
        let start = off / FS_BLOCK * FS_BLOCK;
        let end = (off + len).div_ceil(FS_BLOCK) * FS_BLOCK;
        match ranges.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => ranges.push((start, end)),
        }
    }
    let allocated: u64 = ranges.iter().map(|(s, e)| e - s).sum();
    if size == 0 || allocated >= size {
        return None;
    }
    for r in &mut ranges {
        r.1 = r.1.min(size);
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_counted_in_file_system_blocks() {
        // Stretches inside one block, and a final empty stretch marking the size.
        assert_eq!(
            data_ranges(1 << 20, &[(100, 10), (5000, 10), (1 << 20, 0)]),
            Some(vec![(0, 8192)])
        );
        assert_eq!(
            data_ranges(100_000, &[(0, 4096), (90_000, 10_000)]),
            Some(vec![(0, 4096), (86016, 100_000)])
        );
        // Every block written: no holes left.
        assert_eq!(data_ranges(8000, &[(0, 10), (4096, 3904)]), None);
        assert_eq!(data_ranges(8192, &[]), Some(vec![]));
    }
}
