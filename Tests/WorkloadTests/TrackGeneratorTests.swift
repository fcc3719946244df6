import Events
import Testing
import Workload

/// The synthetic tracks the benchmarks and tests are built on: the same seed gives the same track,
/// and every fix is one a phone could send.
@Suite struct TrackGeneratorTests {
    static let startMicros: Int64 = 1_800_000_000_000_000

    @Test func theSameSeedGivesTheSameTrackAndAnotherSeedAnother() {
        var first = TrackGenerator(seed: 42, startMicros: Self.startMicros)
        var again = TrackGenerator(seed: 42, startMicros: Self.startMicros)
        var other = TrackGenerator(seed: 43, startMicros: Self.startMicros)
        let track = first.next(2_000)
        #expect(track == again.next(2_000))
        let otherTrack = other.next(2_000)
        #expect(track != otherTrack)
        #expect(zip(track, otherTrack).filter { $0.latitude == $1.latitude }.count < 10)
        // Taking fixes one at a time or in batches is the same track.
        var single = TrackGenerator(seed: 42, startMicros: Self.startMicros)
        #expect((0..<2_000).map { _ in single.next() } == track)
    }

    @Test(arguments: [1, 2, 3, 0xDEAD_BEEF, UInt64.max])
    func everyFixIsOnePhoneCouldSend(seed: UInt64) {
        var generator = TrackGenerator(seed: seed, startMicros: Self.startMicros)
        let track = generator.next(20_000)
        var previousMicros = Self.startMicros
        for fix in track {
            // Coordinates on the globe and, for the starting region (central Europe), near it.
            #expect((40...62).contains(fix.latitude) && (-2...23).contains(fix.longitude), "\(fix)")
            #expect((fix.latitude * 1e7).rounded() / 1e7 == fix.latitude, "7 decimals, as phones send")
            #expect((fix.longitude * 1e7).rounded() / 1e7 == fix.longitude)
            #expect([3, 5, 8, 10, 12, 16, 32, 65].contains(fix.accuracyMeters))
            let altitude = fix.altitudeMeters ?? .nan
            #expect((-500...2_000).contains(altitude) && (altitude * 10).rounded() / 10 == altitude)
            #expect((0...100).contains(fix.batteryPercent ?? 255) && fix.isCharging != nil)
            #expect(!fix.clockSuspect)
            // Standing still is a visit with no motion; moving has a speed and a heading.
            if fix.source == "visit" {
                #expect(fix.speedMetersPerSecond == nil && fix.headingDegrees == nil)
            } else {
                #expect(fix.source == "significant")
                #expect((0...60).contains(fix.speedMetersPerSecond ?? -1))
                #expect((0..<360).contains(fix.headingDegrees ?? -1))
            }
            // Time moves forward by a phone's interval: 5 s driving to 5 min standing, ±10 %.
            let interval = fix.recordedAtMicros - previousMicros
            #expect((4_500_000...330_000_000).contains(interval), "interval \(interval) µs")
            previousMicros = fix.recordedAtMicros
        }
        #expect(generator.timeMicros == track.last!.recordedAtMicros)
        // The three modes all occur over a long track.
        #expect(Set(track.map(\.source)) == ["visit", "significant"])
        #expect(
            track.contains { ($0.speedMetersPerSecond ?? 0) > 5 }
                && track.contains { $0.accuracyMeters == 65 })
    }

    @Test func theSeededGeneratorReplaysAndItsGaussianIsStandard() {
        var first = SeededGenerator(seed: 7)
        var again = SeededGenerator(seed: 7)
        let values = (0..<1_000).map { _ in first.next() }
        #expect(values == (0..<1_000).map { _ in again.next() })
        #expect(Set(values).count == values.count)
        var normal = SeededGenerator(seed: 7)
        let samples = (0..<100_000).map { _ in normal.gaussian() }
        let mean = samples.reduce(0, +) / Double(samples.count)
        let variance = samples.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(samples.count)
        #expect(abs(mean) < 0.02 && abs(variance - 1) < 0.03, "mean \(mean), variance \(variance)")
        #expect(samples.allSatisfy { $0.isFinite && abs($0) < 7 })
    }
}
