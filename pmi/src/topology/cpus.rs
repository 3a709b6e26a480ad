//! CPU sets as Linux cpulists (`0-3,8`) or hex masks, both ways.

/// Writes sorted CPU numbers as a list with ranges: `[0,1,2,3,8]` → `0-3,8`; empty → ``.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Largest CPU number accepted in a list (keeps a hostile `0-4294967295` from allocating).
pub const MAX_CPU: u32 = 1 << 20;

/// Parses `0-3,8` into sorted, deduplicated CPU numbers. Empty items, reversed ranges and
/// numbers above [`MAX_CPU`] are errors; so is an empty list.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let num = |x: &str| -> Result<u32, String> {
        let n = x
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("'{x}' is not a CPU number"))?;
        if n > MAX_CPU {
            return Err(format!("CPU {n} is above the limit of {MAX_CPU}"));
        }
        Ok(n)
    };
    if s.trim().is_empty() {
        return Err("empty CPU list".into());
    }
    // One bit per CPU up to the largest named: repeated ranges cost their
    // text, not their width (a list of many `0-1048576` stays small).
    let mut bits: Vec<u64> = Vec::new();
    let mut mark = |a: u32, b: u32| {
        let need = b as usize / 64 + 1;
        if bits.len() < need {
            bits.resize(need, 0);
        }
        let (mut c, b) = (a as usize, b as usize);
        while c <= b {
            if c % 64 == 0 && c + 63 <= b {
                bits[c / 64] = u64::MAX;
                c += 64;
            } else {
                bits[c / 64] |= 1 << (c % 64);
                c += 1;
            }
        }
    };
    for item in s.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range '{item}' goes backwards"));
                }
                mark(a, b);
            }
            None => {
                let n = num(item)?;
                mark(n, n);
            }
        }
    }
    Ok((0..bits.len() * 64)
        .filter(|&c| bits[c / 64] & (1 << (c % 64)) != 0)
        .map(|c| c as u32)
        .collect())
}

/// Writes CPU numbers as `0x<hex>`, bit i = CPU i, most significant digit first.
pub fn format_cpu_mask(cpus: &[u32]) -> String {
    let Some(&max) = cpus.iter().max() else {
        return "0x0".into();
    };
    let mut nibbles = vec![0u8; max as usize / 4 + 1];
    for &c in cpus {
        nibbles[c as usize / 4] |= 1 << (c % 4);
    }
    let mut out = String::from("0x");
    for n in nibbles.iter().rev() {
        out.push(char::from_digit(u32::from(*n), 16).unwrap_or('0'));
    }
    out
}

/// Parses the `0x<hex>` form of [`format_cpu_mask`]; an empty mask is an error.
pub fn parse_cpu_mask(s: &str) -> Result<Vec<u32>, String> {
    let hex = s
        .strip_prefix("0x")
        .ok_or_else(|| format!("'{s}' does not start with 0x"))?;
    if hex.is_empty() || hex.len() > (MAX_CPU as usize / 4) {
        return Err(format!("CPU mask '{s}' has a bad length"));
    }
    let mut cpus = Vec::new();
    for (i, ch) in hex.chars().rev().enumerate() {
        let d = ch
            .to_digit(16)
            .ok_or_else(|| format!("'{ch}' in CPU mask is not a hex digit"))?;
        for b in 0..4 {
            if d & (1 << b) != 0 {
                cpus.push((i * 4 + b) as u32);
            }
        }
    }
    if cpus.is_empty() {
        return Err("empty CPU mask".into());
    }
    Ok(cpus)
}
