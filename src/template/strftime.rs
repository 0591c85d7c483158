//! `datetime.strftime` as Python on Linux (glibc, C locale) formats a naive date-time.

use super::DateTime;

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// 0 = Sunday.
fn weekday(y: i64, m: i64, d: i64) -> i64 {
    (days_from_civil(y, m, d) + 4).rem_euclid(7)
}

/// 0-based day of the year.
fn yday(y: i64, m: i64, d: i64) -> i64 {
    days_from_civil(y, m, d) - days_from_civil(y, 1, 1)
}

/// ISO 8601 year and week.
fn iso_week(y: i64, m: i64, d: i64) -> (i64, i64) {
    let wd = (weekday(y, m, d) + 6) % 7; // Monday = 0
    let yd = yday(y, m, d);
    let week = (yd - wd + 10) / 7;
    if week < 1 {
        let py = y - 1;
        let last = yday(py, 12, 31);
        let pwd = (weekday(py, 12, 31) + 6) % 7;
        (py, (last - pwd + 10) / 7)
    } else if week == 53 && {
        let days_in_year = if is_leap(y) { 366 } else { 365 };
        yd - wd + 3 >= days_in_year
    } {
        (y + 1, 1)
    } else {
        (y, week)
    }
}

/// Format `now` with Python's `strftime(fmt)`; `Err` names a directive chatids does not support.
pub fn strftime(fmt: &str, now: &DateTime) -> Result<String, String> {
    let (y, m, d) = (now.year as i64, now.month as i64, now.day as i64);
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&d)
        || now.hour > 23
        || now.minute > 59
        || now.second > 60
    {
        return Err("invalid date-time".into());
    }
    let wd = weekday(y, m, d);
    let mut out = String::new();
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let flag = match chars.peek() {
            Some(&f @ ('-' | '_' | '0' | '^')) => {
                chars.next();
                Some(f)
            }
            _ => None,
        };
        let Some(conv) = chars.next() else {
            out.push('%');
            break;
        };
        let num = |v: i64, width: usize, pad: char| -> String {
            match flag {
                Some('-') => v.to_string(),
                Some('_') => format!("{v:>width$}"),
                Some('0') => format!("{v:0>width$}"),
                _ if pad == ' ' => format!("{v:>width$}"),
                _ => format!("{v:0>width$}"),
            }
        };
        let hour12 = if now.hour % 12 == 0 {
            12
        } else {
            now.hour % 12
        } as i64;
        let text: String = match conv {
            'a' => DAYS[wd as usize][..3].to_string(),
            'A' => DAYS[wd as usize].to_string(),
            'b' | 'h' => MONTHS[m as usize - 1][..3].to_string(),
            'B' => MONTHS[m as usize - 1].to_string(),
            'c' => strftime("%a %b %e %H:%M:%S %Y", now)?,
            'C' => num(y.div_euclid(100), 2, '0'),
            'd' => num(d, 2, '0'),
            'D' | 'x' => strftime("%m/%d/%y", now)?,
            'e' => num(d, 2, ' '),
            'F' => strftime("%Y-%m-%d", now)?,
            'G' => iso_week(y, m, d).0.to_string(),
            'g' => num(iso_week(y, m, d).0.rem_euclid(100), 2, '0'),
            'H' => num(now.hour as i64, 2, '0'),
            'I' => num(hour12, 2, '0'),
            'j' => num(yday(y, m, d) + 1, 3, '0'),
            'k' => num(now.hour as i64, 2, ' '),
            'l' => num(hour12, 2, ' '),
            'm' => num(m, 2, '0'),
            'M' => num(now.minute as i64, 2, '0'),
            'n' => "\n".into(),
            'p' => if now.hour < 12 { "AM" } else { "PM" }.into(),
            'P' => if now.hour < 12 { "am" } else { "pm" }.into(),
            'r' => strftime("%I:%M:%S %p", now)?,
            'R' => strftime("%H:%M", now)?,
            'S' => num(now.second as i64, 2, '0'),
            't' => "\t".into(),
            'T' | 'X' => strftime("%H:%M:%S", now)?,
            'u' => (if wd == 0 { 7 } else { wd }).to_string(),
            'U' => num((yday(y, m, d) + 7 - wd) / 7, 2, '0'),
            'V' => num(iso_week(y, m, d).1, 2, '0'),
            'w' => wd.to_string(),
            'W' => num((yday(y, m, d) + 7 - (wd + 6) % 7) / 7, 2, '0'),
            'y' => num(y.rem_euclid(100), 2, '0'),
            'Y' => y.to_string(),
            'z' | 'Z' => String::new(),
            'f' => "000000".into(),
            '%' => "%".into(),
            other => return Err(format!("strftime directive %{other} is not supported")),
        };
        if flag == Some('^') {
            out.push_str(&text.to_uppercase());
        } else {
            out.push_str(&text);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_python() {
        let now = DateTime {
            year: 2025,
            month: 1,
            day: 30,
            hour: 12,
            minute: 5,
            second: 9,
        };
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S", &now).unwrap(),
            "2025-01-30 12:05:09"
        );
        assert_eq!(
            strftime("%d %b %Y, %A %B %j %p %I %e %-d %%", &now).unwrap(),
            "30 Jan 2025, Thursday January 030 PM 12 30 30 %"
        );
        assert_eq!(
            strftime("%G-W%V-%u %U %W", &now).unwrap(),
            "2025-W05-4 04 04"
        );
        let d = DateTime {
            year: 2021,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
        };
        assert_eq!(strftime("%G %V %a %I %p", &d).unwrap(), "2020 53 Fri 12 AM");
    }
}
