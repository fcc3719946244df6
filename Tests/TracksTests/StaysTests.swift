import Testing

@testable import Tracks

/// Tracks written as a day of someone's life: a place, a walk, another place. Noise comes from a
/// fixed generator, so every run sees the same track.
struct DayBuilder {
    var points: [TrackPoint] = []
    var micros: Int64 = 1_764_547_200_000_000  // 2025-12-01T00:00:00Z
    var random = 0x2545_F491_4F6C_DD1D as UInt64

    mutating func noise() -> Double {
        random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Double(random >> 11) / Double(1 << 53) * 2 - 1
    }

    /// Fixes at one place every `everySeconds` for `minutes`, scattered by up to `jitterMeters`.
    mutating func stay(
        at place: (Double, Double), minutes: Int, everySeconds: Int = 60, jitterMeters: Double = 15,
        accuracy: Double = 15
    ) {
        for _ in 0..<(minutes * 60 / everySeconds) {
            let north = noise() * jitterMeters
            let east = noise() * jitterMeters
            points.append(
                TrackPoint(
                    latitude: place.0 + north / 111_195, longitude: place.1 + east / (111_195 * 0.6),
                    accuracyMeters: accuracy, recordedAtMicros: micros))
            micros += Int64(everySeconds) * 1_000_000
        }
    }

    /// A straight walk from one place to another, a fix every `everySeconds`.
    mutating func walk(from: (Double, Double), to: (Double, Double), minutes: Int, everySeconds: Int = 30) {
        let steps = minutes * 60 / everySeconds
        for step in 1..<steps {
            let t = Double(step) / Double(steps)
            points.append(
                TrackPoint(
                    latitude: from.0 + (to.0 - from.0) * t, longitude: from.1 + (to.1 - from.1) * t,
                    accuracyMeters: 8, recordedAtMicros: micros))
            micros += Int64(everySeconds) * 1_000_000
        }
    }

    mutating func silence(minutes: Int) { micros += Int64(minutes) * 60_000_000 }
}

let home = (52.5200, 13.4050)
let office = (52.5380, 13.4050)  // 2 km north

func stays(_ segments: [DaySegment]) -> [Stay] {
    segments.compactMap { if case .stay(let stay) = $0 { stay } else { nil } }
}

func moves(_ segments: [DaySegment]) -> [Move] {
    segments.compactMap { if case .move(let move) = $0 { move } else { nil } }
}

func kinds(_ segments: [DaySegment]) -> String {
    segments.map { if case .stay = $0 { "stay" } else { "move" } }.joined(separator: ",")
}

