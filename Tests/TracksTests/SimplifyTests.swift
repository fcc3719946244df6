import Testing

@testable import Tracks

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct SimplifyTests {
    /// A day at one fix a minute: a drive, a two-hour stay, a drive back. Thinned to far fewer
    /// points, with both ends of the stay kept.
    @Test func simplifyingKeepsWhereTheDeviceStayed() {
        var points: [TrackPoint] = []
        var micros: Int64 = 0
        func add(_ latitude: Double, _ longitude: Double, accuracy: Double = 10) {
            points.append(
                TrackPoint(
                    latitude: latitude, longitude: longitude, accuracyMeters: accuracy,
                    recordedAtMicros: micros))
            micros += 60_000_000
        }
        for step in 0..<600 { add(52.5 + Double(step) * 0.0005, 13.4 + sin(Double(step) / 40) * 0.001) }
        for step in 0..<120 { add(52.8 + Double(step % 3) * 0.00001, 13.4) }
        for step in 1...600 { add(52.8 - Double(step) * 0.0005, 13.4) }
        let kept = TrackSimplifier().keep(points)
        #expect(kept.count < points.count / 5)
        #expect(kept.first == 0 && kept.last == points.count - 1)
        let stay = summarizeStays(points).compactMap { if case .stay(let stay) = $0 { stay } else { nil } }
        #expect(stay.count == 1)
        #expect(kept.contains(stay[0].firstIndex) && kept.contains(stay[0].lastIndex))
        #expect(kept == kept.sorted())
        // A short track is drawn whole.
        #expect(TrackSimplifier().keep(Array(points.prefix(100))) == Array(0..<100))
    }

    /// A straight street walked with a phone whose fixes wander 25 m either side but say ±60 m:
    /// nothing off the line is surer than the line, so the walk is drawn as its two ends; the same
    /// wander from fixes that claim ±3 m is kept as drawn.
    @Test func wanderWithinTheFixesOwnAccuracyIsDropped() {
        func street(accuracy: Double) -> [TrackPoint] {
            (0..<1_000).map { step in
                let side = (step % 2 == 0 ? 1.0 : -1.0) * 25 / 111_195
                return TrackPoint(
                    latitude: 52.5 + side, longitude: 13.4 + Double(step) * 0.0001, accuracyMeters: accuracy,
                    recordedAtMicros: Int64(step) * 10_000_000)
            }
        }
        #expect(TrackSimplifier().keep(street(accuracy: 60)).count == 2)
        #expect(TrackSimplifier().keep(street(accuracy: 3)).count > 900)
    }
}
