//! A stand-in for HSL's live feed: buses driving along a sketch of
//! Helsinki's bus network, each reporting its position once a second.
//!
//! Deterministic for a seed: bus `i` always has the same operator, number,
//! route and starting point, so tests and benchmarks can name vehicles.

use crate::hfp::Report;
use rumqttc::{AsyncClient, QoS};
use serde::Serialize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// A place on the map, degrees.
type Point = (f64, f64);

const RAUTATIENTORI: Point = (60.1710, 24.9414);
const KAMPPI: Point = (60.1690, 24.9320);
const EROTTAJA: Point = (60.1665, 24.9430);
const KAUPPATORI: Point = (60.1675, 24.9525);
const KAIVOPUISTO: Point = (60.1575, 24.9560);
const EIRA: Point = (60.1565, 24.9385);
const RUOHOLAHTI: Point = (60.1635, 24.9150);
const LAUTTASAARI: Point = (60.1590, 24.8760);
const MUNKKINIEMI: Point = (60.1985, 24.8780);
const TOOLO: Point = (60.1835, 24.9235);
const MEILAHTI: Point = (60.1900, 24.9050);
const PASILA: Point = (60.1987, 24.9335);
const HAKANIEMI: Point = (60.1790, 24.9510);
const SORNAINEN: Point = (60.1870, 24.9605);
const KALASATAMA: Point = (60.1875, 24.9770);
const VALLILA: Point = (60.1950, 24.9560);
const ARABIANRANTA: Point = (60.2065, 24.9800);
const KAPYLA: Point = (60.2150, 24.9505);
const OULUNKYLA: Point = (60.2290, 24.9665);
const MAUNULA: Point = (60.2300, 24.9250);
const PAKILA: Point = (60.2450, 24.9450);
const MALMI: Point = (60.2510, 25.0110);
const VIIKKI: Point = (60.2270, 25.0140);
const KULOSAARI: Point = (60.1880, 25.0070);
const HERTTONIEMI: Point = (60.1950, 25.0300);
const SIILITIE: Point = (60.2050, 25.0445);
const ITAKESKUS: Point = (60.2103, 25.0820);
const KONTULA: Point = (60.2360, 25.0830);
const VUOSAARI: Point = (60.2080, 25.1420);
const JAKOMAKI: Point = (60.2600, 25.0850);
const HAAGA: Point = (60.2200, 24.8950);
const PITAJANMAKI: Point = (60.2220, 24.8600);
const KANNELMAKI: Point = (60.2400, 24.8800);
const LEPPAVAARA: Point = (60.2190, 24.8130);
const OTANIEMI: Point = (60.1840, 24.8290);
const TAPIOLA: Point = (60.1750, 24.8050);
const MYYRMAKI: Point = (60.2610, 24.8540);
const TIKKURILA: Point = (60.2920, 25.0440);
const LENTOASEMA: Point = (60.3172, 24.9633);

/// A bus line: where it runs, as a polyline between stops.
#[derive(Serialize)]
pub struct Route {
    /// HSL-style route id.
    pub id: &'static str,
    /// The line shown to passengers.
    pub line: &'static str,
    /// Destinations at either end: direction 1 heads to the last, 2 to the first.
    pub ends: (&'static str, &'static str),
    /// `(lat, long)` of each stop along the way.
    pub stops: &'static [Point],
}

