//! Kubernetes `resource.Quantity`: parse, canonical string, value key.
//!
//! This mirrors apimachinery's `ParseQuantity` / `Quantity.String()` step by step, including
//! its quirks (the string cache that keeps a leading `+` or `0`, decimal SI values above `E`
//! printing without a suffix), because the canonical string must be what the apiserver stores.
//! Values are kept as `sign × mantissa × 10^exponent` with the mantissa free of trailing zeros;
//! the rare inputs that leave Go's int64 fast path are computed on decimal digit strings.

/// Mantissas must fit in this many bits (docs/core.md §2): it keeps value keys bounded.
const MAX_MANTISSA_BITS: u32 = 96;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    DecimalSI,
    BinarySI,
    DecimalExponent,
}

/// A parsed quantity: its exact value and how `String()` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    /// No trailing decimal zeros; 0 for zero.
    mantissa: u128,
    exponent: i64,
    format: Format,
    /// Go keeps the input string verbatim in some int64-path cases and prints it back.
    cached: bool,
}

struct Split<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// Go's `parseQuantityString`: sign, integer digits (leading zeros dropped), fraction, suffix.
fn split(s: &str) -> Option<Split<'_>> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    if end > 0 {
        match b[0] {
            b'-' => {
                positive = false;
                pos += 1;
            }
            b'+' => pos += 1,
            _ => {}
        }
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Some(Split {
            positive,
            value: "0",
            num: "0",
            denom: "",
            suffix: "",
        });
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        return Some(Split {
            positive,
            value: s,
            num: &s[num_start..],
            denom: "",
            suffix: "",
        });
    }
    let num = if pos == num_start {
        "0"
    } else {
        &s[num_start..pos]
    };
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[denom_start..pos];
        if pos >= end {
            return Some(Split {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return None;
    }
    Some(Split {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

/// Go's suffixer `interpret`: `(base, exponent, format)`.
fn interpret(suffix: &str) -> Option<(u32, i64, Format)> {
    let decimal = |e| Some((10, e, Format::DecimalSI));
    let binary = |e| Some((2, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let rest = suffix.strip_prefix(['e', 'E'])?;
            let parsed = parse_go_int64(rest)?;
            // Go narrows the parsed int64 to int32 without a check.
            Some((10, i64::from(parsed as i32), Format::DecimalExponent))
        }
    }
}

/// `strconv.ParseInt(s, 10, 64)`: optional sign, at least one digit, no overflow.
fn parse_go_int64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.strip_prefix('+').unwrap_or(s).parse().ok()
}

/// Strips trailing zeros of `m × 10^e`.
fn normalise(mut m: u128, mut e: i64) -> (u128, i64) {
    if m == 0 {
        return (0, 0);
    }
    while m.is_multiple_of(10) {
        m /= 10;
        e += 1;
    }
    (m, e)
}

impl Quantity {
    /// `ParseQuantity`; None when Go refuses the string or the value does not fit.
    pub fn parse(s: &str) -> Option<Quantity> {
        if s.is_empty() {
            return None;
        }
        let sp = split(s)?;
        let (base, exponent, format) = interpret(sp.suffix)?;
        let q =
            fast_path(&sp, exponent, format).or_else(|| slow_path(&sp, base, exponent, format))?;
        (q.mantissa >> MAX_MANTISSA_BITS == 0).then_some(q)
    }

    fn zero(format: Format) -> Quantity {
        Quantity {
            negative: false,
            mantissa: 0,
            exponent: 0,
            format,
            cached: false,
        }
    }

    /// What `Quantity.String()` prints; `input` is the string it was parsed from.
    pub fn canonical(&self, input: &str) -> String {
        if self.cached {
            return input.to_owned();
        }
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let sign = if self.negative { "-" } else { "" };
        let (m, e) = (self.mantissa, self.exponent);
        if self.format == Format::BinarySI {
            // Integers of magnitude >= 1024 print in base 1024; they are below 2^63 (clamped).
            let integral = (e >= 0)
                .then(|| m.checked_mul(10u128.checked_pow(e as u32)?))
                .flatten();
            if let Some(mut n) = integral.filter(|&n| n >= 1024) {
                let mut k = 0;
                while n % 1024 == 0 {
                    n /= 1024;
                    k += 1;
                }
                let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                    .get(k)
                    .copied()
                    .unwrap_or("");
                return format!("{sign}{n}{suffix}");
            }
        }
        let r = e.rem_euclid(3);
        let (m, e) = (m * 10u128.pow(r as u32), e - r);
        let suffix = match (self.format, e) {
            (Format::DecimalExponent, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            // Go has no suffix for these exponents and silently prints none.
            (_, e) => match e {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                _ => "",
            }
            .to_owned(),
        };
        format!("{sign}{m}{suffix}")
    }

    /// The exact value as `<mantissa>e<exponent>` (`0` for zero), equal for equal values.
    pub fn value_key(&self) -> String {
        if self.mantissa == 0 {
            return "0".to_owned();
        }
        let sign = if self.negative { "-" } else { "" };
        format!("{sign}{}e{}", self.mantissa, self.exponent)
    }

    /// The value in nano units (Go rounds to them, so it is whole), kept within
    /// `±limit` (a magnitude beyond it comes back as the bound, with its sign).
    pub fn nano(&self, limit: i128) -> i128 {
        let scale = u32::try_from((self.exponent + 9).clamp(0, 40)).unwrap_or(0);
        let magnitude = i128::try_from(self.mantissa)
            .ok()
            .and_then(|m| m.checked_mul(10i128.checked_pow(scale)?))
            .map_or(limit, |m| m.min(limit));
        if self.negative {
            -magnitude
        } else {
            magnitude
        }
    }
}

/// Go's int64 path: few enough digits and no sub-nano fraction; also decides the string cache.
fn fast_path(sp: &Split<'_>, exponent: i64, format: Format) -> Option<Quantity> {
    let digits = (sp.num.len() + sp.denom.len()) as i64;
    let (precision, mut scale, multiplier) = match format {
        Format::BinarySI if sp.denom.is_empty() => (
            15 - sp.num.len() as i64 - exponent * 3 / 10 - 1,
            0,
            1i64 << exponent,
        ),
        Format::BinarySI => (-1, 0, 1),
        _ => (18 - digits, exponent, 1),
    };
    if precision < 0 {
        return None;
    }
    scale -= sp.denom.len() as i64;
    if scale < -9 {
        return None;
    }
    // At most 18 digits (precision >= 0), so this cannot overflow.
    let value = sp
        .num
        .bytes()
        .chain(sp.denom.bytes())
        .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    // Go tests these on `shifted`, the digits of num and denom together.
    let mut shifted = sp.num.bytes().chain(sp.denom.bytes());
    let ends_000 = digits >= 3 && shifted.clone().rev().take(3).all(|d| d == b'0');
    let starts_0 = shifted.next() == Some(b'0');
    let result = value.checked_mul(multiplier)?;
    let cached = match format {
        Format::BinarySI => value & 0x07 != 0,
        _ => scale % 3 == 0 && !ends_000 && !starts_0,
    };
    let (mantissa, exponent) = normalise(result as u128, scale);
    Some(Quantity {
        negative: !sp.positive && mantissa != 0,
        mantissa,
        exponent,
        format,
        cached,
    })
}

/// Go's `inf.Dec` path, on big-endian decimal digit vectors.
fn slow_path(sp: &Split<'_>, base: u32, exponent: i64, mut format: Format) -> Option<Quantity> {
    let mut digits: Vec<u8> = sp
        .value
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|c| c - b'0')
        .collect();
    if digits.is_empty() {
        return None;
    }
    let mut scale = sp
        .value
        .split_once('.')
        .map_or(0, |(_, frac)| frac.len() as i64);
    if base == 10 {
        scale -= exponent;
    } else {
        digits = mul_pow2(&digits, exponent as u32);
    }
    trim_leading_zeros(&mut digits);
    if digits.is_empty() {
        return Some(Quantity::zero(format));
    }
    // Round the magnitude up to nano precision.
    if scale > 9 {
        let drop = (scale - 9) as usize;
        if drop >= digits.len() {
            digits = vec![1];
        } else {
            let inexact = digits[digits.len() - drop..].iter().any(|&d| d != 0);
            digits.truncate(digits.len() - drop);
            if inexact {
                increment(&mut digits);
            }
        }
        scale = 9;
    }
    // Strip trailing zeros into the exponent.
    let mut exp = -scale;
    while digits.len() > 1 && digits.last() == Some(&0) {
        digits.pop();
        exp += 1;
    }
    if format == Format::BinarySI {
        const MAX_INT64: u128 = i64::MAX as u128;
        if exceeds(&digits, exp, MAX_INT64) {
            let (mantissa, exponent) = normalise(MAX_INT64, 0);
            return Some(Quantity {
                negative: !sp.positive,
                mantissa,
                exponent,
                format,
                cached: false,
            });
        }
        if exp < 0 && (digits.len() as i64) <= -exp {
            format = Format::DecimalSI;
        }
    }
    if digits.len() > 39 {
        return None;
    }
    let mantissa = digits.iter().try_fold(0u128, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u128::from(d))
    })?;
    Some(Quantity {
        negative: !sp.positive,
        mantissa,
        exponent: exp,
        format,
        cached: false,
    })
}

fn trim_leading_zeros(digits: &mut Vec<u8>) {
    let first = digits.iter().position(|&d| d != 0).unwrap_or(digits.len());
    digits.drain(..first);
}

fn mul_pow2(digits: &[u8], k: u32) -> Vec<u8> {
    let factor = 1u128 << k;
    let mut out = Vec::with_capacity(digits.len() + 20);
    let mut carry = 0u128;
    for &d in digits.iter().rev() {
        let v = u128::from(d) * factor + carry;
        out.push((v % 10) as u8);
        carry = v / 10;
    }
    while carry > 0 {
        out.push((carry % 10) as u8);
        carry /= 10;
    }
    out.reverse();
    out
}

fn increment(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == 9 {
            *d = 0;
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, 1);
}

/// Whether `digits × 10^exp` (no leading zeros) is greater than `limit`.
fn exceeds(digits: &[u8], exp: i64, limit: u128) -> bool {
    let int_len = digits.len() as i64 + exp;
    let limit_len = limit.to_string().len() as i64;
    if int_len != limit_len {
        return int_len > limit_len;
    }
    let whole = &digits[..(int_len as usize).min(digits.len())];
    let mut v = whole.iter().fold(0u128, |acc, &d| acc * 10 + u128::from(d));
    for _ in digits.len() as i64..int_len {
        v *= 10;
    }
    v > limit || (v == limit && digits.len() as i64 > int_len)
}

/// Canonical string of a quantity string, or None when it is not a valid quantity.
pub fn canonical(s: &str) -> Option<String> {
    Quantity::parse(s).map(|q| q.canonical(s))
}

/// Value key of a quantity string, or None when it is not a valid quantity.
pub fn value_key(s: &str) -> Option<String> {
    Quantity::parse(s).map(|q| q.value_key())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_strings() {
        let cases = [
            ("0", "0"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("1e3", "1e3"),
            ("1000e3", "1e6"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536", "1536"),
            ("1.5Ki", "1536"),
            ("0.0000000001", "1n"),
            ("-0.0000000001", "-1n"),
            ("+1500", "+1500"),
            ("1000E", "1"),
            ("16Ei", "9223372036854775807"),
            ("0.5Ki", "512"),
            ("100Mi", "100Mi"),
            ("1e-10", "1e-9"),
            ("12345678901234567890", "12345678901234567890"),
        ];
        for (input, want) in cases {
            assert_eq!(canonical(input).as_deref(), Some(want), "{input}");
        }
    }

    #[test]
    fn refused() {
        for input in [
            "",
            "abc",
            "1.2.3",
            "1Ki5",
            "1e",
            "--1",
            "1 ",
            ".e-10",
            "1e99999999999999999999",
        ] {
            assert_eq!(canonical(input), None, "{input}");
        }
    }

    #[test]
    fn value_keys() {
        assert_eq!(value_key("1Gi").as_deref(), Some("1073741824e0"));
        assert_eq!(value_key("1073741824").as_deref(), Some("1073741824e0"));
        assert_eq!(value_key("500m").as_deref(), Some("5e-1"));
        assert_eq!(value_key("2k").as_deref(), Some("2e3"));
        assert_eq!(value_key("0").as_deref(), Some("0"));
        assert_eq!(value_key("-0.5").as_deref(), Some("-5e-1"));
        assert_eq!(value_key("1e40").as_deref(), Some("1e40"));
        assert_eq!(value_key("987654321098765432109876543219"), None);
    }
}
