// Generated with unicode_ranges.rs from Oniguruma; see unicode.rs. Do not edit.
[
    ('s', '\u{17F}'),
]
