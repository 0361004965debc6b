//! The wire format: Helsinki Region Transport's high-frequency positioning
//! (HFP v2) "vp" events, one MQTT message per vehicle position.
//!
//! Topic: `/hfp/v2/journey/ongoing/vp/bus/<oper>/<veh>/<route>/<dir>/<headsign>/<start>/<next_stop>/<geohash_level>/<geohash>/<sid>/`
//! Payload: `{"VP":{"desi":"55","dir":"1","oper":22,"veh":1043,"tst":"…Z","tsi":…,"spd":8.3,"hdg":120,"lat":60.17,"long":24.94,…}}`
//!
//! A vehicle is identified by `<oper>/<veh>` (operator and vehicle number,
//! without padding), as in HSL's own tools.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The topic filter that matches every vehicle position.
pub const TOPIC_FILTER: &str = "/hfp/v2/journey/ongoing/vp/#";

/// One position of one vehicle, as received.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Position {
    /// `<oper>/<veh>`.
    pub id: Arc<str>,
    /// Route id (`"1055"`).
    pub route: String,
    /// The line as shown to passengers (`"55"`).
    pub line: String,
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub long: f64,
    /// Speed, m/s.
    pub speed: f64,
    /// Heading, degrees clockwise from north.
    pub heading: f64,
    /// The vehicle's clock, ISO 8601 UTC with milliseconds.
    pub timestamp: String,
    /// The same instant in Unix seconds.
    pub tsi: i64,
}

/// Why a payload was rejected.
#[derive(Debug, Clone, PartialEq)]
pub enum Malformed {
    /// Not JSON, or not an object with a `VP` object inside.
    NotHfp(String),
    /// A required field (`oper`, `veh`, `lat`, `long`) is missing or null.
    Missing(&'static str),
    /// Latitude or longitude outside the globe.
    OutOfRange {
        /// Latitude as received.
        lat: f64,
        /// Longitude as received.
        long: f64,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::NotHfp(e) => write!(f, "not an HFP vehicle position: {e}"),
            Malformed::Missing(field) => write!(f, "required field `{field}` is missing"),
            Malformed::OutOfRange { lat, long } => {
                write!(f, "position lat={lat}, long={long} is outside the globe")
            }
        }
    }
}

impl std::error::Error for Malformed {}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "VP")]
    vp: Vp,
}

/// The fields of a `VP` object this service reads (the feed has more).
#[derive(Deserialize)]
struct Vp {
    #[serde(default)]
    desi: Option<String>,
    #[serde(default)]
    oper: Option<u32>,
    #[serde(default)]
    veh: Option<u32>,
    #[serde(default)]
    tst: Option<String>,
    #[serde(default)]
    tsi: Option<i64>,
    #[serde(default)]
    spd: Option<f64>,
    #[serde(default)]
    hdg: Option<f64>,
    #[serde(default)]
    lat: Option<f64>,
    #[serde(default)]
    long: Option<f64>,
    #[serde(default)]
    route: Option<String>,
}

/// Parses one payload.
///
/// ```
/// let p = realtime_map::hfp::parse(br#"{"VP":{"oper":22,"veh":1043,"lat":60.17,"long":24.94,"desi":"55","route":"1055"}}"#).unwrap();
/// assert_eq!(&*p.id, "22/1043");
/// assert!(realtime_map::hfp::parse(b"{}").is_err());
/// ```
pub fn parse(payload: &[u8]) -> Result<Position, Malformed> {
    let Envelope { vp } =
        serde_json::from_slice(payload).map_err(|e| Malformed::NotHfp(e.to_string()))?;
    let oper = vp.oper.ok_or(Malformed::Missing("oper"))?;
    let veh = vp.veh.ok_or(Malformed::Missing("veh"))?;
    let lat = vp.lat.ok_or(Malformed::Missing("lat"))?;
    let long = vp.long.ok_or(Malformed::Missing("long"))?;
    if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&long) {
        return Err(Malformed::OutOfRange { lat, long });
    }
    Ok(Position {
        id: format!("{oper}/{veh}").into(),
        route: vp.route.unwrap_or_default(),
        line: vp.desi.unwrap_or_default(),
        lat,
        long,
        speed: vp.spd.unwrap_or(0.0),
        heading: vp.hdg.unwrap_or(0.0),
        timestamp: vp.tst.unwrap_or_default(),
        tsi: vp.tsi.unwrap_or(0),
    })
}

/// What a publisher knows about a vehicle at one instant.
pub struct Report<'a> {
    /// Operator id.
    pub oper: u32,
    /// Vehicle number.
    pub veh: u32,
    /// Route id.
    pub route: &'a str,
    /// Line shown to passengers.
    pub line: &'a str,
    /// Direction, 1 or 2.
    pub dir: u8,
    /// Destination shown on the bus.
    pub headsign: &'a str,
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub long: f64,
    /// Speed, m/s.
    pub speed: f64,
    /// Heading, degrees.
    pub heading: f64,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: i64,
}

