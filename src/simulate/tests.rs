use super::*;

fn run(name: &str, hours: u32, seed: u64) -> (Vec<TraceEntry>, SimulationStats) {
    let p = profile(name).unwrap();
    let mut sim = simulate(&p, hours, seed);
    let entries: Vec<TraceEntry> = sim.by_ref().collect();
    (entries, sim.stats().clone())
}

#[test]
fn simulate_is_deterministic_and_ordered() {
    let (a, sa) = run("small", 3, 11);
    let (b, sb) = run("small", 3, 11);
    assert_eq!(a, b);
    assert_eq!(sa, sb);
    assert_eq!(sa.entries, a.len() as u64);
    assert!(a.windows(2).all(|w| w[0].observed_at_ms <= w[1].observed_at_ms));
    let (c, _) = run("small", 3, 12);
    assert_ne!(a, c);
}

#[test]
fn simulate_unknown_profile_is_an_error() {
    assert_eq!(profile("huge").unwrap_err().reason(), "unknown_profile");
    assert!(check_hours(0).is_err());
    for name in PROFILES {
        assert_eq!(profile(name).unwrap().name, name);
    }
}