@Suite struct StaysTests {
    @Test func twoPlacesAndTheWalkBetween() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 30)
        day.walk(from: home, to: office, minutes: 20)
        day.stay(at: office, minutes: 40)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay,move,stay")
        let found = stays(segments)
        #expect(Geodesy.distanceMeters(found[0].latitude, found[0].longitude, home.0, home.1) < 25)
        #expect(Geodesy.distanceMeters(found[1].latitude, found[1].longitude, office.0, office.1) < 25)
        // The walk's first steps are within the stay's circle (100 m): a stay ends where leaving shows.
        #expect((30...33).contains(found[0].fixCount))
        #expect(found[0].startMicros == day.points[0].recordedAtMicros)
        let move = moves(segments)[0]
        #expect(move.startMicros == found[0].endMicros)
        #expect(move.endMicros == found[1].startMicros)
        // 2 km as the crow flies, less the steps inside the two stays' circles.
        #expect(move.distanceMeters > 1_700 && move.distanceMeters < 2_100)
        #expect(!move.hasGap)
    }

    @Test func jitterAtAStayIsOneStay() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 120, jitterMeters: 70, accuracy: 40)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay")
        #expect(stays(segments)[0].fixCount == 120)
        #expect(stays(segments)[0].radiusMeters <= 100)
    }

    @Test func aCoarseFixInTheMiddleOfAStayIsLeftOut() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 30)
        // A cell tower's answer: 3 km away, 3 km sure.
        day.points.append(
            TrackPoint(
                latitude: home.0 + 0.027, longitude: home.1, accuracyMeters: 3_000,
                recordedAtMicros: day.micros))
        day.micros += 60_000_000
        day.stay(at: home, minutes: 30)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay")
        #expect(stays(segments)[0].fixCount == 60)
    }

    @Test func aSingleJumpAwayIsAnOutlierNotATrip() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 30)
        // A GPS jump 3 km away that claims 10 m: one fix, and the next is home again.
        day.points.append(
            TrackPoint(
                latitude: home.0 + 0.027, longitude: home.1, accuracyMeters: 10, recordedAtMicros: day.micros)
        )
        day.micros += 60_000_000
        day.stay(at: home, minutes: 30)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay")
        #expect(stays(segments)[0].fixCount == 60)
        #expect(stays(segments)[0].lastIndex == day.points.count - 1)
    }

    @Test func silenceAtOnePlaceIsStillTheStay() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 10)
        day.silence(minutes: 180)
        day.stay(at: home, minutes: 10)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay")
        let stay = stays(segments)[0]
        #expect(stay.endMicros - stay.startMicros > 190 * 60_000_000)
    }

    @Test func silenceBetweenTwoPlacesIsAMoveWithAGap() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 20)
        day.silence(minutes: 120)
        day.stay(at: office, minutes: 20)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay,move,stay")
        let move = moves(segments)[0]
        #expect(move.fixCount == 0)
        #expect(move.hasGap)
        #expect(move.distanceMeters > 1_900)
    }

    @Test func fixesWithASuspectClockAreLeftOut() {
        var day = DayBuilder()
        day.stay(at: home, minutes: 30)
        // The device's clock jumped a day ahead for a while, and its fixes put it elsewhere.
        for minute in 0..<5 {
            day.points.append(
                TrackPoint(
                    latitude: office.0, longitude: office.1, accuracyMeters: 10,
                    recordedAtMicros: day.micros + 86_400_000_000 + Int64(minute) * 60_000_000,
                    clockSuspect: true))
        }
        day.stay(at: home, minutes: 30)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay")
        #expect(stays(segments)[0].fixCount == 60)
    }

    @Test func aShortHaltIsPartOfTheMove() {
        var day = DayBuilder()
        let corner = (52.5290, 13.4050)
        day.stay(at: home, minutes: 30)
        day.walk(from: home, to: corner, minutes: 10)
        day.stay(at: corner, minutes: 2, everySeconds: 30, jitterMeters: 3, accuracy: 8)
        day.walk(from: corner, to: office, minutes: 10)
        day.stay(at: office, minutes: 30)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay,move,stay")
    }

    @Test func aSlowWalkWithVagueFixesIsNoStay() {
        var day = DayBuilder()
        // 1 km in 25 minutes, fixes every 20 s that say ±60 m: each within the moving centre's circle.
        for step in 0..<75 {
            day.points.append(
                TrackPoint(
                    latitude: home.0 + Double(step) * 0.00012 + day.noise() * 0.0003, longitude: home.1,
                    accuracyMeters: 60, recordedAtMicros: day.micros))
            day.micros += 20_000_000
        }
        #expect(stays(summarizeStays(day.points)).isEmpty)
    }

    @Test func aWalkBeforeTheFirstStayAndAfterTheLast() {
        var day = DayBuilder()
        day.walk(from: home, to: office, minutes: 20)
        day.stay(at: office, minutes: 30)
        day.walk(from: office, to: home, minutes: 20)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "move,stay,move")
        let (first, last) = (moves(segments)[0], moves(segments)[1])
        #expect(first.startMicros == day.points[0].recordedAtMicros)
        #expect(first.endMicros == stays(segments)[0].startMicros)
        #expect(last.startMicros == stays(segments)[0].endMicros)
        #expect(last.endMicros == day.points[day.points.count - 1].recordedAtMicros)
    }

    @Test func aStayAcrossTheAntimeridian() {
        var day = DayBuilder()
        day.stay(at: (-16.5, 179.9999), minutes: 30, jitterMeters: 30)
        let segments = summarizeStays(day.points)
        #expect(kinds(segments) == "stay")
        let stay = stays(segments)[0]
        #expect(stay.longitude >= -180 && stay.longitude <= 180)
        #expect(Geodesy.distanceMeters(stay.latitude, stay.longitude, -16.5, 179.9999) < 30)
    }

    @Test func nothingAndOneFix() {
        #expect(summarizeStays([]).isEmpty)
        let one = [TrackPoint(latitude: 1, longitude: 2, accuracyMeters: 5, recordedAtMicros: 7)]
        #expect(kinds(summarizeStays(one)) == "move")
        #expect(moves(summarizeStays(one))[0].fixCount == 1)
        let unknown = [TrackPoint(latitude: 1, longitude: 2, accuracyMeters: nil, recordedAtMicros: 7)]
        #expect(summarizeStays(unknown).isEmpty)
    }
}
