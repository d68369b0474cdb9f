//! Human sizes and rates: `4096`, `64K`, `1M`, `1MiB`, `2G`, `1.5G`; rates the same with an
//! optional `/s`. Binary multiples throughout (K = KiB = KB = 1024), as storage tools do.

use std::time::Duration;

/// Parses a size in bytes. Returns a message naming what is wrong.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("{text:?} is not a size (try 4096, 64K, 1MiB, 2G)"));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (use K, M, G, T or KiB, MiB, GiB, TiB)"
            ))
        }
    };
    if let Ok(n) = num.parse::<u64>() {
        return n
            .checked_mul(mult)
            .ok_or_else(|| format!("{text:?} is too large"));
    }
    let f: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try 4096, 64K, 1MiB, 2G)"))?;
    let bytes = f * mult as f64;
    if !(0.0..1.8e19).contains(&bytes) || bytes.fract() != 0.0 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Parses a rate in bytes per second: a size with an optional `/s`.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let r = parse_size(t)?;
    if r == 0 {
        return Err(format!("rate {text:?} must be above zero"));
    }
    Ok(r)
}

/// A duration such as `50ms`, `0.1s`, `200us` or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if t == "0" {
        ("0", 1.0)
    } else {
        return Err(format!(
            "duration {text:?} needs a unit: 50ms, 0.1s or 200us"
        ));
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("duration {text:?} is not a number with a unit"))?;
    if !(0.0..=3600.0).contains(&(v * scale)) {
        return Err(format!("duration {text:?} must be between 0 and one hour"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// A link rate in bytes per second, from bits (`200Mbit`, `1Gbit`, `500Kbit`, decimal
/// prefixes as network rates are quoted) or bytes (`25MiB`, as `parse_rate`).
pub fn parse_link_rate(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    if let Some(n) = t.strip_suffix("bit") {
        let (num, mult) = match n.chars().last() {
            Some('K') | Some('k') => (&n[..n.len() - 1], 1e3),
            Some('M') => (&n[..n.len() - 1], 1e6),
            Some('G') => (&n[..n.len() - 1], 1e9),
            _ => (n, 1.0),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("rate {text:?}: {num:?} is not a number"))?;
        let bytes = v * mult / 8.0;
        if !(1.0..1e12).contains(&bytes) {
            return Err(format!(
                "rate {text:?} must be between 8 bit/s and 8 Tbit/s"
            ));
        }
        return Ok(bytes as u64);
    }
    parse_rate(t)
}

/// Formats bytes with a binary unit, e.g. `1.5 MiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;
    #[test]
    fn durations_and_rates_parse_with_their_units() {
        assert_eq!(parse_duration("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_duration("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("200us"), Ok(Duration::from_micros(200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("50").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_link_rate("200Mbit"), Ok(25_000_000));
        assert_eq!(parse_link_rate("1Gbit/s"), Ok(125_000_000));
        assert_eq!(parse_link_rate("800Kbit"), Ok(100_000));
        assert_eq!(parse_link_rate("25MiB"), Ok(25 << 20));
        assert!(parse_link_rate("0bit").is_err());
        assert!(parse_link_rate("lots").is_err());
    }

    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size(" 8 mb "), Ok(8 << 20));
        for bad in ["", "M", "1X", "-1", "1.5", "99999999999T", "1..2M"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("50MiB"), Ok(50 << 20));
        assert_eq!(parse_rate("50MiB/s"), Ok(50 << 20));
        assert!(parse_rate("0").is_err());
    }

    #[test]
    fn format() {
        assert_eq!(format_size(10), "10 B");
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
    }
}
