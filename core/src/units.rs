//! Sizes in reloptions: bytes with an optional unit.

/// Parses '256MB', '1 GB', '500kB', '123456' (bytes). Units are powers of
/// 1024, as in PostgreSQL's memory GUCs, in any case.
pub fn parse_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("\"{v}\" is not a size"));
    }
    let n: u64 = num.parse().map_err(|_| format!("\"{v}\" is out of range"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1,
        "kb" | "k" => 1 << 10,
        "mb" | "m" => 1 << 20,
        "gb" | "g" => 1 << 30,
        "tb" | "t" => 1 << 40,
        u => return Err(format!("unknown unit \"{u}\" in \"{v}\"")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("\"{v}\" is out of range"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_memory_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64kB"), Ok(64 << 10));
        assert_eq!(parse_size(" 512 MB "), Ok(512 << 20));
        assert_eq!(parse_size("2gb"), Ok(2 << 30));
        assert!(parse_size("MB").is_err());
        assert!(parse_size("-1MB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999TB").is_err());
    }
}