/// The simulated network.
pub static ROUTES: &[Route] = &[
    Route {
        id: "1014",
        line: "14",
        ends: ("Ruoholahti", "Munkkiniemi"),
        stops: &[RUOHOLAHTI, KAMPPI, TOOLO, MEILAHTI, MUNKKINIEMI],
    },
    Route {
        id: "1016",
        line: "16",
        ends: ("Rautatientori", "Arabianranta"),
        stops: &[
            RAUTATIENTORI,
            HAKANIEMI,
            SORNAINEN,
            KALASATAMA,
            ARABIANRANTA,
        ],
    },
    Route {
        id: "1018",
        line: "18",
        ends: ("Eira", "Munkkiniemi"),
        stops: &[EIRA, KAMPPI, TOOLO, MEILAHTI, MUNKKINIEMI],
    },
    Route {
        id: "1020",
        line: "20",
        ends: ("Kauppatori", "Lauttasaari"),
        stops: &[KAUPPATORI, RAUTATIENTORI, KAMPPI, RUOHOLAHTI, LAUTTASAARI],
    },
    Route {
        id: "1021",
        line: "21",
        ends: ("Lauttasaari", "Erottaja"),
        stops: &[LAUTTASAARI, RUOHOLAHTI, KAMPPI, EROTTAJA],
    },
    Route {
        id: "1023",
        line: "23",
        ends: ("Rautatientori", "Maunula"),
        stops: &[RAUTATIENTORI, TOOLO, PASILA, MAUNULA],
    },
    Route {
        id: "1024",
        line: "24",
        ends: ("Kaivopuisto", "Töölö"),
        stops: &[KAIVOPUISTO, KAUPPATORI, EROTTAJA, KAMPPI, TOOLO],
    },
    Route {
        id: "1039",
        line: "39",
        ends: ("Kamppi", "Kannelmäki"),
        stops: &[KAMPPI, MEILAHTI, HAAGA, KANNELMAKI],
    },
    Route {
        id: "1040",
        line: "40",
        ends: ("Rautatientori", "Pitäjänmäki"),
        stops: &[RAUTATIENTORI, TOOLO, HAAGA, PITAJANMAKI],
    },
    Route {
        id: "1055",
        line: "55",
        ends: ("Rautatientori", "Oulunkylä"),
        stops: &[RAUTATIENTORI, HAKANIEMI, VALLILA, KAPYLA, OULUNKYLA],
    },
    Route {
        id: "1057",
        line: "57",
        ends: ("Munkkiniemi", "Viikki"),
        stops: &[MUNKKINIEMI, PASILA, VALLILA, ARABIANRANTA, VIIKKI],
    },
    Route {
        id: "1058",
        line: "58",
        ends: ("Itäkeskus", "Meilahti"),
        stops: &[ITAKESKUS, HERTTONIEMI, KALASATAMA, PASILA, MEILAHTI],
    },
    Route {
        id: "1059",
        line: "59",
        ends: ("Pasila", "Malmi"),
        stops: &[PASILA, KAPYLA, OULUNKYLA, PAKILA, MALMI],
    },
    Route {
        id: "1065",
        line: "65",
        ends: ("Rautatientori", "Pakila"),
        stops: &[RAUTATIENTORI, PASILA, MAUNULA, PAKILA],
    },
    Route {
        id: "1069",
        line: "69",
        ends: ("Kalasatama", "Jakomäki"),
        stops: &[KALASATAMA, ARABIANRANTA, VIIKKI, MALMI, JAKOMAKI],
    },
    Route {
        id: "1070",
        line: "70",
        ends: ("Rautatientori", "Malmi"),
        stops: &[RAUTATIENTORI, SORNAINEN, KAPYLA, OULUNKYLA, MALMI],
    },
    Route {
        id: "1078",
        line: "78",
        ends: ("Rautatientori", "Siilitie"),
        stops: &[
            RAUTATIENTORI,
            HAKANIEMI,
            KALASATAMA,
            KULOSAARI,
            HERTTONIEMI,
            SIILITIE,
        ],
    },
    Route {
        id: "1090",
        line: "90",
        ends: ("Itäkeskus", "Vuosaari"),
        stops: &[ITAKESKUS, VUOSAARI],
    },
    Route {
        id: "1091",
        line: "91",
        ends: ("Itäkeskus", "Jakomäki"),
        stops: &[ITAKESKUS, KONTULA, JAKOMAKI],
    },
    Route {
        id: "1095",
        line: "95",
        ends: ("Itäkeskus", "Malmi"),
        stops: &[ITAKESKUS, SIILITIE, VIIKKI, MALMI],
    },
    Route {
        id: "2102",
        line: "102",
        ends: ("Kamppi", "Tapiola"),
        stops: &[KAMPPI, RUOHOLAHTI, OTANIEMI, TAPIOLA],
    },
    Route {
        id: "2110",
        line: "110",
        ends: ("Kamppi", "Leppävaara"),
        stops: &[KAMPPI, MUNKKINIEMI, OTANIEMI, LEPPAVAARA],
    },
    Route {
        id: "4550",
        line: "550",
        ends: ("Itäkeskus", "Tapiola"),
        stops: &[
            ITAKESKUS,
            SIILITIE,
            VIIKKI,
            OULUNKYLA,
            MAUNULA,
            HAAGA,
            PITAJANMAKI,
            LEPPAVAARA,
            OTANIEMI,
            TAPIOLA,
        ],
    },
    Route {
        id: "4560",
        line: "560",
        ends: ("Vuosaari", "Myyrmäki"),
        stops: &[VUOSAARI, KONTULA, MALMI, PAKILA, KANNELMAKI, MYYRMAKI],
    },
    Route {
        id: "4600",
        line: "600",
        ends: ("Rautatientori", "Lentoasema"),
        stops: &[RAUTATIENTORI, PASILA, KAPYLA, MALMI, TIKKURILA, LENTOASEMA],
    },
    Route {
        id: "4615",
        line: "615",
        ends: ("Rautatientori", "Lentoasema"),
        stops: &[RAUTATIENTORI, PASILA, OULUNKYLA, TIKKURILA, LENTOASEMA],
    },
];