impl Report<'_> {
    /// The topic of this report, as the HSL feed names it.
    pub fn topic(&self) -> String {
        let geo = geohash_part(self.lat, self.long);
        format!(
            "/hfp/v2/journey/ongoing/vp/bus/{:04}/{:05}/{}/{}/{}/{}/{}/4/{}/",
            self.oper,
            self.veh,
            self.route,
            self.dir,
            self.headsign,
            start_time(self.unix_ms),
            1_130_100 + (self.veh % 97),
            geo,
        )
    }

    /// The JSON payload.
    pub fn payload(&self) -> Vec<u8> {
        let (date, time) = utc(self.unix_ms);
        let json = serde_json::json!({
            "VP": {
                "desi": self.line,
                "dir": self.dir.to_string(),
                "oper": self.oper,
                "veh": self.veh,
                "tst": format!("{date}T{time}Z"),
                "tsi": self.unix_ms.div_euclid(1000),
                "spd": (self.speed * 100.0).round() / 100.0,
                "hdg": self.heading.round() as i64,
                "lat": (self.lat * 1e6).round() / 1e6,
                "long": (self.long * 1e6).round() / 1e6,
                "acc": 0.0,
                "dl": 0,
                "odo": null,
                "drst": 0,
                "oday": date,
                "jrn": self.veh,
                "line": self.line.parse::<u32>().unwrap_or(0),
                "start": start_time(self.unix_ms),
                "loc": "GPS",
                "stop": null,
                "route": self.route,
                "occu": 0
            }
        });
        json.to_string().into_bytes()
    }
}

/// HSL's topic carries a coarse geohash as `60;24/19/84/27` (integer
/// degrees, then one decimal digit of lat and long per level).
fn geohash_part(lat: f64, long: f64) -> String {
    let digits = |x: f64, n: u32| ((x.abs().fract() * 10f64.powi(n as i32)) as u64 % 10) as u8;
    format!(
        "{};{}/{}{}/{}{}/{}{}",
        lat.trunc() as i64,
        long.trunc() as i64,
        digits(lat, 1),
        digits(long, 1),
        digits(lat, 2),
        digits(long, 2),
        digits(lat, 3),
        digits(long, 3),
    )
}

/// The journey's start time, `HH:MM` (the half hour the report falls in).
fn start_time(unix_ms: i64) -> String {
    let (_, time) = utc(unix_ms);
    let minute: u32 = time[3..5].parse().unwrap_or(0);
    format!("{}:{:02}", &time[..2], minute / 30 * 30)
}

/// `(YYYY-MM-DD, HH:MM:SS.mmm)` in UTC, without a date library.
pub fn utc(unix_ms: i64) -> (String, String) {
    let days = unix_ms.div_euclid(86_400_000);
    let ms_of_day = unix_ms.rem_euclid(86_400_000);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, rest) = (ms_of_day / 3_600_000, ms_of_day % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, ms) = (rest / 1000, rest % 1000);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{h:02}:{m:02}:{s:02}.{ms:03}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report<'static> {
        Report {
            oper: 22,
            veh: 1043,
            route: "1055",
            line: "55",
            dir: 1,
            headsign: "Rautatientori",
            lat: 60.171234,
            long: 24.941234,
            speed: 8.3,
            heading: 120.0,
            // 2026-11-21T08:00:00.123Z
            unix_ms: 1_795_248_000_123,
        }
    }

    #[test]
    fn a_published_report_parses_back_to_the_same_position() {
        let r = report();
        let p = parse(&r.payload()).expect("our own payload parses");
        assert_eq!(&*p.id, "22/1043");
        assert_eq!(p.route, "1055");
        assert_eq!(p.line, "55");
        assert_eq!((p.lat, p.long), (60.171234, 24.941234));
        assert_eq!((p.speed, p.heading), (8.3, 120.0));
        assert_eq!(p.timestamp, "2026-11-21T08:00:00.123Z");
        assert_eq!(p.tsi, 1_795_248_000);
    }

    #[test]
    fn topics_follow_the_hsl_layout() {
        assert_eq!(
            report().topic(),
            "/hfp/v2/journey/ongoing/vp/bus/0022/01043/1055/1/Rautatientori/08:00/1130173/4/60;24/19/74/11/"
        );
    }

    #[test]
    fn utc_formatting_handles_leap_years_and_the_epoch() {
        assert_eq!(utc(0), ("1970-01-01".into(), "00:00:00.000".into()));
        // 2024-02-29T23:59:59.999Z
        assert_eq!(
            utc(1_709_251_199_999),
            ("2024-02-29".into(), "23:59:59.999".into())
        );
    }

    #[test]
    fn malformed_payloads_say_why() {
        assert!(matches!(parse(b"not json"), Err(Malformed::NotHfp(_))));
        assert!(matches!(parse(br#"{"XX":{}}"#), Err(Malformed::NotHfp(_))));
        assert_eq!(
            parse(br#"{"VP":{"veh":1,"lat":60.0,"long":24.0}}"#),
            Err(Malformed::Missing("oper"))
        );
        assert_eq!(
            parse(br#"{"VP":{"oper":1,"veh":1,"lat":null,"long":24.0}}"#),
            Err(Malformed::Missing("lat"))
        );
        assert!(matches!(
            parse(br#"{"VP":{"oper":1,"veh":1,"lat":95.0,"long":24.0}}"#),
            Err(Malformed::OutOfRange { .. })
        ));
        let msg = parse(br#"{"VP":{"oper":1,"lat":60.0,"long":24.0}}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(msg, "required field `veh` is missing");
    }
}
