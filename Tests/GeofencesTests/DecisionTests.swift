import Testing

@testable import Geofences

/// The decision rule at every boundary (docs/geofences.md, "The decision"), and the pair fold over it.
@Suite struct DecisionTests {
    typealias D = GeofenceDecision

    @Test func theWholeCircleDecides() {
        // radius 100: inside while distance + accuracy <= 100, outside once distance - accuracy > 100.
        #expect(D.decide(distanceMeters: 0, accuracyMeters: 100, radiusMeters: 100) == .inside)
        // The circle touches the edge from inside.
        #expect(D.decide(distanceMeters: 60, accuracyMeters: 40, radiusMeters: 100) == .inside)
        #expect(D.decide(distanceMeters: 60.5, accuracyMeters: 40, radiusMeters: 100) == .undecided)
        #expect(D.decide(distanceMeters: 60, accuracyMeters: 40.5, radiusMeters: 100) == .undecided)
        // On the edge; then touching it from outside.
        #expect(D.decide(distanceMeters: 100, accuracyMeters: 1, radiusMeters: 100) == .undecided)
        #expect(D.decide(distanceMeters: 140, accuracyMeters: 40, radiusMeters: 100) == .undecided)
        #expect(D.decide(distanceMeters: 140.5, accuracyMeters: 40, radiusMeters: 100) == .outside)
        #expect(D.decide(distanceMeters: 10_000, accuracyMeters: 9_000, radiusMeters: 100) == .outside)
        #expect(D.decide(distanceMeters: 10_000, accuracyMeters: 9_900, radiusMeters: 100) == .undecided)
        // A circle wider than the fence can never be inside it, even at its centre.
        #expect(D.decide(distanceMeters: 0, accuracyMeters: 100.5, radiusMeters: 100) == .undecided)
    }

    @Test func aFixWithoutAccuracyNeverDecides() {
        for distance in [0.0, 50, 100, 1_000_000] {
            #expect(D.decide(distanceMeters: distance, accuracyMeters: nil, radiusMeters: 100) == .undecided)
            #expect(D.decide(distanceMeters: distance, accuracyMeters: 0, radiusMeters: 100) == .undecided)
            #expect(D.decide(distanceMeters: distance, accuracyMeters: -5, radiusMeters: 100) == .undecided)
            #expect(D.decide(distanceMeters: distance, accuracyMeters: .nan, radiusMeters: 100) == .undecided)
            #expect(
                D.decide(distanceMeters: distance, accuracyMeters: .infinity, radiusMeters: 100) == .undecided
            )
        }
        let fence = GeofenceCircle(latitude: 52.52, longitude: 13.405, radiusMeters: 100)
        #expect(fence.decide(latitude: 52.52, longitude: 13.405, accuracyMeters: nil) == .undecided)
        #expect(fence.decide(latitude: 10, longitude: 10, accuracyMeters: nil) == .undecided)
    }

    @Test func distancesOnTheSphere() {
        let fence = GeofenceCircle(latitude: 52.52, longitude: 13.405, radiusMeters: 100)
        // One degree of latitude is 111.195 km on the mean sphere.
        let north = fence.distanceMeters(latitude: 53.52, longitude: 13.405)
        #expect(abs(north - 111_195.08) < 1)
        // 0.001 degree of longitude at 52.52° N: 111,195 m × cos(52.52°) / 1000 = 67.68 m.
        let east = fence.distanceMeters(latitude: 52.52, longitude: 13.406)
        #expect(abs(east - 67.68) < 0.05)
        // The shortcut on the latitude arc agrees with the full computation on both sides of it.
        for (latitude, accuracy) in [(52.5215, 20.0), (52.5225, 100.0), (52.53, 10.0), (52.5209, 5.0)] {
            let full = D.decide(
                distanceMeters: fence.distanceMeters(latitude: latitude, longitude: 13.405),
                accuracyMeters: accuracy, radiusMeters: 100)
            #expect(fence.decide(latitude: latitude, longitude: 13.405, accuracyMeters: accuracy) == full)
        }
        // Across the antimeridian and at a pole the haversine holds.
        let dateLine = GeofenceCircle(latitude: 0, longitude: 179.9995, radiusMeters: 200)
        #expect(dateLine.decide(latitude: 0, longitude: -179.9995, accuracyMeters: 10) == .inside)
        let pole = GeofenceCircle(latitude: 90, longitude: 0, radiusMeters: 200)
        #expect(pole.decide(latitude: 89.9995, longitude: 120, accuracyMeters: 10) == .inside)
    }

    /// Folds decisions at successive seconds; the transitions as (second, enter?).
    func transitions(_ decisions: [D]) -> [(Int, Bool)] {
        var pair = GeofencePairState()
        var out: [(Int, Bool)] = []
        for (second, decision) in decisions.enumerated() {
            if let change = pair.fold(decision, recordedAtMicros: Int64(second) * 1_000_000) {
                out.append((second, change == .inside))
            }
        }
        return out
    }

    @Test func theFirstDecisionSetsTheStateSilentlyAndOnlyChangesAreTransitions() {
        #expect(transitions([.inside, .inside, .outside, .outside, .inside]).map(\.0) == [2, 4])
        #expect(transitions([.inside, .inside, .outside, .outside, .inside]).map(\.1) == [false, true])
        #expect(transitions([.undecided, .undecided, .outside, .inside]).map(\.0) == [3])
        #expect(transitions([.undecided, .undecided]).isEmpty)
    }

    @Test func jitterAroundTheEdgeDoesNotFlap() {
        // A phone at home near the fence's edge: its fixes wander across the border, each with a
        // circle that straddles it. None decides, so nothing is reported until it really leaves.
        let fence = GeofenceCircle(latitude: 52.52, longitude: 13.405, radiusMeters: 100)
        var pair = GeofencePairState()
        var changes: [GeofencePairState.Known] = []
        func fold(_ metresNorth: Double, _ accuracy: Double, _ second: Int) {
            let latitude = 52.52 + metresNorth / 111_195.08
            let decision = fence.decide(latitude: latitude, longitude: 13.405, accuracyMeters: accuracy)
            if let change = pair.fold(decision, recordedAtMicros: Int64(second) * 1_000_000) {
                changes.append(change)
            }
        }
        fold(20, 15, 0)  // clearly inside: the state
        var second = 1
        for offset in stride(from: -30.0, through: 30, by: 7.5) {  // 70 m to 130 m, 35 m circles
            fold(100 + offset, 35, second)
            fold(100 - offset, 35, second + 1)
            second += 2
        }
        #expect(changes.isEmpty)
        #expect(pair.current == .inside)
        fold(400, 30, second)  // gone
        fold(90, 200, second + 1)  // a wide fix on the way back: undecided
        fold(30, 20, second + 2)  // home
        #expect(changes == [.outside, .inside])
    }

    @Test func aFixRecordedBeforeTheHorizonIsRefused() async {
        await #expect(processExitsWith: .failure) {
            var pair = GeofencePairState()
            _ = pair.fold(.inside, recordedAtMicros: 10)
            _ = pair.fold(.outside, recordedAtMicros: 9)
        }
    }
}
