//! Per-device state found from a record's device number.

/// The index of device `dev`'s entry in `entries`, made by `make` when it has none. `last` is
/// a one-entry cache (the index found last time): records of a device mostly come in runs, so
/// the search is nearly never needed.
#[inline]
pub fn index<T>(
    entries: &mut Vec<T>,
    last: &mut usize,
    dev: u32,
    dev_of: impl Fn(&T) -> u32,
    make: impl FnOnce() -> T,
) -> usize {
    if entries.get(*last).is_none_or(|e| dev_of(e) != dev) {
        *last = if let Some(i) = entries.iter().position(|e| dev_of(e) == dev) {
            i
        } else {
            entries.push(make());
            entries.len() - 1
        };
    }
    *last
}

#[cfg(test)]
mod tests {
    use super::index;

    #[test]
    fn entries_are_made_once_and_found_again() {
        let mut entries: Vec<(u32, u32)> = Vec::new();
        let mut last = 0;
        let mut made = 0;
        for dev in [8, 8, 9, 8, 9, 7] {
            let i = index(
                &mut entries,
                &mut last,
                dev,
                |e| e.0,
                || {
                    made += 1;
                    (dev, 0)
                },
            );
            entries[i].1 += 1;
        }
        assert_eq!(entries, [(8, 3), (9, 2), (7, 1)]);
        assert_eq!(made, 3);
        assert_eq!(last, 2);
    }
}