/// HSL operator ids the buses are spread over.
const OPERATORS: [u32; 8] = [6, 12, 17, 18, 22, 30, 40, 47];

/// Metres per degree of latitude.
const M_PER_DEG: f64 = 111_320.0;

/// SplitMix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }
}

/// One simulated bus.
struct Bus {
    oper: u32,
    veh: u32,
    route: &'static Route,
    /// Metres along the route from its first stop.
    along: f64,
    /// +1 towards the last stop (direction 1), -1 back (direction 2).
    heading_forward: bool,
    cruise: f64,
    /// Seconds left standing at a stop.
    dwell: f64,
    /// Metres until the next stop call.
    to_next_stop: f64,
}

/// The length of each leg of a route, in metres.
fn legs(route: &Route) -> impl Iterator<Item = f64> + '_ {
    route.stops.windows(2).map(|w| distance(w[0], w[1]))
}

fn distance(a: Point, b: Point) -> f64 {
    let dy = (b.0 - a.0) * M_PER_DEG;
    let dx = (b.1 - a.1) * M_PER_DEG * a.0.to_radians().cos();
    dx.hypot(dy)
}

/// Where a bus `along` metres down `route` is, and the bearing of that leg.
fn locate(route: &Route, along: f64) -> (Point, f64) {
    let last = route.stops.len() - 2;
    let mut left = along;
    for (i, (w, len)) in route.stops.windows(2).zip(legs(route)).enumerate() {
        if left <= len || i == last {
            let t = if len > 0.0 {
                (left / len).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let p = (
                w[0].0 + (w[1].0 - w[0].0) * t,
                w[0].1 + (w[1].1 - w[0].1) * t,
            );
            let dy = w[1].0 - w[0].0;
            let dx = (w[1].1 - w[0].1) * w[0].0.to_radians().cos();
            let bearing = dx.atan2(dy).to_degrees().rem_euclid(360.0);
            return (p, bearing);
        }
        left -= len;
    }
    (route.stops[0], 0.0)
}

/// The whole simulated fleet.
pub struct Simulation {
    buses: Vec<Bus>,
    rng: Rng,
}

impl Simulation {
    /// `vehicles` buses, placed by `seed`.
    pub fn new(vehicles: usize, seed: u64) -> Self {
        let mut rng = Rng(seed);
        let buses = (0..vehicles)
            .map(|i| {
                let route = &ROUTES[i % ROUTES.len()];
                let length: f64 = legs(route).sum();
                Bus {
                    oper: OPERATORS[i % OPERATORS.len()],
                    veh: 100 + i as u32,
                    route,
                    along: rng.range(0.0, length),
                    heading_forward: rng.next() % 2 == 0,
                    cruise: rng.range(6.0, 12.0),
                    dwell: 0.0,
                    to_next_stop: rng.range(100.0, 500.0),
                }
            })
            .collect();
        Simulation { buses, rng }
    }

    /// The ids (`<oper>/<veh>`) of the simulated vehicles.
    pub fn ids(&self) -> Vec<String> {
        self.buses
            .iter()
            .map(|b| format!("{}/{}", b.oper, b.veh))
            .collect()
    }

    /// How many buses.
    pub fn len(&self) -> usize {
        self.buses.len()
    }

    /// True when there are no buses.
    pub fn is_empty(&self) -> bool {
        self.buses.is_empty()
    }

    /// Moves bus `i` on by `dt` seconds and reports where it is now.
    pub fn step(&mut self, i: usize, dt: f64, unix_ms: i64) -> Report<'static> {
        let rng = &mut self.rng;
        let bus = &mut self.buses[i];
        let route = bus.route;
        let length: f64 = legs(route).sum();
        let mut speed = 0.0;
        if bus.dwell > 0.0 {
            bus.dwell -= dt;
        } else {
            speed = bus.cruise * rng.range(0.8, 1.2);
            let moved = speed * dt;
            bus.to_next_stop -= moved;
            bus.along += if bus.heading_forward { moved } else { -moved };
            if bus.along >= length || bus.along <= 0.0 {
                // Terminus: turn round and wait for the next departure.
                bus.along = bus.along.clamp(0.0, length);
                bus.heading_forward = !bus.heading_forward;
                bus.dwell = rng.range(20.0, 60.0);
                speed = 0.0;
            } else if bus.to_next_stop <= 0.0 {
                bus.dwell = rng.range(5.0, 20.0);
                bus.to_next_stop = rng.range(250.0, 600.0);
            }
        }
        let ((lat, long), bearing) = locate(route, bus.along);
        // GPS noise of a few metres.
        let lat = lat + rng.range(-3.0, 3.0) / M_PER_DEG;
        let long = long + rng.range(-3.0, 3.0) / (M_PER_DEG * lat.to_radians().cos());
        let (heading, dir, headsign) = if bus.heading_forward {
            (bearing, 1, route.ends.1)
        } else {
            ((bearing + 180.0) % 360.0, 2, route.ends.0)
        };
        Report {
            oper: bus.oper,
            veh: bus.veh,
            route: route.id,
            line: route.line,
            dir,
            headsign,
            lat,
            long,
            speed,
            heading,
            unix_ms,
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Publishes every bus's position once per `period` through `client`,
/// spread evenly over the period, until `stop` turns true.
pub async fn publish(
    client: AsyncClient,
    mut sim: Simulation,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) {
    const SLOTS: u32 = 100;
    let mut tick = tokio::time::interval(period / SLOTS);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut slot = 0usize;
    let dt = period.as_secs_f64();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = now_ms();
        for i in (slot..sim.len()).step_by(SLOTS as usize) {
            let report = sim.step(i, dt, now);
            let (topic, payload) = (report.topic(), report.payload());
            if client
                .publish(topic, QoS::AtMostOnce, false, payload)
                .await
                .is_err()
            {
                // The client's event loop is gone: we are shutting down.
                return;
            }
        }
        slot = (slot + 1) % SLOTS as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hfp;

    #[test]
    fn the_same_seed_gives_the_same_buses_and_moves() {
        let mut a = Simulation::new(50, 7);
        let mut b = Simulation::new(50, 7);
        assert_eq!(a.ids(), b.ids());
        for step in 0..20 {
            for i in 0..50 {
                let t = 1_795_248_000_000 + step * 1000;
                assert_eq!(a.step(i, 1.0, t).payload(), b.step(i, 1.0, t).payload());
            }
        }
    }

    /// A user pastes the README's `/vehicle?id=..` into a browser against
    /// the default service: that bus must exist.
    #[test]
    fn the_readme_s_example_vehicle_exists_in_the_default_simulation() {
        let readme = include_str!("../../../README.md");
        let defaults = crate::app::SimulatorConfig::default();
        let ids = Simulation::new(defaults.vehicles, defaults.seed).ids();
        let examples: Vec<&str> = readme
            .split("/vehicle?id=")
            .skip(1)
            .map(|rest| rest.split(['`', ' ', '&']).next().unwrap())
            .collect();
        assert!(!examples.is_empty(), "the README shows a /vehicle example");
        for id in examples {
            assert!(ids.iter().any(|i| i == id), "no bus {id} by default");
        }
    }

    #[test]
    fn ids_are_unique_and_buses_stay_near_their_route() {
        let mut ids = Simulation::new(2_000, 1).ids();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 2_000);
        // Ten buses on every route.
        let mut sim = Simulation::new(10 * ROUTES.len(), 1);
        // Greater Helsinki, with margin for GPS noise; a minute of moves
        // takes most buses past a stop or a terminus.
        for _ in 0..60 {
            for i in 0..sim.len() {
                let r = sim.step(i, 1.0, 0);
                let p = hfp::parse(&r.payload()).expect("simulated payloads are valid");
                assert!((60.15..=60.32).contains(&p.lat), "{p:?}");
                assert!((24.80..=25.15).contains(&p.long), "{p:?}");
                assert!((0.0..=14.4).contains(&p.speed), "{p:?}");
            }
        }
    }

    #[test]
    fn buses_move_between_reports() {
        let mut sim = Simulation::new(26, 3);
        let first: Vec<_> = (0..26)
            .map(|i| sim.step(i, 1.0, 0))
            .map(|r| (r.lat, r.long))
            .collect();
        let mut later = first.clone();
        for _ in 0..60 {
            later = (0..26)
                .map(|i| sim.step(i, 1.0, 0))
                .map(|r| (r.lat, r.long))
                .collect();
        }
        let moved = first
            .iter()
            .zip(&later)
            .filter(|(a, b)| distance(**a, **b) > 50.0)
            .count();
        assert!(moved >= 13, "only {moved} of 26 buses moved over a minute");
    }
}
