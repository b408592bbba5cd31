//! `[policies]`: the Cedar policy files that decide calls, and the clock they read.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

/// The `[policies]` table.
///
/// ```toml
/// [policies]
/// files = ["policies/"]   # files, or directories of *.cedar files, relative to this file
/// utc_offset = "+02:00"   # the clock context.request.hour reads (default: UTC)
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Policy files, or directories whose `*.cedar` files are read in name order; relative
    /// to the config file's directory. Empty (the default): no policies.
    pub files: Vec<PathBuf>,
    /// The offset from UTC of the clock `context.request.hour`, `minute` and `weekday` are
    /// read on, as `+HH:MM` or `-HH:MM`.
    pub utc_offset: UtcOffset,
}

/// An offset from UTC, in minutes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UtcOffset(pub i32);

impl<'de> Deserialize<'de> for UtcOffset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_offset(&text).map(UtcOffset).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not an offset from UTC; write it as +HH:MM or -HH:MM (\"+02:00\", \"-05:30\")"
            ))
        })
    }
}

fn parse_offset(text: &str) -> Option<i32> {
    let sign = match text.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hours, minutes) = text[1..].split_once(':')?;
    if hours.len() != 2 || minutes.len() != 2 {
        return None;
    }
    let (hours, minutes): (i32, i32) = (hours.parse().ok()?, minutes.parse().ok()?);
    (hours <= 14 && minutes < 60).then_some(sign * (hours * 60 + minutes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_read_as_signed_hours_and_minutes() {
        for (text, minutes) in [
            ("+02:00", Some(120)),
            ("-05:30", Some(-330)),
            ("+00:00", Some(0)),
        ] {
            assert_eq!(parse_offset(text), minutes, "{text}");
        }
        for bad in ["02:00", "+2:00", "+25:00", "+02:60", "UTC", ""] {
            assert_eq!(parse_offset(bad), None, "{bad}");
        }
    }
}
