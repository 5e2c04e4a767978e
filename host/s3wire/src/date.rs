//! Dates as S3 and HTTP write them, in one place: HTTP dates (IMF-fixdate)
//! both ways, the `yyyymmddThhmmssZ` a signature names, and the ISO 8601
//! times of S3's XML. Unsigned arithmetic: no date before 1970 is read or
//! written.

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `secs` since the Unix epoch as an HTTP date (RFC 9110's IMF-fixdate,
/// `Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(secs: u64) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let days = secs / 86_400;
    let of_day = secs % 86_400;
    let (year, month, day) = civil(days);
    format!(
        "{}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
    )
}

/// An HTTP date (IMF-fixdate, the only form clients send today) as
/// seconds since the epoch; `None` for anything else or a date before
/// 1970.
pub fn parse_http_date(value: &str) -> Option<u64> {
    parse_http_date_signed(value).map(|(_, at)| at)
}

/// An HTTP `Date` (IMF-fixdate, `Fri, 24 May 2013 00:00:00 GMT`) as the
/// `yyyymmddThhmmssZ` SigV4 signs and unix seconds.
pub(crate) fn parse_http_date_signed(value: &str) -> Option<(String, u64)> {
    let mut words = value.split_whitespace();
    let (Some(weekday), Some(day), Some(month), Some(year), Some(time), Some("GMT"), None) = (
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
        words.next(),
    ) else {
        return None;
    };
    if !weekday.ends_with(',') || time.len() != 8 || day.len() > 2 || year.len() != 4 {
        return None;
    }
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let mut hms = time.split(':');
    let digits = |s: Option<&str>| -> Option<u32> {
        let s = s?;
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (day, year) = (digits(Some(day))?, digits(Some(year))?);
    let (hour, minute, second) = (
        digits(hms.next())?,
        digits(hms.next())?,
        digits(hms.next())?,
    );
    let month = u32::try_from(month).ok()?;
    let at = to_unix(year, month, day, hour, minute, second)?;
    Some((
        format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z"),
        at,
    ))
}

/// A UTC civil time as unix seconds; `None` for a field out of range or a
/// time before 1970.
pub(crate) fn to_unix(
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
) -> Option<u64> {
    let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let valid = year >= 1970
        && (1..=12).contains(&month)
        && day >= 1
        && day <= *month_days.get(usize::try_from(month - 1).ok()?)?
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    // Days since 1970-01-01 from a calendar whose year starts in March,
    // so the leap day falls at the end of a year.
    let (y, m) = if month <= 2 {
        (u64::from(year) - 1, u64::from(month) + 9)
    } else {
        (u64::from(year), u64::from(month) - 3)
    };
    let era = y / 400;
    let year_of_era = y % 400;
    let day_of_year = (153 * m + 2) / 5 + u64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = (era * 146_097 + day_of_era).checked_sub(719_468)?;
    Some(days * 86_400 + u64::from(hour) * 3600 + u64::from(minute) * 60 + u64::from(second))
}

/// `ms` since the Unix epoch as S3 writes times in XML (ISO 8601 in UTC
/// with milliseconds: `2009-10-12T17:50:30.000Z`).
pub fn timestamp(ms: u64) -> String {
    let secs = ms / 1000;
    let (year, month, day) = civil(secs / 86_400);
    let rest = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        ms % 1000
    )
}

/// The proleptic Gregorian date of day `days` since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso_8601_in_utc_with_milliseconds() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_255_369_830_123), "2009-10-12T17:50:30.123Z");
        assert_eq!(timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(timestamp(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn http_dates_parse_back_to_their_seconds() {
        assert_eq!(
            parse_http_date(&http_date(1_700_000_000)),
            Some(1_700_000_000)
        );
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
    }
}
